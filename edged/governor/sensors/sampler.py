"""The sampler: runs every sensor source once per sample and keeps what spans samples.

Why a sampler apart from the sources: staleness ("read fine before, fails now") and the
once-per-transition logging need memory across samples and across sources; each source
only reads. Sources are chosen by name (``SOURCES`` in the package's ``__init__``, like
``edged.backends`` and ``edged.batching``), so a replay or a test can sample just the
families it has files for. Every status change is
logged once, not once per second.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence

from edged.governor.sensors import SOURCES, open_source  # the registry: the package
from edged.governor.sensors.base import Partial, Readings, TripPoint
from edged.governor.sensors.sysfs_support import describe
from edged.governor.sensors.thermal_zone import read_trip_points

log = logging.getLogger("edged.governor.sensors")


class Sensors:
    """Samples every sensor under ``root``; keeps the state needed for staleness.

    Blocking file I/O: call :meth:`sample` from a worker thread, not the event loop. One
    sample runs at a time (RAPL deltas and staleness are state), so it is thread-safe.
    """

    def __init__(
        self,
        root: str = "/",
        *,
        nvml: bool = True,
        clock: Callable[[], float] = time.monotonic,
        sources: Sequence[str] | None = None,
    ) -> None:
        self.root = os.path.abspath(root)
        self.real_root = self.root == "/"
        self._clock = clock
        # NVML is live hardware, never part of a replayed tree.
        asked = SOURCES if sources is None else sources
        names = [n for n in asked if n != "nvml" or (nvml and self.real_root)]
        self.sources = [open_source(n, self.root) for n in names]
        self._lock = threading.Lock()
        self._kinds: dict[str, str] = {}
        self._good: set[str] = set()  # read fine at least once
        self._status: dict[str, str] = {}  # name -> ok | unavailable | stale
        self._broken: set[str] = set()  # sources whose reader raised (logged once)

    def trip_points(self) -> dict[str, list[TripPoint]]:
        return read_trip_points(self.root)

    def sample(self) -> Readings:
        """Read everything once. Never raises: a failing source makes its sensors unavailable."""
        with self._lock:
            now = self._clock()
            part = Partial()
            for source in self.sources:
                try:
                    source.read(part, now)
                    self._broken.discard(source.label)
                except Exception as exc:  # a bug or an odd tree: lose that source, not the sample
                    if source.label not in self._broken:  # once per transition, not every second
                        self._broken.add(source.label)
                        log.exception("reading %s failed: %s", source.label, describe(exc))
            return self._finish(part, now)

    def _finish(self, part: Partial, now: float) -> Readings:
        present = set(part.temperatures) | set(part.power)
        if part.battery_ratio is not None:
            present.add("battery")
        if "get_throttled" in part.kinds and "get_throttled" not in part.failures:
            present.add("get_throttled")
        self._kinds.update(part.kinds)
        stale: set[str] = set()
        unavailable: set[str] = set()
        for name in self._kinds:
            if name in present:
                status = "ok"
                self._good.add(name)
            else:
                cls = part.failures.get(name, ("error", ""))[0]
                unavailable.add(name)
                status = "stale" if name in self._good and cls == "error" else "unavailable"
                if status == "stale":
                    stale.add(name)
            self._transition(name, status, part.failures.get(name, ("", ""))[1])
        return Readings(
            timestamp=now,
            wall_time=time.time(),
            temperatures=part.temperatures,
            power=part.power,
            total_power_w=total_power(part),
            battery_ratio=part.battery_ratio,
            battery_plugged=part.battery_plugged,
            throttled=part.throttled,
            stale=frozenset(stale),
            unavailable=frozenset(unavailable),
            kinds=dict(self._kinds),
        )

    def _transition(self, name: str, status: str, why: str) -> None:
        old = self._status.get(name)
        if old == status:
            return
        self._status[name] = status
        if status == "stale":
            log.warning("sensor %s is stale (%s)", name, why or "no longer present")
        elif status == "unavailable":
            log.info("sensor %s unavailable (%s)", name, why or "no value yet")
        elif old is not None:
            log.info("sensor %s reads again", name)

    def close(self) -> None:
        """Release source handles (NVML); the daemon calls this on reload and at stop."""
        for source in self.sources:
            source.close()
        log.info("governor closed: sensors released")


def total_power(part: Partial) -> float | None:
    """The one place the board's total power is decided: a whole-board reading when a
    source has one, else the sum of the parts measured (CPU package, GPUs), else None."""
    if part.board_w is not None:
        return part.board_w
    return sum(part.part_w.values()) if part.part_w else None
