"""How many rows the next batch may take: the one owner of that number.

Why one owner: three things bound a batch and each has exactly one writer here. The
model's ``max_batch_size`` (the config, fixed); ``tuned``, the best batch measured on
this device for the active variant (``edged.model.live_variant`` sets it when a variant
goes live, from ``auto_batch`` profiling); ``throttled``, the governor's level (set
through ``Model.set_throttle`` by ``edged.server.governing``). The batcher reads
``value``, and ``take`` when the backend computes a batch in parallel parts. A backend
compiled for fixed sizes still takes any batch up to it: ``edged.backends.base.run_batch``
pads or splits, which is how a batch runs, not a cap.

``multiple`` is the live backend's ``batch_multiple``: how many parts it splits a batch
into to compute them in parallel (OpenVINO's THROUGHPUT streams). A batch of 3 rows on 2
streams runs as 2 + 1, the second stream idle for half the batch: measured in process
on MobileNetV2, 3 rows a batch gave 272/s against 340/s at 2 and 370/s at 4. So when more
rows wait than ``multiple``, a batch takes a multiple of it (``take``) and the rest starts
the next batch, which begins as this one completes.
"""

from __future__ import annotations


class BatchCap:
    def __init__(self, configured: int) -> None:
        self.configured = configured
        self._tuned: int | None = None
        self._throttled: int | None = None
        self.value = configured
        self.multiple = 1

    def for_variant(self, tuned: int | None, multiple: int) -> None:
        """A variant went live: its measured best batch and its backend's multiple."""
        self.multiple = max(1, multiple)
        self.tuned = tuned

    def take(self, ready: int) -> int:
        """How many of ``ready`` waiting rows the next batch takes: up to ``value``,
        rounded down to a multiple of ``multiple`` when more than it are waiting."""
        n = min(ready, self.value)
        return n - n % self.multiple if n > self.multiple else n

    @property
    def tuned(self) -> int | None:
        return self._tuned

    @tuned.setter
    def tuned(self, rows: int | None) -> None:
        self._tuned = rows
        self._update()

    @property
    def throttled(self) -> int | None:
        return self._throttled

    @throttled.setter
    def throttled(self, rows: int | None) -> None:
        self._throttled = rows
        self._update()

    def _update(self) -> None:
        """Computed on change, not per batch: ``value`` is read on every request's path."""
        v = self.configured
        for bound in (self._tuned, self._throttled):
            if bound is not None:
                v = max(1, min(v, bound))
        self.value = v
