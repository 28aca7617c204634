"""Thermal and power governor: sensors (sysfs, psutil, NVML) and a level policy.

The daemon drives it: ``Sensors.sample()`` (``sensors/``) in a worker thread every
``interval_s``, ``Governor.step()`` (``policy.py``, pure) on the result, and applies
the returned :class:`Decision` (variant ladder steps, batch cap, rate cap, shedding)
when ``decision.changed``; it may report each model's active
variant and duty with ``observe_load`` for the predicted variant choice. Recorded traces
replay through ``edged governor replay`` (``replay.py``). See docs/governor.md.
"""

from edged.config.governor import GovernorConfig, LevelConfig, auto_levels
from edged.governor.decision import Decision
from edged.governor.policy import Governor
from edged.governor.sensors import Readings, Sensors, TripPoint

__all__ = [
    "Decision",
    "Governor",
    "GovernorConfig",
    "LevelConfig",
    "Readings",
    "Sensors",
    "TripPoint",
    "auto_levels",
]
