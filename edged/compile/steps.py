"""The build steps ``edged compile`` knows, in the order ``all`` runs them.

Why a table of names: adding a runtime's variants is one entry here and one module
with a ``build(ctx) -> list[Path]`` function (as ``edged.backends`` finds backends by
name). Modules are imported only when their step runs, so a CPU-only machine never
imports TVM or TensorRT, and this table (read by ``edged --help``) stays cheap.

A build function writes its artifacts (each with a sidecar) into ``ctx.out`` and
returns their paths; the run (``edged.compile.run``) then validates and times each one. It raises
``edged.compile.context.StepSkipped`` when it cannot run on this machine (no GPU, no
calibration data): reported, not a failure, unless it was the only step asked for.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    name: str
    builder: str  # "module:function", imported when the step runs
    help: str
    needs_calibration: bool = False  # skipped (with a note) without calibration data


STEPS: tuple[Step, ...] = (
    Step("ort-opt", "edged.compile.ort_steps:build_optimized",
         "ONNX Runtime graph-optimized fp32 (portable EXTENDED level)"),
    Step("fp16", "edged.compile.ort_steps:build_fp16", "fp16 weights, fp32 I/O"),
    Step("int8", "edged.compile.ort_steps:build_int8_static",
         "static QDQ INT8, calibrated", needs_calibration=True),
    Step("dynamic-int8", "edged.compile.ort_steps:build_int8_dynamic",
         "INT8 weights, activations quantized at run time"),
    Step("openvino", "edged.compile.openvino_steps:build",
         "OpenVINO IR, fp32 and INT8 (from the int8 step's QDQ model)"),
    Step("tvm", "edged.compile.tvm_steps:build", "TVM Relax libraries (.so)"),
    Step("tensorrt", "edged.compile.tensorrt_steps:build_step",
         "TensorRT plans for this GPU (fp32, fp16, int8)"),
)
STEP_NAMES: tuple[str, ...] = tuple(s.name for s in STEPS)
#: not a build: re-check every artifact already in the output directory
EXTRA_STEPS: tuple[str, ...] = ("validate",)


def find(name: str) -> Step:
    return next(s for s in STEPS if s.name == name)
