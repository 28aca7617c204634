"""Build a TensorRT ``.engine`` plan from ONNX, with the sidecar the daemon checks.

Why here and not at serve time: building takes seconds to minutes and needs the
target GPU, so it happens once per device (``edged compile``); the daemon only
deserializes. A plan is tied to the TensorRT version and GPU compute capability it
was built with, so the sidecar records both (and the plan's size and sha256) and
``edged.backends.tensorrt.backend`` refuses a mismatched or truncated plan with a clear
message instead of TensorRT's ``None``.

Precision: TensorRT 11 networks are always strongly typed and the FP16/INT8 builder
flags are gone, so reduced precision must come from the ONNX model itself (an
fp16-converted model, or explicit Q/DQ nodes). On TensorRT 10 we build the same way
(strongly typed when the ONNX is already reduced-precision, so both versions honour
the model's types), and additionally allow the old FP16 builder flag on request.
"""

from __future__ import annotations

import hashlib
import logging
import platform
import time
from pathlib import Path
from typing import Any

from edged.backends.support.sidecar import sha256_file, write_sidecar
from edged.backends.tensorrt.cuda import (
    GpuUnavailableError,
    check_cuda,
    cuda_device_info,
    import_cudart,
    import_tensorrt,
    trt_logger,
    trt_messages,
)
from edged.backends.tensorrt.keys import DeviceKey, l4t_release

log = logging.getLogger(__name__)

DEFAULT_WORKSPACE = 1 << 30  # a limit on TensorRT's scratch memory, not an allocation


class GpuUnavailable(GpuUnavailableError):
    """TensorRT or a usable CUDA device is missing; the message says which and why.

    The compile CLI catches this and reports the TensorRT variant as skipped.
    """


class EngineBuildError(RuntimeError):
    """The ONNX model could not be parsed or TensorRT could not build a plan for it."""


# -- precision from the ONNX model (no TensorRT needed) --------------------------------

_QDQ_OPS = {"QuantizeLinear", "DequantizeLinear"}


def onnx_precision(onnx_path: Path) -> str:
    """What precision the ONNX model itself asks for: fp32, fp16, bf16, mixed, int8, fp8, int4.

    TensorRT 11 (and a strongly typed TensorRT 10 network) computes in the model's own
    types, so this *is* the plan's precision; it goes in the sidecar so the governor's
    variant ladder and ``edged models`` show it. Returns "unknown" without the onnx
    package (the compile extra) or when onnx cannot read the file.
    """
    try:
        import onnx
    except ImportError:
        return "unknown"
    try:
        model = onnx.load(str(onnx_path), load_external_data=False)
    except Exception as e:  # unparsable: TensorRT's parser reports it properly later
        log.debug("cannot read %s with onnx: %s", onnx_path, e)
        return "unknown"
    graph = model.graph
    tp = onnx.TensorProto
    inits = {i.name: i for i in graph.initializer}

    qdq = [n for n in graph.node if n.op_type in _QDQ_OPS]
    if qdq:
        kinds: set[str] = set()
        for n in qdq:
            zp = inits.get(n.input[2]) if len(n.input) > 2 else None
            dtype = zp.data_type if zp is not None else None
            if dtype is None:
                for a in n.attribute:
                    if a.name == "output_dtype" and a.i:
                        dtype = a.i
            if dtype in (tp.FLOAT8E4M3FN, tp.FLOAT8E4M3FNUZ, tp.FLOAT8E5M2, tp.FLOAT8E5M2FNUZ):
                kinds.add("fp8")
            elif dtype in (getattr(tp, "INT4", -1), getattr(tp, "UINT4", -1)):
                kinds.add("int4")
            else:
                kinds.add("int8")
        for k in ("int4", "fp8", "int8"):
            if k in kinds:
                return k

    counts = {"fp32": 0, "fp16": 0, "bf16": 0}
    names = {tp.FLOAT: "fp32", tp.FLOAT16: "fp16", tp.BFLOAT16: "bf16"}
    for init in graph.initializer:
        kind = names.get(init.data_type)
        if kind:
            n = 1
            for d in init.dims:
                n *= int(d)
            counts[kind] += n
    for n in graph.node:  # a Cast to fp16 with fp32 weights is still a mixed model
        if n.op_type == "Cast":
            for a in n.attribute:
                if a.name == "to" and a.i in (tp.FLOAT16, tp.BFLOAT16):
                    counts[names[a.i]] += 1
    low = counts["fp16"] + counts["bf16"]
    if low == 0:
        return "fp32"
    if counts["fp32"] == 0 or low >= 0.9 * (low + counts["fp32"]):
        return "bf16" if counts["bf16"] > counts["fp16"] else "fp16"
    return "mixed"


# -- decisions (pure) ----------------------------------------------------------------------


def network_typing(trt_major: int, model_precision: str, fp16_flag: bool) -> tuple[bool, bool]:
    """``(strongly_typed, set_fp16_flag)`` for a build.

    TensorRT 11 is always strongly typed and has no precision flags. On TensorRT 10 a
    model that already carries reduced precision (fp16 weights, Q/DQ nodes) is built
    strongly typed, as NVIDIA advises for explicit quantization ("precision-control
    build flags are not required and should not be specified"), so both versions
    honour the model's types; an fp32 model may instead get the FP16 builder flag,
    which lets TensorRT pick FP16 kernels layer by layer (weakly typed).
    """
    if fp16_flag:
        if trt_major >= 11:
            raise EngineBuildError(
                f"TensorRT {trt_major}.x has no FP16 builder flag (networks are strongly "
                "typed): convert the ONNX model to fp16 first and build that")
        if model_precision not in ("fp32", "unknown"):
            raise EngineBuildError(
                f"the FP16 builder flag is for fp32 models; this model is already "
                f"{model_precision}: build it without fp16=True")
        return False, True
    if trt_major >= 11:
        return True, False
    return model_precision not in ("fp32", "unknown"), False


def device_key(device: int = 0) -> DeviceKey:
    """The key plans built here carry (GPU, SM, L4T, TensorRT); GpuUnavailable if none."""
    try:
        trt = import_tensorrt()
        dev = cuda_device_info(device)
    except GpuUnavailableError as e:
        raise GpuUnavailable(str(e)) from e
    return DeviceKey(gpu=dev["name"], compute_capability=dev["compute_capability"],
                     tensorrt=trt.__version__, l4t=l4t_release())


# -- the build ---------------------------------------------------------------------------


def _spec(trt: Any, t: Any) -> dict[str, Any]:
    try:
        import numpy as np

        dtype = np.dtype(trt.nptype(t.dtype)).name
    except TypeError:
        dtype = str(t.dtype).rsplit(".", 1)[-1].lower()
    return {"name": t.name, "dtype": dtype, "shape": [int(d) for d in t.shape]}


def _write_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as f:
        f.write(data)
    tmp.replace(path)


def build_engine(
    onnx_path: Path,
    out_path: Path,
    *,
    min_batch: int,
    opt_batch: int,
    max_batch: int,
    timing_cache: Path | None = None,
    device: int = 0,
    workspace_bytes: int = DEFAULT_WORKSPACE,
    fp16: bool = False,
    version_compatible: bool = False,
    hardware_compatibility: str | None = None,
) -> Path:
    """Build ``out_path`` (a TensorRT plan) from ``onnx_path`` and write its sidecar.

    One optimization profile (index 0) spans ``min_batch..max_batch`` (tuned for
    ``opt_batch``) for every input whose dim 0 is dynamic; inputs with static shapes
    are built as they are. ``timing_cache`` is loaded if present and saved after the
    build, which makes rebuilds on the same device much faster.

    fp16: TensorRT 10 only: let the builder pick FP16 kernels for an fp32 model when
        the GPU has fast FP16. TensorRT 11 removed the flag: convert the ONNX instead.
    version_compatible: embed the lean runtime so later TensorRT versions load the plan
        (the daemon must then set ``version_compatible = true``; some speed cost).
    hardware_compatibility: "ampere_plus" to run on any SM >= 8.0 (some speed cost).

    Raises GpuUnavailable when TensorRT or a CUDA device is missing, EngineBuildError
    when parsing or building fails (with every parser/builder error in the message),
    ValueError/FileNotFoundError for bad arguments.
    """
    onnx_path, out_path = Path(onnx_path), Path(out_path)
    if not (1 <= min_batch <= opt_batch <= max_batch):
        raise ValueError(
            f"batch range must satisfy 1 <= min <= opt <= max; got min={min_batch} "
            f"opt={opt_batch} max={max_batch}"
        )
    if hardware_compatibility not in (None, "none", "ampere_plus"):
        raise ValueError(
            "hardware_compatibility must be 'none' or 'ampere_plus'; "
            f"got {hardware_compatibility!r}"
        )
    if not onnx_path.is_file():
        raise FileNotFoundError(f"ONNX model not found: {onnx_path}")

    try:
        trt = import_tensorrt()
        dev = cuda_device_info(device)
    except GpuUnavailableError as e:
        raise GpuUnavailable(str(e)) from e
    major = int(trt.__version__.split(".")[0])
    precision = onnx_precision(onnx_path)
    key = DeviceKey(gpu=dev["name"], compute_capability=dev["compute_capability"],
                    tensorrt=trt.__version__, l4t=l4t_release())
    use_int8_flag = False
    started = time.monotonic()

    cudart = import_cudart()  # importable: cuda_device_info succeeded
    check_cuda(cudart.cudaSetDevice(device), f"cudaSetDevice({device})")
    with trt_messages() as msgs:
        try:
            builder = trt.Builder(trt_logger(trt))
        except TypeError as e:  # pybind11 factory returned nullptr: no CUDA
            raise GpuUnavailable(
                f"no usable CUDA device: TensorRT could not create a Builder ({e})"
                + (f"; TensorRT said: {msgs[-1]}" if msgs else "")
            ) from e

        strongly_typed, use_fp16_flag = network_typing(major, precision, fp16)
        if use_fp16_flag and not getattr(builder, "platform_has_fast_fp16", True):
            log.warning("%s has no fast FP16; the FP16 flag is set but TensorRT may keep FP32",
                        dev["name"])

        # create_network(0): explicit batch is the default in 10 and the only mode in 11;
        # 11 is always strongly typed, 10 only when asked (network_typing decides).
        flags = 0
        if major < 10:  # TensorRT 8.x (JetPack 5 / 6.0) still defaults to implicit batch
            flags |= 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
        st_flag = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
        if major < 11 and strongly_typed:
            if st_flag is None:
                strongly_typed = False  # TensorRT 8.x: Q/DQ still works weakly typed
                if precision == "int8":
                    use_int8_flag = True
            else:
                flags |= 1 << int(st_flag)
        network = builder.create_network(flags)
        parser = trt.OnnxParser(network, trt_logger(trt))
        if not parser.parse_from_file(str(onnx_path)):
            errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
            raise EngineBuildError(
                f"TensorRT {trt.__version__} could not parse {onnx_path}:\n  "
                + "\n  ".join(errors or msgs or ["(no parser error reported)"])
            )

        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_bytes))
        if use_fp16_flag:
            config.set_flag(trt.BuilderFlag.FP16)
            precision = "fp16"
        if use_int8_flag:  # TensorRT 8.x explicit quantization needs the INT8 flag
            config.set_flag(trt.BuilderFlag.INT8)
        if version_compatible:
            config.set_flag(trt.BuilderFlag.VERSION_COMPATIBLE)
        if hardware_compatibility == "ampere_plus":
            config.hardware_compatibility_level = trt.HardwareCompatibilityLevel.AMPERE_PLUS

        inputs = [network.get_input(i) for i in range(network.num_inputs)]
        outputs = [network.get_output(i) for i in range(network.num_outputs)]
        dynamic = []
        static_batches = set()
        for t in inputs:
            shape = [int(d) for d in t.shape]
            if getattr(t, "is_shape_tensor", False):
                raise EngineBuildError(f"{onnx_path}: shape-tensor input {t.name!r} unsupported")
            if shape and shape[0] < 0:
                if any(d < 0 for d in shape[1:]):
                    raise EngineBuildError(
                        f"{onnx_path}: input {t.name!r} has dynamic dims besides the batch "
                        f"{shape}; fix them in the ONNX (e.g. onnxruntime's "
                        "make_dynamic_shape_fixed) before building"
                    )
                dynamic.append((t.name, shape))
            elif shape:
                static_batches.add(shape[0])
        if dynamic:
            profile = builder.create_optimization_profile()
            for name, shape in dynamic:
                rest = tuple(shape[1:])
                profile.set_shape(name, (min_batch, *rest), (opt_batch, *rest), (max_batch, *rest))
            if config.add_optimization_profile(profile) < 0:
                raise EngineBuildError(f"{onnx_path}: TensorRT rejected the batch profile")
            batch_sizes = None
            batch_profile: dict[str, int] | None = {
                "min": min_batch,
                "opt": opt_batch,
                "max": max_batch,
            }
        else:
            batch_sizes = sorted(static_batches) or None
            batch_profile = None
            log.info("%s has a static batch %s; min/opt/max ignored", onnx_path, batch_sizes)

        cache_loaded = False
        if timing_cache is not None:
            blob = timing_cache.read_bytes() if timing_cache.is_file() else b""
            cache = config.create_timing_cache(blob)
            if not config.set_timing_cache(cache, ignore_mismatch=False):
                log.warning(
                    "%s: timing cache is from another device/version; starting afresh", timing_cache
                )
                config.set_timing_cache(config.create_timing_cache(b""), ignore_mismatch=False)
            else:
                cache_loaded = bool(blob)

        plan = builder.build_serialized_network(network, config)
        if plan is None:
            raise EngineBuildError(
                f"TensorRT {trt.__version__} could not build a plan from {onnx_path} on "
                f"{dev['name']}:\n  " + "\n  ".join(msgs[-10:] or ["(no error reported)"])
            )
        data = bytes(memoryview(plan))
        out_path.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(out_path, data)
        if timing_cache is not None:
            timing_cache.parent.mkdir(parents=True, exist_ok=True)
            _write_atomic(timing_cache, bytes(memoryview(config.get_timing_cache().serialize())))
        in_specs = [_spec(trt, t) for t in inputs]
        out_specs = [_spec(trt, t) for t in outputs]

    seconds = round(time.monotonic() - started, 2)
    write_sidecar(
        out_path,
        {
            "source": {"path": str(onnx_path), "sha256": sha256_file(onnx_path)},
            "backend": "tensorrt",
            "target": {
                "gpu": dev["name"],
                "compute_capability": dev["compute_capability"],
                "sm": dev["sm"],
                "arch": platform.machine(),
                "l4t": key.l4t,
                "key": key.slug(),
                "hardware_compatibility": hardware_compatibility or "none",
                "version_compatible": bool(version_compatible),
            },
            "precision": precision,
            "strongly_typed": strongly_typed,
            "batch_sizes": batch_sizes,
            "batch_profile": batch_profile,
            "inputs": in_specs,
            "outputs": out_specs,
            "tools": {
                "tensorrt": trt.__version__,
                "cuda_driver": dev["driver_cuda"],
                "cuda_runtime": dev["runtime_cuda"],
            },
            "plan": {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()},
            "build": {
                "seconds": seconds,
                "workspace_bytes": int(workspace_bytes),
                "timing_cache": str(timing_cache) if timing_cache else None,
                "timing_cache_reused": cache_loaded,
                "fp16_builder_flag": use_fp16_flag,
            },
        },
    )
    log.info("built %s (%d bytes, %s, %.1f s)", out_path, len(data), precision, seconds)
    return out_path
