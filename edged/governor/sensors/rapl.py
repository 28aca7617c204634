"""x86 package power from RAPL powercap: ``/sys/class/powercap/intel-rapl:N/energy_uj``.

Power is the energy delta between two samples, wrap-around included, so the first
sample of a zone has no value. ``energy_uj`` is root-only on patched kernels: the one
warning says why and how to allow it.
"""

from __future__ import annotations

import glob
import logging
import os
import re

from edged.governor.sensors.base import RAIL, Partial, Source
from edged.governor.sensors.sysfs_support import read_int, read_text, trailing_int

log = logging.getLogger("edged.governor.sensors")

RAPL_PERMISSION_MESSAGE = (
    "{path}: energy_uj is root-only since the PLATYPUS fix (CVE-2020-8694, Intel SA-00389); "
    "RAPL power is unavailable. To let a non-root edged read it, add a tmpfiles rule, e.g. "
    "/etc/tmpfiles.d/edged-rapl.conf: 'z /sys/class/powercap/intel-rapl:*/energy_uj 0444 - - -' "
    "(or a udev rule doing the same), or run edged with CAP_DAC_READ_SEARCH."
)


def rapl_permission_message(path: str) -> str:
    """The one log line for an unreadable ``energy_uj``: says why and how to fix it."""
    return RAPL_PERMISSION_MESSAGE.format(path=path)


class Rapl(Source):
    """Package power from successive ``energy_uj`` readings."""

    label = "RAPL"

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self._last: dict[str, tuple[int, float]] = {}  # zone dir -> (energy_uj, t)
        self._watts: dict[str, float] = {}
        self._denied_logged: set[str] = set()

    def read(self, out: Partial, now: float) -> None:
        zones = [
            d
            for d in glob.glob(os.path.join(self.root, "sys/class/powercap/intel-rapl:*"))
            if re.fullmatch(r"intel-rapl:\d+", os.path.basename(d))
        ]
        psys: float | None = None
        packages: list[float] = []
        complete = True
        for d in sorted(zones, key=trailing_int):
            try:
                zname = read_text(os.path.join(d, "name")) or os.path.basename(d)
            except Exception:
                zname = os.path.basename(d)
            name = f"rapl/{zname}"
            epath = os.path.join(d, "energy_uj")
            try:
                energy = read_int(epath)
            except Exception as exc:
                if isinstance(exc, PermissionError) and epath not in self._denied_logged:
                    self._denied_logged.add(epath)
                    log.warning(rapl_permission_message(epath))
                out.fail(name, RAIL, exc)
                complete = False
                continue
            watts = self._update(d, energy, now)
            if watts is None:
                complete = False
                continue
            out.power[name] = watts
            out.kinds[name] = RAIL
            if zname == "psys":
                psys = watts
            elif zname.startswith("package"):
                packages.append(watts)
        if psys is not None:
            out.part_w[self.label] = psys
        elif packages and complete:
            out.part_w[self.label] = sum(packages)

    def _update(self, zone: str, energy: int, now: float) -> float | None:
        prev = self._last.get(zone)
        self._last[zone] = (energy, now)
        if prev is None or now <= prev[1]:
            return self._watts.get(zone)  # no delta yet: keep the last value, if any
        delta = energy - prev[0]
        if delta < 0:
            try:
                delta += read_int(os.path.join(zone, "max_energy_range_uj"))
            except Exception:
                return self._watts.get(zone)
            if delta < 0:
                return self._watts.get(zone)
        watts = delta / 1e6 / (now - prev[1])
        self._watts[zone] = watts
        return watts


def open_source(root: str) -> Source:
    return Rapl(root)
