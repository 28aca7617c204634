"""ONNX Runtime variants: graph-optimized fp32, fp16, static INT8 (QDQ) and dynamic INT8.

Why these choices (measured on x86 CPUs with ONNX Runtime 1.2x; docs/compile.md):

* the optimized model is saved at ORT_ENABLE_EXTENDED, not ALL: ALL bakes in
  hardware-specific layout ops, so the file would not be portable to another CPU;
* fp16 keeps fp32 I/O (``keep_io_types``) so clients and the daemon feed the same
  tensors to every variant; on CPU it mostly runs through casts, it exists for
  GPU/TensorRT 11, whose precision must come from the ONNX model;
* static INT8 is QDQ with U8 activations and per-channel S8 weights: ORT fuses QDQ
  into int8 kernels on x86 (1.45x in the notes), while QOperator S8S8 and dynamic
  quantization were ~5x *slower* on CNNs. Dynamic INT8 is still offered because it
  suits MatMul/LSTM-heavy models and needs no calibration data.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from edged.backends.support.isa import CpuIsa
from edged.backends.support.sidecar import sha256_file, write_sidecar
from edged.compile.context import Context, StepSkipped

ORT_TOOLS = ("onnxruntime", "onnx", "onnxconverter-common")


def optimize(src: Path, out: Path) -> Path:
    """Save ORT's graph-optimized (EXTENDED, portable) form of ``src`` to ``out``."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(out)
    ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    return out


def to_fp16(src: Path, out: Path) -> Path:
    """fp16 weights and compute with fp32 inputs/outputs."""
    import onnx
    from onnxconverter_common import float16

    model = onnx.load(str(src))
    m16 = float16.convert_float_to_float16(model, keep_io_types=True)
    onnx.save(m16, str(out))
    return out


class _Reader:
    """Feeds calibration batches to ``quantize_static`` with a progress bar."""

    def __init__(self, name: str, x: np.ndarray, batch: int, progress: bool) -> None:
        from tqdm import tqdm

        self._bar = tqdm(total=x.shape[0], desc="int8: calibrating", unit="img",
                         disable=not progress, leave=False)
        self._it: Iterator[np.ndarray] = (x[i : i + batch] for i in range(0, x.shape[0], batch))
        self._name = name

    def get_next(self) -> dict[str, np.ndarray] | None:
        b = next(self._it, None)
        if b is None:
            self._bar.close()
            return None
        self._bar.update(b.shape[0])
        return {self._name: b}

    def rewind(self) -> None:  # pragma: no cover - MinMax needs one pass
        raise NotImplementedError


def _preprocessed(src: Path, tmp: Path, symbolic: bool = True) -> Path:
    """Shape inference + fusions ORT recommends before quantizing (into ``tmp``).

    Called with ``tmp`` as the current directory (``_in_temp_dir``): when ORT's symbolic
    shape inference gives up it saves ``sym_shape_infer_temp.onnx`` and a ``<uuid>.data``
    into the current directory, which must not be the user's checkout.
    """
    from onnxruntime.quantization.shape_inference import quant_pre_process

    pre = tmp / "pre.onnx"
    try:
        if symbolic:
            quant_pre_process(str(src), str(pre))
            return pre
    except Exception:  # symbolic shape inference fails on some graphs: retry without it
        pass
    quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
    return pre


@contextlib.contextmanager
def _in_temp_dir() -> Iterator[Path]:
    """A temporary directory that is also the current one while quantizing.

    Why: ORT's quantization tools save scratch files under relative names. The current
    directory is process-wide, so quantization must not run in two threads at once
    (``edged compile`` runs its steps one after the other).
    """
    with tempfile.TemporaryDirectory(prefix="edged-quant-") as td, contextlib.chdir(td):
        yield Path(td)


def to_int8_static(
    src: Path, out: Path, input_name: str, calib: np.ndarray, *, method: str = "minmax",
    batch: int = 16, progress: bool = True, symmetric: bool = False,
    reduce_range: bool = False, op_types: list[str] | None = None,
    nodes_to_exclude: list[str] | None = None, pre_process: str = "auto",
) -> Path:
    """QDQ, U8 activations, per-channel S8 weights (7-bit with ``reduce_range``),
    calibrated on ``calib``.

    ``symmetric``: S8 activations with zero points of 0 and float biases instead, the
    only QDQ form TensorRT parses (its parser refuses non-zero zero points and int32
    bias DequantizeLinear); ``edged.compile.tensorrt_steps`` asks for it.

    ``op_types``: quantize only these operators. Detectors pass ``["Conv"]``: their
    exported box/score decode (sigmoid, grid offsets, stride multiplies, concat) loses
    almost all its resolution in 8 bits (the trained digit detector fell from mAP@0.5
    91.8 to 83.1 with everything quantized, and kept 91.7 with Conv only).

    ``nodes_to_exclude``: these nodes stay float32 (a decode tail found by name).

    ``pre_process``: ``"auto"`` runs ORT's ``quant_pre_process`` and retries without
    symbolic shape inference when that fails; ``"no_symbolic"`` skips symbolic shape
    inference from the start (what the shipped models were built with);
    ``"none"`` quantizes ``src`` as it is (graphs with ``Loop`` bodies, which the
    pre-processing does not handle).
    """
    if pre_process not in ("auto", "no_symbolic", "none"):
        raise ValueError(f"pre_process must be auto, no_symbolic or none, not {pre_process!r}")
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    methods = {
        "minmax": CalibrationMethod.MinMax,
        "entropy": CalibrationMethod.Entropy,
        "percentile": CalibrationMethod.Percentile,
    }

    class Reader(_Reader, CalibrationDataReader):
        pass

    src, out = src.resolve(), out.resolve()
    with _in_temp_dir() as td:
        pre = src if pre_process == "none" else _preprocessed(src, td, pre_process == "auto")
        quantize_static(
            str(pre), str(out), Reader(input_name, calib, batch, progress),
            quant_format=QuantFormat.QDQ, per_channel=True,
            activation_type=QuantType.QInt8 if symmetric else QuantType.QUInt8,
            weight_type=QuantType.QInt8, calibrate_method=methods[method],
            reduce_range=reduce_range, op_types_to_quantize=op_types,
            nodes_to_exclude=nodes_to_exclude,
            extra_options={"ActivationSymmetric": True, "WeightSymmetric": True,
                           "QuantizeBias": False} if symmetric else None,
        )
    return out


def to_int8_dynamic(src: Path, out: Path) -> Path:
    """Weights quantized ahead of time, activations at run time (no calibration data)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src, out = src.resolve(), out.resolve()
    with _in_temp_dir() as td:
        pre = _preprocessed(src, td)
        quantize_dynamic(str(pre), str(out), weight_type=QuantType.QInt8)
    return out


# -- the steps (edged.compile.steps) ------------------------------------------------------

def build_optimized(ctx: Context) -> list[Path]:
    path = optimize(ctx.src, ctx.out / f"{ctx.name}-fp32-opt.onnx")
    return [_record(ctx, path, "fp32", "ort-opt",
                    {"kind": "cpu", "graph_optimization": "extended"})]


def build_fp16(ctx: Context) -> list[Path]:
    return [_record(ctx, to_fp16(ctx.src, ctx.out / f"{ctx.name}-fp16.onnx"), "fp16", "fp16",
                    {"kind": "any"})]


def seven_bit_weights(choice: str, cpu: CpuIsa) -> bool:
    """``int8_reduce_range`` on/off, or auto: 7-bit where 8-bit weights saturate."""
    return choice == "on" or (choice == "auto" and cpu.saturates_u8s8)


def build_int8_static(ctx: Context) -> list[Path]:
    if ctx.calib is None:
        raise StepSkipped("no calibration data: pass --calib or --val, or name it in model.json")
    o = ctx.opts
    reduce = seven_bit_weights(o.int8_reduce_range, ctx.cpu)
    if o.int8_reduce_range == "auto" and reduce:
        ctx.say("int8: this CPU has no VNNI (U8S8 would saturate): 7-bit weights "
                "(--int8-reduce-range off to override)")
    path = to_int8_static(
        ctx.src, ctx.out / f"{ctx.name}-int8.onnx", ctx.inputs[0]["name"], ctx.calib.x,
        method=o.calib_method, progress=o.progress, reduce_range=reduce,
        op_types=["Conv"] if ctx.detect is not None else None)
    bits = "7-bit (reduce_range)" if reduce else "S8"
    scope = ", Conv only (decode stays float)" if ctx.detect is not None else ""
    return [_record(ctx, path, "int8", "int8", {
        "kind": "cpu", "quantization": "static QDQ, U8 activations, per-channel "
        f"{bits} weights, {o.calib_method}{scope}",
        "calibration": ctx.calib.source, "reduce_range": reduce})]


def build_int8_dynamic(ctx: Context) -> list[Path]:
    path = to_int8_dynamic(ctx.src, ctx.out / f"{ctx.name}-dynint8.onnx")
    return [_record(ctx, path, "int8-dynamic", "dynamic-int8", {"kind": "cpu"})]


def _record(ctx: Context, path: Path, precision: str, step: str,
            target: dict[str, Any]) -> Path:
    meta = ctx.base_meta("onnxruntime", precision, step, ORT_TOOLS)
    meta.update(name=path.stem, target=target, batch_sizes=None, options={},
                sha256=sha256_file(path))
    write_sidecar(path, meta)
    return path
