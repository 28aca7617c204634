"""NVIDIA dGPUs through pynvml: temperature, power and clock-event (throttle) reasons.

pynvml is imported on the first read; an absent package, library or GPU means no
sensor, not an error. Jetson iGPUs have no NVML; their zones and rails come from
sysfs. NVML is live hardware, so the sampler opens it only at the real root.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from edged.governor.sensors.base import NVML, Partial, Source
from edged.governor.sensors.sysfs_support import describe

log = logging.getLogger("edged.governor.sensors")

#: NVML clock event reasons that mean the GPU is being held back (pynvml constants).
NVML_REASONS: dict[str, int] = {
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake": 0x80,
}


class Nvml(Source):
    label = "NVML"

    def __init__(self) -> None:
        super().__init__("/")
        self._nvml: Any = None
        self._handles: list[Any] = []
        self._tried = False

    def _init(self) -> bool:
        if not self._tried:
            self._tried = True
            try:
                import pynvml  # type: ignore[import-not-found]

                pynvml.nvmlInit()
                count = pynvml.nvmlDeviceGetCount()
                self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
                self._nvml = pynvml
            except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, no driver ...
                log.debug("NVML not used: %s", describe(exc))
                self._nvml = None
        return self._nvml is not None

    def read(self, out: Partial, now: float) -> None:
        if not self._init():
            return
        total = 0.0
        complete = True
        for i, h in enumerate(self._handles):
            watts = self._read_gpu(i, h, out)
            if watts is None:
                complete = False
            else:
                total += watts
        if self._handles and complete:
            out.part_w[self.label] = total

    def _read_gpu(self, i: int, h: Any, out: Partial) -> float | None:
        """One GPU's temperature, power (returned, None if unread) and throttle reasons."""
        nv = self._nvml
        name = f"nvml/gpu{i}"
        watts: float | None = None
        try:
            out.temperatures[name] = float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
            out.kinds[name] = NVML
        except Exception as exc:
            out.fail(name, NVML, exc)
        try:
            watts = nv.nvmlDeviceGetPowerUsage(h) / 1000.0
            out.power[name] = watts
            out.kinds.setdefault(name, NVML)
        except Exception:
            watts = None
        try:
            # Newer bindings renamed ...ClocksThrottleReasons to ...ClocksEventReasons.
            get = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
            if get is None:
                get = nv.nvmlDeviceGetCurrentClocksThrottleReasons
            reasons = int(get(h))
            for flag, bit in NVML_REASONS.items():
                out.throttled[f"gpu{i}_{flag}"] = bool(reasons & bit)
        except Exception:
            pass
        return watts

    def close(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
            self._nvml = None


def open_source(root: str) -> Source:
    del root  # live hardware: the sampler opens it only at the real root
    return Nvml()
