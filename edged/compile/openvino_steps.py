"""The ``openvino`` compile step: OpenVINO IR rungs in fp32, bf16 and INT8.

Why IR files and not the ONNX files themselves: a rung is an artifact with its own
sidecar, golden file and figures, and the ONNX files already carry ORT's. The IR
(``NAME-ov-fp32.xml`` + ``.bin``) is what OpenVINO would build from the ONNX at every
load anyway, written once with full-precision weights (``ov.save_model`` compresses
them to fp16 unless told not to, which would make the "fp32" rung an fp16 one).

* fp32: from the source ONNX; served with ``precision = "f32"`` (the CPU plugin would
  otherwise pick bf16/f16 on CPUs that have it).
* bf16: where the CPU computes bfloat16 natively (AVX-512 BF16 or AMX on x86, BF16 on
  Armv8.6+; OpenVINO's CPU plugin says so in ``OPTIMIZATION_CAPABILITIES``), the fp32 IR
  served with ``precision = "bf16"``: fp32's range with 8 bits of mantissa, often ~2x the
  fp32 throughput at a batch. Its ``.bin`` is a hard link to the fp32 rung's (one copy of
  the weights on disk). Checked like every rung, with bf16's tolerances.
* int8: from the QDQ model the ``int8`` step writes (``NAME-int8.onnx`` in the same
  folder): OpenVINO folds its Q/DQ pairs into its own int8 kernels on x86 (on ARM it
  simulates them in float, so expect no speed-up there). Its outputs differ from ORT's
  int8 more than ORT's int8 differs from fp32, so it is validated at task level like
  every rung and gets its own golden file, never ORT's.

Validation, timing and the ladder are the compile run's, as for every other step.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from edged.backends.support.sidecar import sha256_file, write_sidecar
from edged.compile.context import Context, StepSkipped

STEP = "openvino"
OV_TOOLS = ("openvino", "onnx")


def build(ctx: Context) -> list[Path]:
    """Write the fp32 rung and, when the int8 step's QDQ model is in ``ctx.out``, the
    int8 one."""
    _openvino()  # skipped, saying why, where OpenVINO is not installed
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
        save_ir(model, xml)
        made.append(_sidecar(ctx, xml, precision, model, "f32"))
        if precision == "fp32":
            why_not = bf16_missing()
            if why_not is None:
                made.append(_bf16(ctx, xml, model))
            else:
                ctx.say(f"openvino bf16: skipped — {why_not}")
    return made


def _bf16(ctx: Context, fp32_xml: Path, model: Path) -> Path:
    """The bf16 rung: the fp32 IR under its own name, served with the bf16 hint."""
    xml = ctx.out / f"{ctx.name}-ov-bf16.xml"
    bin_ = xml.with_suffix(".bin")
    bin_.unlink(missing_ok=True)
    try:
        os.link(fp32_xml.with_suffix(".bin"), bin_)
    except OSError:  # another file system, or no hard links: a copy
        shutil.copyfile(fp32_xml.with_suffix(".bin"), bin_)
    shutil.copyfile(fp32_xml, xml)
    return _sidecar(ctx, xml, "bf16", model, "bf16")


def bf16_missing() -> str | None:
    """Why OpenVINO's CPU plugin cannot compute bf16 here (None: it can)."""
    caps = _openvino().Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    if "BF16" in caps:
        return None
    return ("this CPU has no native bfloat16 (OpenVINO's CPU plugin reports "
            f"{', '.join(caps)}; bf16 needs AVX-512 BF16 or AMX on x86, BF16 on Arm)")


def _sidecar(ctx: Context, xml: Path, precision: str, model: Path, hint: str) -> Path:
    meta = ctx.base_meta("openvino", precision, STEP, OV_TOOLS)
    meta.update(
            name=xml.stem, batch_sizes=None, options={"precision": hint},
            target={"kind": "openvino", "device": "CPU", "from": model.name,
                    "weights": "int8 from the QDQ model" if precision == "int8"
                    else "fp32 (not compressed)"},
            files={"bin": {"path": xml.with_suffix(".bin").name,
                           "sha256": sha256_file(xml.with_suffix(".bin"))}},
            sha256=sha256_file(xml),
        )
    write_sidecar(xml, meta)
    return xml


def _openvino() -> Any:
    from edged.backends.openvino import import_openvino
    from edged.errors import ArtifactError

    try:
        return import_openvino()
    except ArtifactError as e:  # not installed: skipped with the pip command, not failed
        raise StepSkipped(str(e)) from None


def save_ir(model: Path, xml: Path) -> None:
    """ONNX -> IR ``.xml`` + ``.bin`` with the weights as they are (``save_model`` would
    compress them to fp16). Written under temporary names and renamed, ``.bin`` first: an
    ``.xml`` is never beside a half-written ``.bin`` (OpenVINO finds the weights by the
    ``.xml``'s name), so a daemon building rungs beside the models it serves never loads
    a torn one. The one IR writer: ``edged compile`` and a sent model's rung build."""
    ov = _openvino()
    tmp = xml.with_name(f".{xml.stem}.tmp.xml")
    ov.save_model(ov.Core().read_model(str(model)), str(tmp), compress_to_fp16=False)
    tmp.with_suffix(".bin").replace(xml.with_suffix(".bin"))
    tmp.replace(xml)
