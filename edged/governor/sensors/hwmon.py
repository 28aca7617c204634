"""hwmon temperatures: ``/sys/class/hwmon/hwmon*/{name,temp*_input,temp*_label}`` (m°C).

Under a recorded root the files are read as psutil reads them; at the real root psutil
itself is used, as it follows more driver quirks.
"""

from __future__ import annotations

import glob
import logging
import os

from edged.governor.sensors.base import HWMON, Partial, Source, read_temperature
from edged.governor.sensors.sysfs_support import (
    MAX_PLAUSIBLE_C,
    MIN_PLAUSIBLE_C,
    dedupe,
    describe,
    read_text,
    trailing_int,
)

log = logging.getLogger("edged.governor.sensors")


def read_hwmon_sysfs(root: str, out: Partial) -> None:
    taken: set[str] = set()
    for d in sorted(glob.glob(os.path.join(root, "sys/class/hwmon/hwmon*")), key=trailing_int):
        try:
            chip = read_text(os.path.join(d, "name"))
        except Exception:
            chip = os.path.basename(d)
        inputs = glob.glob(os.path.join(d, "temp*_input"))
        for ipath in sorted(inputs, key=lambda p: trailing_int(p.removesuffix("_input"))):
            n = trailing_int(ipath.removesuffix("_input"))
            try:
                label = read_text(os.path.join(d, f"temp{n}_label")) or f"temp{n}"
            except Exception:
                label = f"temp{n}"
            name = dedupe(f"{chip}/{label}", taken)
            taken.add(name)
            read_temperature(out, name, HWMON, ipath)


def read_hwmon_psutil(out: Partial) -> None:
    """psutil at the real root; skipped when psutil would fall back to thermal zones."""
    if not glob.glob("/sys/class/hwmon/hwmon*/temp*_input"):
        return  # psutil would report the thermal zones again under other names
    import psutil

    try:
        chips = psutil.sensors_temperatures()
    except Exception as exc:  # some Jetson kernels make it raise on null zones
        log.debug("psutil.sensors_temperatures() failed: %s", describe(exc))
        return
    taken: set[str] = set()
    for chip, entries in chips.items():
        for i, e in enumerate(entries):
            name = dedupe(f"{chip}/{e.label or f'temp{i + 1}'}", taken)
            taken.add(name)
            if e.current is None or not MIN_PLAUSIBLE_C <= e.current <= MAX_PLAUSIBLE_C:
                out.fail(name, HWMON, ValueError(f"implausible temperature {e.current}"))
                continue
            out.temperatures[name] = float(e.current)
            out.kinds[name] = HWMON


class Hwmon(Source):
    label = "hwmon"

    def read(self, out: Partial, now: float) -> None:
        if self.root == "/":
            read_hwmon_psutil(out)
        else:
            read_hwmon_sysfs(self.root, out)


def open_source(root: str) -> Source:
    return Hwmon(root)
