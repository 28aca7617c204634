"""``inline_max_ms``: compute a lone request on the event loop itself when that is cheaper.

Why: handing a batch to the model's worker thread and back costs two thread hand-offs
(~50-100 µs each); for a model whose compute is well under a millisecond that is most of
a reply's time. So a lone request on an idle model, with nothing else waiting on its
socket (``Pending.quiet``) and a compute time (EWMA) under the limit, is computed on the
loop, which is blocked meanwhile (what arrives waits in ZeroMQ's queue for at most that
long). Everything else goes to the worker. It wraps the policy that decides *when*
(``immediate``, ``window`` or ``max_delay``) and decides only *where*.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from edged.batching.policy import Moment, Policy

if TYPE_CHECKING:
    from edged.batching.queue import Pending


class Inline:
    def __init__(self, when: Policy, max_s: float) -> None:
        self.when = when
        self.max_s = max_s
        #: the model's say (False while a swap or a check may use the backend elsewhere)
        self.allowed: Callable[[], bool] = lambda: True

    def hold_until(self, m: Moment) -> float:
        return self.when.hold_until(m)

    def completed(self, m: Moment, answered: int) -> None:
        self.when.completed(m, answered)

    def inline(self, batch: list[Pending], m: Moment) -> bool:
        p = batch[0]
        return (len(batch) == 1 and not m.waiting and m.compute_s is not None
                and m.compute_s <= self.max_s and p.quiet is not None and p.quiet()
                and self.allowed())
