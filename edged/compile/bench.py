"""Speed of a loaded variant: batch-1 latency (p50) and throughput at the max batch.

Why both: the governor's ladder is about latency for a lone camera frame at low
load and rows per second at high load; a variant can win one and lose the other
(e.g. per-batch tuned TVM libraries). Runs are bounded by count *and* time so a
slow variant cannot stall the pipeline.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from edged.backends.base import Backend, run_batch, zero_feeds


@dataclass
class Speed:
    latency_ms_p50: float  # batch 1
    latency_ms_p90: float
    throughput_per_s: float  # rows/s at max_batch
    max_batch: int
    runs: int
    threads: int | None

    def to_json(self) -> dict[str, Any]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}

    def summary(self) -> str:
        return (f"b=1 p50 {self.latency_ms_p50:.3f} ms, b={self.max_batch} "
                f"{self.throughput_per_s:,.0f}/s")


def _times(backend: Backend, batch: int, runs: int, budget_s: float) -> list[float]:
    feeds = zero_feeds(backend.inputs, batch)
    rng = np.random.default_rng(0)
    for k, v in feeds.items():
        if v.dtype.kind == "f":
            feeds[k] = rng.random(v.shape, dtype=np.float32).astype(v.dtype)
    for _ in range(3):
        run_batch(backend, feeds)
    out: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(out) < runs and (len(out) < 5 or time.perf_counter() < deadline):
        t0 = time.perf_counter()
        run_batch(backend, feeds)
        out.append(time.perf_counter() - t0)
    return out


def measure(backend: Backend, max_batch: int, runs: int = 50, budget_s: float = 3.0,
            threads: int | None = None) -> Speed:
    """p50/p90 at batch 1 and rows/s at ``max_batch`` (median batch time)."""
    lat = np.asarray(_times(backend, 1, runs, budget_s)) * 1000.0
    big = np.asarray(_times(backend, max_batch, max(5, runs // 2), budget_s))
    return Speed(
        latency_ms_p50=float(np.percentile(lat, 50)),
        latency_ms_p90=float(np.percentile(lat, 90)),
        throughput_per_s=float(max_batch / np.median(big)),
        max_batch=max_batch,
        runs=len(lat),
        threads=threads,
    )
