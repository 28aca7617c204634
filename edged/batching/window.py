"""``batch_window``: after a batch, hold the next one so the clients just answered join.

Closed-loop clients (each sends its next request when the last is answered) fall into
cohorts: the ones answered by a batch send again together, just after the next batch
started without them. So when a batch of N requests completes, the next batch is held
until the N just answered are back beside those already waiting (at most a full batch),
or for ``batch_window`` x a batch's compute time (EWMA), whichever comes first.

The hold counts the answered requests even when nothing waits: 8 clients answered by
one batch come back one by one, and without it the first of them started a batch of
its own and the other seven the next (measured: MobileNetV2 on OpenVINO, batches of 1
and of 7-8 in turn). A lone client is never held: it is the one it waits for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edged.batching.policy import Moment

if TYPE_CHECKING:
    from edged.batching.queue import Pending


class Window:
    def __init__(self, fraction: float) -> None:
        self.fraction = fraction
        self._until = 0.0
        self._target = 0  # requests the held batch waits for

    def hold_until(self, m: Moment) -> float:
        if m.waiting >= self._target:
            self._until = 0.0
        return self._until

    def completed(self, m: Moment, answered: int) -> None:
        self._target = min(m.cap, m.waiting + answered)
        self._until = 0.0
        if m.compute_s and m.waiting < self._target:
            self._until = m.now + self.fraction * m.compute_s

    def inline(self, batch: list[Pending], m: Moment) -> bool:
        return False
