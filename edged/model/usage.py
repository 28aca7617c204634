"""A model's load as the governor reads it: duty, cost per row, how late answers come.

Why one place: the governor learns each variant's power from the model's duty cycle,
and ``edged.server.overload`` steps a model down its ladder when its requests come too
close to their deadlines and back up when the heavier variant's cost per row says it
would keep them. Both read what the batcher saw, recorded here on the event loop.
"""

from __future__ import annotations

import time
from collections import deque

#: answers remembered for the overload rule (it reads a window of seconds of them)
MAX_ANSWERS = 4096
#: weight of the newest batch in a variant's cost per row
COST_ALPHA = 0.2


class ModelUsage:
    def __init__(self) -> None:
        self._busy_s = 0.0  # compute seconds since the last take_duty()
        self._rows = 0  # rows computed since the last take_rows()
        self._duty_since = time.monotonic()
        #: (when, share of its deadline the request used) per answered request with one
        self._answers: deque[tuple[float, float]] = deque(maxlen=MAX_ANSWERS)
        self._cost: dict[str, float] = {}

    def computed(self, variant: str, rows: int, compute_s: float) -> None:
        """A batch of ``rows`` ran on ``variant`` in ``compute_s``."""
        self._busy_s += compute_s
        self._rows += rows
        per_row = compute_s / max(rows, 1)
        old = self._cost.get(variant)
        self._cost[variant] = per_row if old is None else (
            (1 - COST_ALPHA) * old + COST_ALPHA * per_row)

    def answered(self, arrival: float, deadline: float) -> None:
        """A request with a deadline was answered now (computed, dropped or late)."""
        budget = deadline - arrival
        if budget > 0:
            now = time.monotonic()
            self._answers.append((now, (now - arrival) / budget))

    def deadline_use(self, since: float) -> list[float]:
        """The share of its deadline each request answered after ``since`` used (1 or
        more: answered at or after it)."""
        return [used for at, used in self._answers if at > since]

    def cost_per_row(self, variant: str) -> float | None:
        """Seconds of compute per row on ``variant`` (None: it has not run)."""
        return self._cost.get(variant)

    def take_rows(self) -> int:
        """Rows computed since the last call: the energy budget's inferences."""
        rows, self._rows = self._rows, 0
        return rows

    def take_duty(self) -> float:
        """Fraction of the time since the last call that a batch was computing (0..1)."""
        now = time.monotonic()
        span, busy = now - self._duty_since, self._busy_s
        self._duty_since, self._busy_s = now, 0.0
        return min(1.0, busy / span) if span > 0 else 0.0
