"""The TensorRT step of ``edged compile``: one plan per precision (fp32, fp16, int8).

Why each precision is made the way it is:

* fp32: the source model as it is.
* fp16: on TensorRT 10 (JetPack 6) the fp32 model with the FP16 builder flag, so
  TensorRT picks FP16 kernels layer by layer; TensorRT 11 removed the flag, so there
  the fp16-converted ONNX (fp32 I/O, written by the ``fp16`` step, or made here) is
  built strongly typed.
* int8: explicit quantization from a Q/DQ model, no calibrator (deprecated in 10,
  removed in 11). TensorRT parses only *symmetric* Q/DQ: zero points of 0, signed
  int8, no int32 bias DequantizeLinear. The ``int8`` step's model (U8 activations,
  the fast form for ONNX Runtime on x86) fails that, so unless it already passes,
  an S8S8 symmetric twin is quantized from the same calibration data and method and
  that is what TensorRT parses. Without calibration data the int8 plan is skipped.
  The twin gets no sidecar, so it is never an ONNX Runtime variant: its Q/DQ
  semantics are right (99.6% top-1 agreement with fp32 on the digits model when ORT
  runs it unfused), but ORT's fused x86 S8S8 kernels saturate on it (64%).

Plans are named by ``tensorrt_keys.plan_file_name`` (model, precision, GPU, L4T,
TensorRT version) and share one timing cache per device, beside the artifacts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edged.backends.tensorrt.keys import (
    PRECISIONS,
    DeviceKey,
    plan_file_name,
    plan_variant_name,
    timing_cache_name,
)
from edged.compile.context import Context, StepSkipped

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recipe:
    """Which ONNX file a precision's plan is parsed from, and with which builder flag."""

    precision: str
    onnx: Path
    fp16_flag: bool = False


@dataclass
class PlanResults:
    """What one run of the step made, skipped (with why) and failed (with the error)."""

    made: list[Path] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


def recipe(precision: str, trt_major: int, src: Path, fp16_onnx: Path | None = None,
           int8_onnx: Path | None = None) -> Recipe:
    """The recipe for ``precision`` on TensorRT ``trt_major`` (see the module docstring).

    Raises ValueError naming the missing input model.
    """
    if precision == "fp32":
        return Recipe("fp32", src)
    if precision == "fp16":
        if trt_major < 11:
            return Recipe("fp16", src, fp16_flag=True)
        if fp16_onnx is None:
            raise ValueError(f"TensorRT {trt_major}.x has no FP16 builder flag: an fp16 plan "
                             "needs the fp16-converted ONNX model")
        return Recipe("fp16", fp16_onnx)
    if precision == "int8":
        if int8_onnx is None:
            raise ValueError("an int8 plan needs a symmetric Q/DQ ONNX model "
                             "(calibration data: --calib or --val)")
        return Recipe("int8", int8_onnx)
    raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}; got {precision!r}")


# -- Q/DQ models TensorRT can parse ---------------------------------------------------------


def qdq_problems(onnx_path: Path) -> list[str]:
    """Why TensorRT's ONNX parser would refuse this Q/DQ model (empty: it would not).

    Mirrors the parser's checks: every Q/DQ zero point must be all zeros (TensorRT
    quantizes symmetrically), of a signed type (no uint8), and no int32 tensor may be
    dequantized (ONNX Runtime's quantized biases). A model without Q/DQ nodes is
    reported too, since it is not an int8 model at all.
    """
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(onnx_path), load_external_data=False)
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    consts = {n.output[0]: n for n in graph.node if n.op_type == "Constant"}
    nodes = [n for n in graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    if not nodes:
        return [f"{onnx_path.name} has no QuantizeLinear/DequantizeLinear nodes"]
    nonzero, unsigned, int32 = set(), set(), set()
    tp = onnx.TensorProto
    for n in nodes:
        zp_name = n.input[2] if len(n.input) > 2 else ""
        if zp_name:
            if zp_name in inits:
                zp = numpy_helper.to_array(inits[zp_name])
                dtype = inits[zp_name].data_type
            elif zp_name in consts:
                t = next(a.t for a in consts[zp_name].attribute if a.name == "value")
                zp, dtype = numpy_helper.to_array(t), t.data_type
            else:
                continue
            if dtype == tp.UINT8:
                unsigned.add(n.name or zp_name)
            if dtype == tp.INT32:
                int32.add(n.name or zp_name)
            elif np.any(zp != 0):
                nonzero.add(n.name or zp_name)
        if n.op_type == "DequantizeLinear" and n.input[0] in inits \
                and inits[n.input[0]].data_type == tp.INT32:
            int32.add(n.name or n.input[0])
    problems = []
    if nonzero:
        problems.append(f"{len(nonzero)} Q/DQ node(s) with non-zero zero points (TensorRT only "
                        f"supports symmetric quantization), e.g. {sorted(nonzero)[0]!r}")
    if unsigned:
        problems.append(f"{len(unsigned)} Q/DQ node(s) quantize to uint8 (TensorRT needs int8), "
                        f"e.g. {sorted(unsigned)[0]!r}")
    if int32:
        problems.append(f"{len(int32)} DequantizeLinear node(s) of int32 (quantized biases; "
                        f"TensorRT dequantizes int8/fp8/fp4 only), e.g. {sorted(int32)[0]!r}")
    return problems


def int8_source(out_dir: Path, name: str, src: Path, input_name: str, calib: Any,
                calib_method: str = "minmax", progress: bool = False) -> tuple[Path | None, str]:
    """The Q/DQ model the int8 plan is parsed from, and a note saying which and why.

    Uses the ``int8`` step's ``NAME-int8.onnx`` when TensorRT can parse it; otherwise
    writes ``NAME-int8-s8s8.onnx`` (symmetric, no sidecar, so it is no ladder variant
    of its own) from ``calib`` (a Dataset). (None, reason) without calibration data.
    """
    ort_int8 = out_dir / f"{name}-int8.onnx"
    problems = qdq_problems(ort_int8) if ort_int8.is_file() else ["not built"]
    if not problems:
        return ort_int8, f"parsed {ort_int8.name} (symmetric Q/DQ)"
    if calib is None:
        return None, "no calibration data for the symmetric Q/DQ model (pass --calib or --val)"
    from edged.compile import ort_steps

    twin = out_dir / f"{name}-int8-s8s8.onnx"
    ort_steps.to_int8_static(src, twin, input_name, calib.x, method=calib_method,
                             progress=progress, symmetric=True)
    left = qdq_problems(twin)
    if left:
        raise RuntimeError(f"{twin}: still not parseable by TensorRT: {'; '.join(left)}")
    why = "not built" if problems == ["not built"] else problems[0]
    return twin, (f"quantized {twin.name} (symmetric S8S8 Q/DQ, {calib_method}, "
                  f"{calib.source}) because {ort_int8.name}: {why}")


def fp16_source(out_dir: Path, name: str, src: Path) -> Path:
    """The ``fp16`` step's model, or the same conversion written here (TensorRT 11)."""
    made = out_dir / f"{name}-fp16.onnx"
    if made.is_file():
        return made
    from edged.compile import ort_steps

    return ort_steps.to_fp16(src, out_dir / f"{name}-fp16-trt.onnx")


# -- the step -------------------------------------------------------------------------------


def build_plans(src: Path, out_dir: Path, name: str, *, precisions: list[str], max_batch: int,
                input_name: str, calib: Any = None, calib_method: str = "minmax",
                device: int = 0, progress: bool = False) -> PlanResults:
    """Build every precision's plan for the GPU here into ``out_dir`` (see module doc).

    Raises GpuUnavailable (nothing can be built here); a precision that cannot be made
    is in ``skipped``, one whose build failed in ``failed``, so the others still land.
    Each plan's sidecar gets its ladder ``name``, ``step`` and the recipe used.
    """
    from edged.backends.support.sidecar import sha256_file, update_sidecar
    from edged.compile import tensorrt_build as trt_build

    key: DeviceKey = trt_build.device_key(device)
    major = int(key.tensorrt.split(".")[0])
    cache = out_dir / timing_cache_name(key)
    results = PlanResults()
    for precision in precisions:
        try:
            if precision == "int8":
                qdq, note = int8_source(out_dir, name, src, input_name, calib, calib_method,
                                        progress)
                if qdq is None:
                    results.skipped[precision] = note
                    continue
                r = recipe(precision, major, src, int8_onnx=qdq)
            elif precision == "fp16" and major >= 11:
                r = recipe(precision, major, src, fp16_onnx=fp16_source(out_dir, name, src))
                note = f"parsed {r.onnx.name} (fp16-converted; TensorRT {major} has no FP16 flag)"
            else:
                r = recipe(precision, major, src)
                note = f"parsed {src.name}" + (" with the FP16 builder flag" if r.fp16_flag
                                               else "")
            plan = out_dir / plan_file_name(name, precision, key)
            trt_build.build_engine(r.onnx, plan, min_batch=1, opt_batch=max_batch,
                                   max_batch=max_batch, timing_cache=cache, device=device,
                                   fp16=r.fp16_flag)
        except trt_build.GpuUnavailable:
            raise
        except Exception as e:  # one precision failing must not lose the others
            results.failed[precision] = f"{type(e).__name__}: {e}"
            continue
        # The source is the model the user compiles (the rebuild command names it), not
        # the intermediate ONNX parsed for this precision, which the recipe records.
        update_sidecar(plan, name=plan_variant_name(name, precision), step="tensorrt",
                       source={"path": str(src), "sha256": sha256_file(src)},
                       precision=precision, options={"device": device},
                       recipe={"onnx": r.onnx.name, "onnx_sha256": sha256_file(r.onnx),
                               "fp16_builder_flag": r.fp16_flag,
                               "note": note})
        results.made.append(plan)
    return results


def build_step(ctx: Context) -> list[Path]:
    """The ``tensorrt`` step: ``build_plans`` for this GPU; skipped without one."""
    from edged.compile import tensorrt_build as trt_build

    o = ctx.opts
    try:
        res = build_plans(ctx.src, ctx.out, ctx.name, precisions=list(o.trt_precisions),
                          max_batch=o.max_batch, input_name=ctx.inputs[0]["name"],
                          calib=ctx.calib, calib_method=o.calib_method, progress=o.progress)
    except trt_build.GpuUnavailable as e:
        raise StepSkipped(str(e)) from e
    for precision, why in res.skipped.items():
        ctx.say(f"tensorrt {precision}: skipped — {why}")
    for precision, err in res.failed.items():
        ctx.failures.append(f"tensorrt {precision}")
        ctx.say(f"tensorrt {precision}: FAILED — {err}")
    return res.made
