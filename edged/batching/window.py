"""``batch_window``: after a batch, hold a short queue so the clients just answered join.

Closed-loop clients (each sends its next request when the last is answered) fall into
cohorts: the ones answered by a batch send again together, just after the next batch
started without them. When a batch completes and fewer requests wait than a full batch,
the next one is held for ``batch_window`` x a batch's compute time (EWMA), or until the
queue holds a full batch. A request reaching an idle model is never held: a hold starts
only when a batch completes with requests waiting.
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

    def hold_until(self, m: Moment) -> float:
        if m.waiting >= m.cap:
            self._until = 0.0
        return self._until

    def completed(self, m: Moment) -> None:
        open_ = 0 < m.waiting < m.cap and m.compute_s
        self._until = m.now + self.fraction * m.compute_s if open_ and m.compute_s else 0.0

    def inline(self, batch: list[Pending], m: Moment) -> bool:
        return False
