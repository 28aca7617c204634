"""``max_delay_ms``: wait up to that long after the oldest waiting request for a full batch.

For clients that send in bursts and prefer full batches to the lowest latency: the next
batch starts when the queue holds ``cap`` rows or when its first request has waited
``max_delay_ms``, whichever comes first. Requests keep their place in the queue while
they wait (a newer frame of the same stream still replaces one, a deadline still expires).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edged.batching.policy import Moment

if TYPE_CHECKING:
    from edged.batching.queue import Pending


class MaxDelay:
    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def hold_until(self, m: Moment) -> float:
        if m.waiting >= m.cap:
            return m.now
        return m.head_arrival + self.delay_s

    def completed(self, m: Moment, answered: int) -> None:
        pass

    def inline(self, batch: list[Pending], m: Moment) -> bool:
        return False
