"""The one small interface every sensor source implements, and what a sample holds.

A source reads one family of sensors (thermal zones, hwmon, INA3221, RAPL, the Pi's
``get_throttled``, battery, NVML) into a :class:`Partial`; the sampler
(``sampler.py``) runs every source, turns failures into *unavailable* or *stale* and
returns one :class:`Readings`. A source may raise: the sampler loses that source for
this sample, never the sample.

Rules the policy relies on:

* A value that cannot be read is *absent*, never 0 (a 0 °C reading would un-throttle a
  hot device). Any exception while reading a sensor makes that sensor unavailable for
  this sample.
* A sensor that read fine before and now fails (file gone, garbage, I/O error) is
  *stale*: the policy's ``stale_policy`` decides what that means. EAGAIN/ENODATA (an
  Orin ``cv*-thermal`` zone while the DLA is power-gated, a Wi-Fi zone while the link is
  down) and PermissionError are *unavailable* but not stale: nothing is wrong.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, ClassVar

from edged.governor.sensors.sysfs_support import classify_error, describe, plausible_c, read_int

# Sensor kinds, as recorded in Readings.kinds.
THERMAL = "thermal"
HWMON = "hwmon"
NVML = "nvml"
RAIL = "rail"
BATTERY = "battery"
THROTTLE = "throttle"
TEMPERATURE_KINDS = frozenset({THERMAL, HWMON, NVML})


@dataclass(frozen=True)
class TripPoint:
    index: int
    temp_c: float
    type: str  # active | passive | hot | critical
    hyst_c: float | None


@dataclass(frozen=True)
class Readings:
    """One sample of every sensor. Absent keys mean "could not read", never 0."""

    timestamp: float  # the governor clock (monotonic by default)
    wall_time: float
    temperatures: dict[str, float] = field(default_factory=dict)  # name -> °C
    power: dict[str, float] = field(default_factory=dict)  # rail -> W
    total_power_w: float | None = None
    battery_ratio: float | None = None  # 0..1
    battery_plugged: bool | None = None
    throttled: dict[str, bool] = field(default_factory=dict)
    #: sensors that read fine before and now fail (not power-gating): see module doc.
    stale: frozenset[str] = frozenset()
    #: every known sensor without a value in this sample (includes ``stale``).
    unavailable: frozenset[str] = frozenset()
    #: name -> kind (thermal, hwmon, nvml, rail, battery, throttle) for every known sensor.
    kinds: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form for ``edged status`` and replays."""
        return {
            "timestamp": self.timestamp,
            "wall_time": self.wall_time,
            "temperatures": dict(self.temperatures),
            "power": dict(self.power),
            "total_power_w": self.total_power_w,
            "battery_ratio": self.battery_ratio,
            "battery_plugged": self.battery_plugged,
            "throttled": dict(self.throttled),
            "stale": sorted(self.stale),
            "unavailable": sorted(self.unavailable),
        }


@dataclass
class Partial:
    """What one sample collects from the sources, before the stale bookkeeping."""

    temperatures: dict[str, float] = field(default_factory=dict)
    power: dict[str, float] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    failures: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (class, text)
    throttled: dict[str, bool] = field(default_factory=dict)
    battery_ratio: float | None = None
    battery_plugged: bool | None = None
    #: the whole board's power where a source measures it at the input (INA3221's board
    #: rail, which includes the GPU); the sampler takes it as the total
    board_w: float | None = None
    #: the power of the parts a source measures (RAPL: the CPU package; NVML: the GPUs),
    #: by source; their sum is the total where nothing measures the whole board
    part_w: dict[str, float] = field(default_factory=dict)

    def fail(self, name: str, kind: str, exc: BaseException) -> None:
        self.kinds[name] = kind
        self.failures[name] = (classify_error(exc), describe(exc))


class Source(abc.ABC):
    """One family of sensors under a sysfs root. Build through the module's ``open_source``.

    Each module provides ``open_source(root: str) -> Source``; ``root == "/"`` means the
    real machine (where psutil may be preferred). ``read`` is blocking file I/O, called
    from the sampler's worker thread, one sample at a time.
    """

    #: what the sampler's log calls this source when its reader raises.
    label: ClassVar[str] = ""

    def __init__(self, root: str) -> None:
        self.root = root

    @abc.abstractmethod
    def read(self, out: Partial, now: float) -> None:
        """Add this source's sensors to ``out`` (``now``: the governor clock)."""

    def close(self) -> None:
        """Release handles (NVML); the default holds none."""
        return


def read_temperature(out: Partial, name: str, kind: str, path: str) -> None:
    """One m°C file into ``out`` as °C, or a failure of ``name`` (garbage included)."""
    try:
        out.temperatures[name] = plausible_c(read_int(path), path)
        out.kinds[name] = kind
    except Exception as exc:
        out.fail(name, kind, exc)
