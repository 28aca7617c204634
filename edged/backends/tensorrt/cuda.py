"""CUDA and TensorRT helpers shared by the TensorRT backend and ``edged compile``.

Why a support module: both the daemon's backend and the compile step need the same
lazy imports, error texts and device probes; a backend file must not be imported by
the compile pipeline for them, and the backend must not import ``compile/``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger("edged.backends.tensorrt")

#: Shown whenever ``import tensorrt`` fails. TensorRT's PyPI packages are stubs that
#: fetch the real wheels from NVIDIA's index; JetPack ships its own build instead.
INSTALL_HINT = (
    "install edged[tensorrt] (TensorRT wheels come from NVIDIA's package index: "
    "pip install --extra-index-url https://pypi.nvidia.com 'edged[tensorrt]'; "
    "pick tensorrt-cu12 for CUDA 12 drivers, and on Jetson use JetPack's python3-libnvinfer "
    "in a venv created with --system-site-packages)"
)
CUDA_PYTHON_HINT = (
    "install cuda-python matching the driver's CUDA major version "
    "(pip install 'cuda-python>=12,<13' for CUDA 12 drivers such as JetPack 6; "
    "'cuda-python>=13' needs an R580+ driver)"
)


class GpuUnavailableError(RuntimeError):
    """No usable TensorRT + CUDA device here; the message says which part is missing."""


# -- cuda-python helpers ---------------------------------------------------------------


def import_cudart() -> Any:
    """``cuda.bindings.runtime`` (cuda-python >= 12.6), else the older ``cuda.cudart``."""
    try:
        from cuda.bindings import runtime as cudart
    except ImportError:
        from cuda import cudart  # cuda-python < 12.6 layout
    return cudart


def check_cuda(result: Any, what: str = "CUDA call") -> Any:
    """Unwrap a cuda-python result tuple ``(err, *values)``, raising with the error's name.

    cuda-python never raises on CUDA errors: every call returns the error code first.
    Forgetting to look at it turns a failed cudaMalloc into a segfault later, so every
    call in this module goes through here.
    """
    err, rest = result[0], result[1:]
    if int(err) != 0:
        raise RuntimeError(f"{what} failed: {_cuda_error_text(err)}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


def _cuda_error_text(err: Any) -> str:
    """``cudaErrorInsufficientDriver (35): CUDA driver version is insufficient ...``."""
    name = getattr(err, "name", None) or str(err)
    desc = ""
    try:
        cudart = import_cudart()
        rc, text = cudart.cudaGetErrorString(err)
        if int(rc) == 0 and text:
            desc = text.decode() if isinstance(text, bytes) else str(text)
    except Exception:  # the name alone is still useful
        pass
    return f"{name} ({int(err)})" + (f": {desc}" if desc else "")


def _cuda_version_text(v: int) -> str:
    """cudart encodes versions as 1000*major + 10*minor (12060 -> '12.6'); 0 = no driver."""
    return "none" if v <= 0 else f"{v // 1000}.{(v % 1000) // 10}"


def cuda_device_info(device: int = 0) -> dict[str, Any]:
    """Name, compute capability and memory of CUDA device ``device``.

    Raises GpuUnavailableError with an actionable reason when cuda-python is missing,
    no driver is loaded, the driver is too old for cuda-python's CUDA version, or the
    device index does not exist. Never touches TensorRT.
    """
    try:
        cudart = import_cudart()
    except ImportError as e:
        raise GpuUnavailableError(f"cuda-python is not installed ({e}); {CUDA_PYTHON_HINT}") from e

    runtime_version = 0
    driver_version = 0
    try:
        rc, v = cudart.cudaRuntimeGetVersion()
        runtime_version = int(v) if int(rc) == 0 else 0
        rc, v = cudart.cudaDriverGetVersion()
        driver_version = int(v) if int(rc) == 0 else 0
    except Exception:  # versions are only for the message
        pass
    versions = (
        f"driver supports CUDA {_cuda_version_text(driver_version)}, "
        f"cuda-python targets CUDA {_cuda_version_text(runtime_version)}"
    )
    err, count = cudart.cudaGetDeviceCount()
    if int(err) != 0:
        name = getattr(err, "name", str(err))
        if name == "cudaErrorInsufficientDriver" and driver_version <= 0:
            why = (
                "no NVIDIA driver is loaded (no NVIDIA GPU here, or its driver is not "
                "installed; check nvidia-smi, or tegrastats on a Jetson)"
            )
        elif name == "cudaErrorInsufficientDriver":
            why = f"the driver is older than the CUDA cuda-python targets ({versions}); " + (
                CUDA_PYTHON_HINT
            )
        elif name == "cudaErrorNoDevice":
            why = f"the driver reports no CUDA-capable device ({versions})"
        else:
            why = versions
        raise GpuUnavailableError(
            f"no usable CUDA device: cudaGetDeviceCount returned {_cuda_error_text(err)}; {why}"
        )
    if count <= device:
        raise GpuUnavailableError(
            f"no usable CUDA device: device {device} requested but {count} CUDA device(s) found"
        )
    prop = check_cuda(cudart.cudaGetDeviceProperties(device), f"cudaGetDeviceProperties({device})")
    raw_name = prop.name
    name = (
        raw_name.split(b"\0", 1)[0].decode(errors="replace")
        if isinstance(raw_name, bytes | bytearray)
        else str(raw_name)
    )
    return {
        "device": device,
        "name": name,
        "compute_capability": f"{prop.major}.{prop.minor}",
        "sm": prop.major * 10 + prop.minor,
        "total_memory": int(prop.totalGlobalMem),
        "integrated": bool(getattr(prop, "integrated", 0)),
        "device_count": int(count),
        "driver_cuda": _cuda_version_text(driver_version),
        "runtime_cuda": _cuda_version_text(runtime_version),
    }


def import_tensorrt() -> Any:
    """``import tensorrt`` or GpuUnavailableError carrying INSTALL_HINT."""
    try:
        import tensorrt as trt
    except ImportError as e:
        raise GpuUnavailableError(f"TensorRT is not installed ({e}); {INSTALL_HINT}") from e
    return trt


def probe(device: int = 0) -> tuple[bool, str]:
    """Is TensorRT + a usable CUDA device present here, and if not, why not?

    Used to skip GPU tests, by ``scripts/ops/device-check`` and by the compile CLI. Creates
    (and drops) a ``trt.Runtime`` because that is the call that fails without a GPU.
    """
    try:
        trt = import_tensorrt()
        dev = cuda_device_info(device)
        with trt_messages() as msgs:
            try:
                runtime = trt.Runtime(trt_logger(trt))
            except TypeError as e:
                raise GpuUnavailableError(_no_device_from_trt(e, msgs)) from e
        del runtime
    except GpuUnavailableError as e:
        return False, str(e)
    return True, (
        f"TensorRT {trt.__version__} on cuda:{device} {dev['name']} "
        f"(compute capability {dev['compute_capability']})"
    )


# -- TensorRT logger -------------------------------------------------------------------

_LOGGER: Any = None
_LOGGER_LOCK = threading.Lock()
_CAPTURE = threading.local()


def trt_logger(trt: Any) -> Any:
    """One process-wide ``trt.ILogger`` forwarding to ``logging`` and capturing errors.

    One instance because TensorRT treats the logger as a process singleton (it warns
    when different runtimes/builders get different loggers). Capturing lets a failed
    deserialize/build report TensorRT's own reason ("version tag does not match").
    """
    global _LOGGER
    with _LOGGER_LOCK:
        if _LOGGER is None:
            sev = trt.ILogger.Severity

            class _Logger(trt.ILogger):  # type: ignore[misc, name-defined]
                def __init__(self) -> None:
                    trt.ILogger.__init__(self)

                def log(self, severity: Any, msg: str) -> None:
                    if severity in (sev.INTERNAL_ERROR, sev.ERROR):
                        level = logging.ERROR
                    elif severity == sev.WARNING:
                        level = logging.WARNING
                    elif severity == sev.INFO:
                        level = logging.DEBUG  # TRT's INFO is chatty (tactics, memory)
                    else:
                        return
                    log.log(level, "[TRT] %s", msg)
                    sink = getattr(_CAPTURE, "messages", None)
                    if sink is not None and level >= logging.WARNING:
                        sink.append(msg)

            _LOGGER = _Logger()
        return _LOGGER


@contextmanager
def trt_messages() -> Iterator[list[str]]:
    """Collect TensorRT warnings/errors logged by this thread inside the block."""
    prev = getattr(_CAPTURE, "messages", None)
    msgs: list[str] = []
    _CAPTURE.messages = msgs
    try:
        yield msgs
    finally:
        _CAPTURE.messages = prev


def _no_device_from_trt(e: BaseException, msgs: list[str]) -> str:
    said = f" TensorRT said: {msgs[-1]}" if msgs else ""
    return (
        "no usable CUDA device: TensorRT could not initialise CUDA "
        f"({type(e).__name__}: {e}).{said} Check the NVIDIA driver (nvidia-smi / tegrastats)."
    )
