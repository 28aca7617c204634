"""The ``openvino`` compile step: OpenVINO IR rungs in fp32 and INT8.

Why IR files and not the ONNX files themselves: a rung is an artifact with its own
sidecar, golden file and figures, and the ONNX files already carry ORT's. The IR
(``NAME-ov-fp32.xml`` + ``.bin``) is what OpenVINO would build from the ONNX at every
load anyway, written once with full-precision weights (``ov.save_model`` compresses
them to fp16 unless told not to, which would make the "fp32" rung an fp16 one).

* fp32: from the source ONNX; served with ``precision = "f32"`` (the CPU plugin would
  otherwise pick bf16/f16 on CPUs that have it).
* int8: from the QDQ model the ``int8`` step writes (``NAME-int8.onnx`` in the same
  folder): OpenVINO folds its Q/DQ pairs into its own int8 kernels on x86 (on ARM it
  simulates them in float, so expect no speed-up there). Its outputs differ from ORT's
  int8 more than ORT's int8 differs from fp32, so it is validated at task level like
  every rung and gets its own golden file, never ORT's.

Validation, timing and the ladder are the pipeline's, as for every other step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edged.backends.support.sidecar import sha256_file, write_sidecar
from edged.compile.context import Context, StepSkipped

STEP = "openvino"
OV_TOOLS = ("openvino", "onnx")


def build(ctx: Context) -> list[Path]:
    """Write the fp32 rung and, when the int8 step's QDQ model is in ``ctx.out``, the
    int8 one."""
    ov = _openvino()
    qdq = ctx.out / f"{ctx.name}-int8.onnx"
    jobs = [("fp32", ctx.src)]
    if qdq.is_file():
        jobs.append(("int8", qdq))
    else:
        ctx.say(f"openvino int8: skipped — no {qdq.name} in {ctx.out} (the int8 step writes "
                "it: --steps int8,openvino)")
    made: list[Path] = []
    for precision, model in jobs:
        xml = ctx.out / f"{ctx.name}-ov-{precision}.xml"
        _save_ir(ov, model, xml)
        meta = ctx.base_meta("openvino", precision, STEP, OV_TOOLS)
        meta.update(
            name=xml.stem, batch_sizes=None, options={"precision": "f32"},
            target={"kind": "openvino", "device": "CPU", "from": model.name,
                    "weights": "fp32 (not compressed)" if precision == "fp32"
                    else "int8 from the QDQ model"},
            files={"bin": {"path": xml.with_suffix(".bin").name,
                           "sha256": sha256_file(xml.with_suffix(".bin"))}},
            sha256=sha256_file(xml),
        )
        write_sidecar(xml, meta)
        made.append(xml)
    return made


def _openvino() -> Any:
    from edged.backends.openvino import import_openvino
    from edged.errors import ArtifactError

    try:
        return import_openvino()
    except ArtifactError as e:  # not installed: skipped with the pip command, not failed
        raise StepSkipped(str(e)) from None


def _save_ir(ov: Any, model: Path, xml: Path) -> None:
    """ONNX -> IR ``.xml`` + ``.bin``, weights as they are (no fp16 compression)."""
    m = ov.Core().read_model(str(model))
    ov.save_model(m, str(xml), compress_to_fp16=False)
