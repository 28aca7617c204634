"""The default policy: a batch starts as soon as the backend is free.

A lone request on an idle model runs at once; while the backend computes, requests
accumulate and the next batch takes as many as fit. So latency at low load is that of
one inference and throughput at high load that of full batches, without any waiting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edged.batching.policy import Moment

if TYPE_CHECKING:
    from edged.batching.queue import Pending


class Immediate:
    def hold_until(self, m: Moment) -> float:
        return m.now

    def completed(self, m: Moment, answered: int) -> None:
        pass

    def inline(self, batch: list[Pending], m: Moment) -> bool:
        return False
