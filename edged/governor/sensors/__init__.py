"""Read temperatures, power rails, battery and throttle flags from sysfs (and NVML).

Why a root directory: every sysfs path is joined under ``root`` so tests and replays can
point the governor at a directory of files written in the kernel's own formats; nothing
here is mocked in tests. Why by hand rather than psutil everywhere: psutil only looks at
the real ``/sys``, knows nothing of INA3221, RAPL or ``get_throttled``, and cannot tell a
power-gated zone (EAGAIN, normal) from a broken one. At the real root we still prefer
psutil for hwmon temperatures and the battery, as it follows more driver quirks.

One source per file behind ``base.Source`` (thermal_zone, hwmon, ina3221, rapl, rpi,
battery, nvml), registered by name in ``SOURCES`` below (the one table; a new source is a
file and a line here) and sampled by ``sampler.Sensors``, which imports this package for
them (so this package does not import the sampler: ``from
edged.governor.sensors.sampler import Sensors``); ``base`` says what a reading promises
the policy.
"""

import importlib

from edged.governor.sensors.base import (
    BATTERY,
    HWMON,
    NVML,
    RAIL,
    TEMPERATURE_KINDS,
    THERMAL,
    THROTTLE,
    Partial,
    Readings,
    Source,
    TripPoint,
)
from edged.governor.sensors.ina3221 import TOTAL_RAILS, ina_total
from edged.governor.sensors.rapl import rapl_permission_message
from edged.governor.sensors.rpi import parse_throttled
from edged.governor.sensors.thermal_zone import first_passive_trip_c, read_trip_points

#: source name -> module providing ``open_source(root) -> Source``, in sampling order.
SOURCES: dict[str, str] = {
    "thermal_zone": "edged.governor.sensors.thermal_zone",
    "hwmon": "edged.governor.sensors.hwmon",
    "ina3221": "edged.governor.sensors.ina3221",
    "rapl": "edged.governor.sensors.rapl",
    "rpi": "edged.governor.sensors.rpi",
    "battery": "edged.governor.sensors.battery",
    "nvml": "edged.governor.sensors.nvml",
}


def open_source(name: str, root: str) -> Source:
    """The source called ``name`` reading under ``root``."""
    if name not in SOURCES:
        raise ValueError(f"unknown sensor source {name!r}; known: {', '.join(SOURCES)}")
    module = importlib.import_module(SOURCES[name])
    source: Source = module.open_source(root)
    return source


__all__ = [
    "BATTERY",
    "HWMON",
    "NVML",
    "RAIL",
    "SOURCES",
    "TEMPERATURE_KINDS",
    "THERMAL",
    "THROTTLE",
    "TOTAL_RAILS",
    "Partial",
    "Readings",
    "Source",
    "TripPoint",
    "first_passive_trip_c",
    "ina_total",
    "open_source",
    "parse_throttled",
    "rapl_permission_message",
    "read_trip_points",
]
