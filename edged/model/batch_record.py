"""What each computed batch of one model leaves behind: its metrics, the model's usage,
and when it ran.

Why apart from ``model.Model``: the batcher hands every finished batch here directly
(its ``on_batch``, no call through the model), and what is written is read elsewhere:
the metrics scrape, the governor and the overload rule (``usage.ModelUsage``), a
version's shadow asking whether batches still come (``Model.idle_s``). The model itself
only sets the queue's depth as a request arrives. The labelled series are looked up once
per model and variant, not per batch (``.labels()`` costs µs each).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from edged.batching.queue import Pending, RequestQueue
from edged.config.models import ModelConfig
from edged.metrics import Metrics
from edged.model.usage import ModelUsage


class BatchRecord:
    """The one writer of a model's per-batch series (compute time by variant, rows per
    batch, energy), of its queue's gauges, and of ``ModelUsage.computed``."""

    def __init__(self, model: str, metrics: Metrics, queue: RequestQueue, usage: ModelUsage,
                 power_w: Callable[[], float | None] | None) -> None:
        self.model = model
        self.metrics = metrics
        self.queue = queue
        self.usage = usage
        self.power_w = power_w  # the board's power now (None: not measured), for energy
        metrics.queue_capacity.labels(model).set(queue.max_queue)
        #: the queue depth gauge's ``set``: after each batch here, and by the model per
        #: request, both through ``later`` (``edged.metrics.Later``)
        self.queue_depth = metrics.queue_depth.labels(model).set
        self._later = metrics.later.add
        self._batch_size = metrics.batch_size.labels(model).observe
        self._compute: dict[str, Any] = {}  # variant -> its compute_duration ``observe``
        #: when a batch was last computed (None: never)
        self.last: float | None = None
        self._rung_of: dict[str, str] = {}  # a pair's batch member -> its rung's variant

    def rungs(self, cfg: ModelConfig) -> None:
        """``cfg``'s ladder: a batch a pair's member computes is counted by that member
        (``edged_compute_duration_seconds{variant}``: the batches each computed) and in the
        usage by its rung, the governor's unit (cost per row by rung)."""
        self._rung_of = {v.batch_variant.name: v.name for v in cfg.variants
                         if v.batch_variant is not None}

    def computed(self, variant: str, rows: int, compute_s: float, batch: list[Pending]) -> None:
        """A batch of ``rows`` ran on ``variant`` in ``compute_s`` (the batcher's ``on_batch``).
        The series are updated after the batch's replies (``edged.metrics.Later``)."""
        self.last = time.monotonic()
        observe = self._compute.get(variant)
        if observe is None:
            observe = self._compute[variant] = self.metrics.compute_duration.labels(
                self.model, variant).observe
        later = self._later
        later((observe, compute_s))
        later((self._batch_size, rows))
        later((self.queue_depth, self.queue.depth))
        self.usage.computed(self._rung_of.get(variant, variant), rows, compute_s)
        if self.power_w is not None:
            w = self.power_w()
            if w:
                self.metrics.energy.labels(self.model).inc(w * compute_s)
