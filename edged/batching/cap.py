"""How many rows the next batch may take: the one owner of that number.

Why one owner: three things bound a batch and each has exactly one writer here. The
model's ``max_batch_size`` (the config, fixed); ``tuned``, the best batch measured on
this device for the active variant (``edged.model.live_variant`` sets it when a variant
goes live, from ``auto_batch`` profiling); ``throttled``, the governor's level (set
through ``Model.set_throttle`` by ``edged.server.governing``). The batcher reads
``value`` only. A backend compiled for fixed sizes still takes any batch up to it:
``edged.backends.base.run_batch`` pads or splits, which is how a batch runs, not a cap.
"""

from __future__ import annotations


class BatchCap:
    def __init__(self, configured: int) -> None:
        self.configured = configured
        self._tuned: int | None = None
        self._throttled: int | None = None
        self.value = configured

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
