"""What is on this device: platform facts, which runtimes import, CUDA and NVML.

Why apart from the rows: these lines say *why* a row further down is a SKIP (no
onnxruntime-gpu, no CUDA device, NVML not on a Jetson) before anything is served. A
missing optional runtime is a SKIP; one installed but broken is a FAIL. GPU libraries
are imported here only, lazily, so the checks run the same on a machine without them.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edged.backends.support.isa import SEVEN_BIT_FLAG, CpuIsa, cpu_isa, cpu_name, cpuinfo_path
from edged.device.report import FAIL, PASS, SKIP, Report


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(errors="replace").replace("\x00", "").strip()
    except OSError:
        return None


def int8_isa(isa: CpuIsa) -> str:
    """The CPU's INT8 dot products, and what they mean for INT8 artifacts here."""
    if isa.int8 is None:
        return f"{isa.arch}, INT8 instructions unknown (no flags in {cpuinfo_path()})"
    if isa.saturates_u8s8:
        return (f"{isa.arch} without VNNI: ONNX Runtime's U8S8 kernels saturate 8-bit "
                f"weights (INT8 artifacts need 7-bit weights: edged compile {SEVEN_BIT_FLAG})")
    found = ", ".join(isa.int8) or "NEON widening multiplies only"
    return f"{isa.arch} with {found} (8-bit weights do not saturate)"


def platform_facts(r: Report) -> None:
    """Stdlib and /proc only: these lines print even where numpy or psutil do not import."""
    r.fact("arch", platform.machine())
    r.fact("os", platform.platform())
    r.fact("python", platform.python_version())
    r.fact("cpu", cpu_name())
    r.fact("cpu int8", int8_isa(cpu_isa()))
    cpus = os.cpu_count()
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = cpus
    r.fact("cpus", f"{cpus} ({usable} usable by this process)")
    r.fact("load average", " ".join(f"{x:.2f}" for x in os.getloadavg()) + " (figures below "
           "are shared with whatever else runs)")
    meminfo = _read("/proc/meminfo") or ""
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            r.fact("memory", f"{int(line.split()[1]) // 1024} MiB")
    model = _read("/proc/device-tree/model")
    r.fact("board", model or "unknown (no /proc/device-tree/model)")
    from edged.backends.tensorrt.keys import l4t_release

    l4t = l4t_release()
    r.fact("l4t", f"R{l4t} (JetPack: see `apt show nvidia-jetpack`)" if l4t
           else "not a Jetson (no /etc/nv_tegra_release)")


def try_import(
    r: Report, label: str, module: str, describe: Callable[[Any], str], required: bool = False
) -> Any:
    """Import ``module``: PASS, SKIP when not installed, FAIL when installed but broken."""
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and module.startswith(e.name) and not required:
            r.add(label, SKIP, f"not installed ({module})")
        else:
            r.add(label, FAIL, f"import {module} failed: {e}")
        return None
    except Exception as e:  # installed, but its native libs are missing or broken
        r.add(label, FAIL, f"import {module} failed: {type(e).__name__}: {e}")
        return None
    try:
        r.add(label, PASS, describe(mod))
    except Exception as e:
        r.add(label, FAIL, f"{module} imported but misbehaves: {type(e).__name__}: {e}")
        return None
    return mod


def runtime_checks(r: Report) -> dict[str, Any]:
    mods: dict[str, Any] = {}
    mods["numpy"] = try_import(r, "numpy", "numpy", lambda m: m.__version__, required=True)
    mods["onnxruntime"] = try_import(
        r,
        "onnxruntime",
        "onnxruntime",
        lambda m: f"{m.__version__}; providers: {', '.join(m.get_available_providers())}",
        required=True,
    )
    mods["openvino"] = openvino_check(r)
    mods["tvm"] = try_import(r, "tvm", "tvm", lambda m: m.__version__)
    mods["tensorrt"] = try_import(r, "tensorrt", "tensorrt", lambda m: m.__version__)

    def _cuda_python(m: Any) -> str:
        from cuda import bindings

        return getattr(bindings, "__version__", "installed")

    mods["cuda-python"] = try_import(r, "cuda-python", "cuda.bindings.runtime", _cuda_python)
    mods["pynvml"] = try_import(r, "pynvml", "pynvml", lambda m: "installed")
    return mods


def openvino_check(r: Report) -> Any:
    """OpenVINO through edged's own import (telemetry blocked): version, devices and
    the CPU plugin's default precision (bf16/f16 where the CPU has it; edged asks f32)."""
    if importlib.util.find_spec("openvino") is None:
        r.add("openvino", SKIP, "not installed (pip install 'edged[openvino]')")
        return None
    from edged.backends.openvino import import_openvino

    try:
        ov = import_openvino()
        core = ov.Core()
        devices = list(core.available_devices)
        default = core.get_property("CPU", "INFERENCE_PRECISION_HINT") if "CPU" in devices \
            else None
    except Exception as e:
        r.add("openvino", FAIL, f"installed but unusable: {type(e).__name__}: {e}")
        return None
    name = getattr(default, "get_type_name", lambda: str(default))()
    r.add("openvino", PASS, f"{ov.get_version().split('-')[0]}; devices: "
          f"{', '.join(devices) or 'none'}; CPU default precision {name} (edged uses f32 "
          "unless a variant asks bf16/f16)")
    return ov


def cuda_check(r: Report, mods: dict[str, Any], device: int) -> dict[str, Any] | None:
    if mods.get("cuda-python") is None:
        r.add("cuda device", SKIP, "cuda-python not installed (pip install 'edged[tensorrt]')")
        return None
    from edged.backends.tensorrt.cuda import GpuUnavailableError, cuda_device_info

    try:
        dev = cuda_device_info(device)
    except GpuUnavailableError as e:
        r.add("cuda device", SKIP, str(e))
        return None
    except Exception as e:
        r.add("cuda device", FAIL, f"probing CUDA failed: {type(e).__name__}: {e}")
        return None
    r.add(
        "cuda device",
        PASS,
        f"cuda:{device} {dev['name']}, compute capability {dev['compute_capability']}, "
        f"{dev['total_memory'] // (1 << 20)} MiB{' (integrated)' if dev['integrated'] else ''}, "
        f"driver CUDA {dev['driver_cuda']}, cuda-python CUDA {dev['runtime_cuda']}",
        device=dev,
    )
    return dev


def nvml_check(r: Report, mods: dict[str, Any]) -> None:
    nv = mods.get("pynvml")
    if nv is None:
        r.add("nvml", SKIP, "pynvml not installed (nvidia-ml-py, edged[gpu])")
        return
    try:
        nv.nvmlInit()
    except Exception as e:  # no driver, or a Jetson (NVML is not supported on Tegra)
        r.add("nvml", SKIP, f"NVML unavailable: {e}")
        return
    try:
        h = nv.nvmlDeviceGetHandleByIndex(0)
        name = nv.nvmlDeviceGetName(h)
        name = name.decode() if isinstance(name, bytes) else name
        temp = nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)
        try:
            watts = f", {nv.nvmlDeviceGetPowerUsage(h) / 1000:.1f} W"
        except Exception:
            watts = ""
        r.add("nvml", PASS, f"{name}: {temp} °C{watts} (governor sensor works)")
    except Exception as e:
        r.add("nvml", FAIL, f"NVML initialised but reading GPU 0 failed: {e}")
    finally:
        with contextlib.suppress(Exception):
            nv.nvmlShutdown()
