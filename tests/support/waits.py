"""Wait for a condition, never a fixed time.

Why: a fixed sleep is either too short on a loaded machine (a flaky failure) or, for a
check that *nothing* changed, passes vacuously when the thing that could have changed
it never ran. Waiting for the governor's ``steps`` counter makes such a check real.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from edged.testing.harness import wait_until
from support.daemons import Daemon, received


def wait_governor_steps(
    status: Callable[[], dict[str, Any]], count: int, timeout_s: float = 10.0
) -> dict[str, Any]:
    """Wait until a daemon's governor has applied ``count`` more steps; its status then.

    ``status`` returns the control ``status`` reply; its ``governor.steps`` counts applied
    ticks. Why: after writing a tree, a test that checks that *nothing* changed must know
    the governor has read the tree since; a fixed sleep passes vacuously when no tick
    happened. The first step counted may have sampled before the write, so ask for one
    more than the ticks the check needs.
    """
    start = int(status()["governor"]["steps"])
    end = time.monotonic() + timeout_s
    while True:
        gov = status()["governor"]
        if gov["steps"] >= start + count:
            return dict(gov)
        if time.monotonic() >= end:
            raise AssertionError(
                f"the governor made {gov['steps'] - start} of {count} steps in {timeout_s} s")
        time.sleep(0.02)


def wait_computing(d: Daemon, model: str, since: float = 0, timeout: float = 10.0) -> None:
    """Wait until ``model`` has taken the request just sent to it out of its queue: the
    daemon has received more than ``since`` requests (``received(d)`` read before the
    send) and the model's queue is empty. It is computing, so what is sent next queues
    behind it. The daemon must run with ``metrics=True``."""
    def taken() -> bool:
        if received(d) <= since:  # first: once received, it is queued or taken
            return False
        return next(m["queue_depth"] for m in d.ctl({"op": "models"})["models"]
                    if m["name"] == model) == 0

    wait_until(taken, timeout, f"{model} computing the request sent", interval=0.01)
