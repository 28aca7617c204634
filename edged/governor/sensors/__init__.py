"""Read temperatures, power rails, battery and throttle flags from sysfs (and NVML).

Why a root directory: every sysfs path is joined under ``root`` so tests and replays can
point the governor at a directory of files written in the kernel's own formats; nothing
here is mocked in tests. Why by hand rather than psutil everywhere: psutil only looks at
the real ``/sys``, knows nothing of INA3221, RAPL or ``get_throttled``, and cannot tell a
power-gated zone (EAGAIN, normal) from a broken one. At the real root we still prefer
psutil for hwmon temperatures and the battery, as it follows more driver quirks.

One source per file behind ``base.Source`` (thermal_zone, hwmon, ina3221, rapl, rpi,
battery, nvml), chosen by name by the sampler (``sampler.Sensors``); ``base`` says what
a reading promises the policy.
"""

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
from edged.governor.sensors.sampler import SOURCES, Sensors, open_source
from edged.governor.sensors.thermal_zone import first_passive_trip_c, read_trip_points

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
    "Sensors",
    "Source",
    "TripPoint",
    "first_passive_trip_c",
    "ina_total",
    "open_source",
    "parse_throttled",
    "rapl_permission_message",
    "read_trip_points",
]
