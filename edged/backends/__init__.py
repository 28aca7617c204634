"""Backend lookup by name. Modules are imported lazily: a CPU-only device never
imports TensorRT or CUDA, and a missing optional runtime is a clear error naming
the extra to install, raised only when a config actually asks for that backend.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from edged.errors import ArtifactError

#: backend name in config -> (module, pip extra that provides its runtime)
BACKENDS: dict[str, tuple[str, str]] = {
    "onnxruntime": ("edged.backends.onnxruntime", "edged (core)"),
    "tvm": ("edged.backends.tvm", "edged[tvm]"),
    "tensorrt": ("edged.backends.tensorrt", "edged[tensorrt]"),
    "openvino": ("edged.backends.openvino", "edged[openvino]"),
    "null": ("edged.backends.null", "edged (core)"),  # computes nothing: for tests
}


def backend_module(name: str) -> ModuleType:
    """The module implementing backend ``name``.

    Each module provides ``Options`` (a BackendOptions subclass with ``from_table``) and
    ``open_backend(path: Path, options: Options, max_batch_size: int) -> Backend``.
    """
    if name not in BACKENDS:
        raise ArtifactError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")
    module, _extra = BACKENDS[name]
    return importlib.import_module(module)
