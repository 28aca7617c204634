"""What the governor currently allows a model besides its batch cap: a batch rate, and
which priorities it sheds.

Why a plain object: ``edged.server.governing`` writes it (through ``Model.set_throttle``)
and the batcher and its queue read it per batch and per request, on the one event loop.
"""

from __future__ import annotations


class Throttle:
    def __init__(self) -> None:
        self.max_rate_hz: float | None = None
        self.shed_priority_above: int | None = None
        self.reason: str = ""
        self._next_slot = 0.0

    def set(self, max_rate_hz: float | None, shed_priority_above: int | None,
            reason: str) -> None:
        self.max_rate_hz, self.shed_priority_above, self.reason = (
            max_rate_hz, shed_priority_above, reason)

    def next_slot(self, now: float) -> float:
        """When the next batch may start under a rate cap (``now`` or earlier: at once)."""
        return self._next_slot if self.max_rate_hz else now

    def use_slot(self, now: float) -> None:
        """A batch started: the next one is 1 / max_rate_hz later."""
        if self.max_rate_hz:
            self._next_slot = max(self._next_slot, now) + 1.0 / self.max_rate_hz
