"""Facts about an ONNX model and the tools in use, as recorded in every sidecar.

Why: the daemon never opens the source model, so everything it needs to know
about an artifact's I/O (and which tool versions made it) is taken from the ONNX
graph once, here, and written into the sidecar.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np


def io_specs(model_path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Inputs and outputs as ``{name, dtype, shape}``; -1 marks a symbolic dim.

    Initializers listed as graph inputs (old exporters do that) are left out.
    """
    import onnx
    from onnx import helper

    m = onnx.load(str(model_path), load_external_data=False)
    inits = {i.name for i in m.graph.initializer}

    def spec(v: Any) -> dict[str, Any]:
        t = v.type.tensor_type
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type)).name
        shape = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]
        return {"name": v.name, "dtype": dtype, "shape": shape}

    ins = [spec(v) for v in m.graph.input if v.name not in inits]
    outs = [spec(v) for v in m.graph.output]
    return ins, outs


def tool_versions(*names: str) -> dict[str, str]:
    """Installed versions of the named tools (``tvm`` means the apache-tvm wheel)."""
    dists = {
        "tvm": "apache-tvm",
        "tvm-ffi": "apache-tvm-ffi",
        "onnxruntime": "onnxruntime",
        "onnx": "onnx",
        "onnxconverter-common": "onnxconverter-common",
        "tensorrt": "tensorrt",
    }
    out: dict[str, str] = {}
    for n in names:
        if n == "tvm":
            import tvm  # the runtime compares against tvm.__version__, so record that

            out[n] = tvm.__version__
            continue
        try:
            out[n] = metadata.version(dists.get(n, n))
        except metadata.PackageNotFoundError:
            continue
    try:
        import edged

        out["edged"] = edged.__version__
    except ImportError:  # pragma: no cover
        pass
    return out
