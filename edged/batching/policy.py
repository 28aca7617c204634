"""When a model's next batch may start, and where it computes: the interface of the
batching policies.

Why policies: batches form the same way whatever decides their timing (the queue's ``take``,
the deadline check, the one dispatch in ``Batcher``); what differs between ``max_delay_ms``,
``batch_window`` and starting at once is only *when*, and for ``inline_max_ms`` *where*.
Each is a file of its own behind this interface: ``immediate`` (the default), ``max_delay``,
``window``, ``inline`` (wraps one of the others); ``edged.batching.choose_policy`` picks a
model's. The batcher asks ``hold_until`` every time it could start a batch (a request
arrived, a batch completed, a hold's timer fired) and tells ``completed`` when a batch ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from edged.batching.queue import Pending, RequestQueue


class Moment:
    """What a policy may look at when the backend is free and requests wait."""

    __slots__ = ("cap", "compute_s", "now", "queue", "waiting")

    def __init__(self, now: float, queue: RequestQueue, cap: int,
                 compute_s: float | None) -> None:
        self.now = now  # time.monotonic()
        self.queue = queue
        self.waiting = queue.depth  # requests queued
        self.cap = cap  # rows the next batch may take (``BatchCap.value``)
        #: the compute time of a batch, an EWMA of those that ran (None: none ran yet)
        self.compute_s = compute_s

    @property
    def head_arrival(self) -> float:
        """Arrival of the request the next batch would start with (looked up only when a
        policy asks: the default policy never does, on every request's path)."""
        head = self.queue.head()
        return head.arrival if head is not None else self.now


class Policy(Protocol):
    def hold_until(self, m: Moment) -> float:
        """The time before which the next batch should not start (``m.now`` or earlier:
        start it now). The batcher looks again when a request arrives or the time comes."""
        ...

    def completed(self, m: Moment, answered: int) -> None:
        """A batch of ``answered`` requests just completed; ``m`` is the queue as it
        stands after it."""
        ...

    def inline(self, batch: list[Pending], m: Moment) -> bool:
        """Compute ``batch`` on the event loop itself instead of the model's worker."""
        ...
