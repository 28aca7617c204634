"""Where a small device's cores go: ORT's intra-op pool, OpenCV, the event loop, ZeroMQ.

Why one module: the defaults below were measured (docs/benchmarks.md, "Defaults
decided by the matrix") and interact: ORT's pool wants every physical core
while a batch computes, and the event loop, ZeroMQ's I/O thread and the decode pool
want a core at the moments between batches. ``plan`` decides from the core count
(pure); the ORT backend and the daemon read the one plan.

- ORT intra-op threads: one per physical core (ORT's own default).
- Spinning, on devices with at least ``SPIN_MIN_CORES`` cores: on *during* ``Run``
  (each operator's parallel section then starts without a futex wake-up, as in a
  default ORT session) and stopped the moment ``Run`` returns
  (``session.force_spinning_stop``), so the pool never spins against the event loop,
  ZeroMQ or the clients between batches and an idle daemon burns nothing. On smaller
  devices the pool's threads already take every core and share them with the event
  loop, ZeroMQ's I/O thread and the clients: there spinning was measured to lose
  (2 cores: 1.4-2x slower under contention with spin-during-Run; no gain on a quiet
  machine with ORT's spin-always), so it stays off.
- OpenCV: one thread. Frames are preprocessed on the daemon's decode pool (two
  workers), several at a time under load, so OpenCV's own parallel loops only add
  threads that fight ORT for the same cores.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class ThreadPlan:
    ort_threads: int  # 0 = ORT's default (one per physical core)
    ort_spinning: bool  # allow_spinning while Run computes
    ort_spin_between_runs: bool  # False: force_spinning_stop after each Run
    opencv_threads: int
    cores: int

    def describe(self) -> dict[str, int | bool]:
        return {"cores": self.cores, "ort_threads": self.ort_threads,
                "ort_spinning": self.ort_spinning,
                "ort_spin_between_runs": self.ort_spin_between_runs,
                "opencv_threads": self.opencv_threads}


#: below this many cores ORT's pool would spin on the cores the loop and ZeroMQ need
SPIN_MIN_CORES = 4


def plan(cores: int) -> ThreadPlan:
    """The plan for a device with ``cores`` usable CPUs."""
    return ThreadPlan(ort_threads=0, ort_spinning=cores >= SPIN_MIN_CORES,
                      ort_spin_between_runs=False, opencv_threads=1, cores=cores)


@functools.cache
def current() -> ThreadPlan:
    """This process's plan (cores it may run on, which a cgroup or taskset may limit)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return plan(cores)


def apply_process_wide(p: ThreadPlan) -> None:
    """What is set once per daemon process (ORT's settings go per session)."""
    import cv2

    cv2.setNumThreads(p.opencv_threads)
