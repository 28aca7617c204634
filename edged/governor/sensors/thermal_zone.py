"""Thermal zones: ``/sys/class/thermal/thermal_zone*/{type,temp,trip_point_*}``.

Zones are named by ``type``, never by number: numbering is not stable across boots or
kernels. Their passive trip points are where ``levels = "auto"`` puts its thresholds.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Callable

from edged.governor.sensors.base import THERMAL, Partial, Source, TripPoint, read_temperature
from edged.governor.sensors.sysfs_support import (
    dedupe,
    read_int,
    read_text,
    trailing_int,
)


def is_bogus_zone(zone_type: str) -> bool:
    """Zones known to report nonsense: Jetson ``PMIC-Die`` always reads 100 °C."""
    return "pmic" in zone_type.lower()


def zone_names(root: str) -> list[tuple[str, str | None]]:
    """(zone dir, unique name) for every non-bogus zone; name None if ``type`` is unreadable."""
    dirs = sorted(glob.glob(os.path.join(root, "sys/class/thermal/thermal_zone*")),
                  key=trailing_int)
    out: list[tuple[str, str | None]] = []
    taken: set[str] = set()
    for d in dirs:
        try:
            ztype = read_text(os.path.join(d, "type"))
        except Exception:
            out.append((d, None))
            continue
        if not ztype or is_bogus_zone(ztype):
            continue
        name = dedupe(ztype, taken)
        taken.add(name)
        out.append((d, name))
    return out


class ThermalZones(Source):
    label = "thermal zones"

    def read(self, out: Partial, now: float) -> None:
        for d, name in zone_names(self.root):
            if name is None:
                continue  # cannot name it, so cannot match it: it counts for nothing
            read_temperature(out, name, THERMAL, os.path.join(d, "temp"))


def open_source(root: str) -> Source:
    return ThermalZones(root)


def read_trip_points(root: str) -> dict[str, list[TripPoint]]:
    """Trip points of every zone, by zone name; unreadable trips are skipped."""
    result: dict[str, list[TripPoint]] = {}
    for d, name in zone_names(root):
        if name is None:
            continue
        trips: list[TripPoint] = []
        for tpath in sorted(glob.glob(os.path.join(d, "trip_point_*_temp")), key=_trip_index):
            n = _trip_index(tpath)
            try:
                temp_c = read_int(tpath) / 1000.0
                ttype = read_text(os.path.join(d, f"trip_point_{n}_type"))
            except Exception:
                continue
            try:
                hyst: float | None = read_int(os.path.join(d, f"trip_point_{n}_hyst")) / 1000.0
            except Exception:
                hyst = None
            trips.append(TripPoint(n, temp_c, ttype, hyst))
        result[name] = trips
    return result


def _trip_index(path: str) -> int:
    m = re.search(r"trip_point_(\d+)_temp$", path)
    return int(m.group(1)) if m else -1


def first_passive_trip_c(
    trips: dict[str, list[TripPoint]], counts: Callable[[str], bool] = lambda _n: True
) -> tuple[str, float] | None:
    """(zone, °C) of the lowest sane passive trip among zones that ``counts``.

    Zones list trips in any order and some carry placeholder trips (0 °C, 255 °C), so
    only 20..150 °C is believed.
    """
    best: tuple[str, float] | None = None
    for zone, tps in trips.items():
        if not counts(zone):
            continue
        for tp in tps:
            sane = tp.type == "passive" and 20.0 <= tp.temp_c <= 150.0
            if sane and (best is None or tp.temp_c < best[1]):
                best = (zone, tp.temp_c)
    return best
