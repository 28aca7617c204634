"""The governor inside a real daemon: a level table, status readers and steady load.

Why shared: the governor, OpenVINO and operator-pin tests all drive the same ladder
(warm → one rung down, hot → two rungs and batch cap, low battery) and watch the same
status fields.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from support.daemons import Daemon
from support.paths import MODELS

#: Three levels: warm (70 °C) one rung down; hot (80 °C) two rungs, batches of 2 and
#: priority > 0 shed; low battery (< 20 %) two rungs.
LEVELS = """
[[governor.levels]]
name = "warm"
enter_c = 70.0
exit_c = 65.0
ladder_steps = 1
[[governor.levels]]
name = "hot"
enter_c = 80.0
exit_c = 75.0
ladder_steps = 2
max_batch_size = 2
shed_priority_above = 0
[[governor.levels]]
name = "low-battery"
battery_below = 0.2
ladder_steps = 2
"""



def one_step_warm(sysfs_root: object) -> str:
    """A ``[governor]`` table on a fake sysfs root: ticks every 0.2 s, no swap spacing,
    one level (warm, 70 °C) one rung down."""
    return f"""[governor]
enabled = true
sysfs_root = "{sysfs_root}"
interval_s = 0.2
swap_min_interval_s = 0
[[governor.levels]]
name = "warm"
enter_c = 70.0
exit_c = 65.0
ladder_steps = 1
"""


_VAL = np.load(MODELS / "validation.npz")
X = (_VAL["x"][:64].astype(np.float32) / 255.0)[:, None]
Y = _VAL["y"][:64]


def status(d: Daemon) -> dict[str, Any]:
    """The daemon's control ``status`` reply."""
    return d.ctl({"op": "status"})


def level(d: Daemon) -> str:
    """The governor's current level."""
    return str(status(d)["governor"]["level"])


def active(d: Daemon) -> str:
    """The first model's active variant."""
    return str(status(d)["models"][0]["active_variant"])


class Streamers:
    """Clients sending priority-0 digits requests back to back and recording every reply
    as (time, status, variant, correct, client)."""

    def __init__(self, d: Daemon, n: int = 4) -> None:
        self.stop = threading.Event()
        self.replies: list[tuple[float, str, str | None, bool, int]] = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(d, k)) for k in range(n)]
        for t in self.threads:
            t.start()

    def _run(self, d: Daemon, k: int) -> None:
        with d.client(timeout_s=20) as c:
            i = k
            while not self.stop.is_set():
                j = i % len(X)
                r = c.infer("digits", X[j:j + 1], priority=0, raise_on_error=False)
                correct = r.ok and int(np.argmax(r.outputs["logits"])) == Y[j]
                with self.lock:
                    self.replies.append((time.monotonic(), r.status, r.header.get("variant"),
                                         correct, k))
                i += 4

    def finish(self) -> list[tuple[float, str, str | None, bool, int]]:
        self.stop.set()
        for t in self.threads:
            t.join(30)
        return self.replies
