"""Speed of a loaded variant: batch-1 latency (p50) and throughput at the max batch.

Why both: the governor's ladder is about latency for a lone camera frame at low
load and rows per second at high load; a variant can win one and lose the other
(e.g. per-batch tuned TVM libraries). Runs are bounded by count *and* time so a
slow variant cannot stall the compile run.

Why rounds: on a shared machine one burst of someone else's load can make a variant
look 20 % faster or slower. The runs are split into ``ROUNDS`` alternating rounds
(batch 1, then the max batch, then again) and each round's figures are recorded, so
the ladder can demand that a rung be cheaper in *every* round, not by luck in one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from edged.backends.base import Backend, run_batch, zero_feeds

ROUNDS = 3


@dataclass
class Speed:
    latency_ms_p50: float  # batch 1, over all rounds
    latency_ms_p90: float
    throughput_per_s: float  # rows/s at max_batch, from the median batch time
    max_batch: int
    runs: int
    threads: int | None
    #: per round: {"latency_ms_p50", "throughput_per_s"}
    rounds: list[dict[str, float]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        doc = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}
        doc["rounds"] = [{k: round(v, 4) for k, v in r.items()} for r in self.rounds]
        return doc

    def summary(self) -> str:
        return (f"b=1 p50 {self.latency_ms_p50:.3f} ms, b={self.max_batch} "
                f"{self.throughput_per_s:,.0f}/s")


def _times(backend: Backend, batch: int, runs: int, budget_s: float,
           minimum: int = 5, warmup: int = 3,
           clock: Callable[[], float] = time.perf_counter) -> list[float]:
    feeds = zero_feeds(backend.inputs, batch)
    rng = np.random.default_rng(0)
    for k, v in feeds.items():
        if v.dtype.kind == "f":
            feeds[k] = rng.random(v.shape, dtype=np.float32).astype(v.dtype)
    for _ in range(warmup):
        run_batch(backend, feeds)
    out: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(out) < runs and (len(out) < minimum or time.perf_counter() < deadline):
        t0 = clock()
        run_batch(backend, feeds)
        out.append(clock() - t0)
    return out


def measure(backend: Backend, max_batch: int, runs: int = 50, budget_s: float = 3.0,
            threads: int | None = None,
            clock: Callable[[], float] = time.perf_counter) -> Speed:
    """p50/p90 at batch 1 and rows/s at ``max_batch``, over ``ROUNDS`` rounds; ``clock``
    ``time.process_time`` times the CPU the runs cost (what a process timing beside
    serving at the lowest priority can read: its wall time is mostly waiting)."""
    per_round = max(3, -(-runs // ROUNDS))
    lat_all: list[float] = []
    big_all: list[float] = []
    rounds: list[dict[str, float]] = []
    for i in range(ROUNDS):
        warm = 3 if i == 0 else 0
        lat = _times(backend, 1, per_round, budget_s / ROUNDS, minimum=3, warmup=warm,
                     clock=clock)
        big = _times(backend, max_batch, max(2, per_round // 2), budget_s / ROUNDS,
                     minimum=2, warmup=warm, clock=clock)
        rounds.append({"latency_ms_p50": float(np.median(lat)) * 1000.0,
                       "throughput_per_s": float(max_batch / np.median(big))})
        lat_all += lat
        big_all += big
    lat_ms = np.asarray(lat_all) * 1000.0
    return Speed(
        latency_ms_p50=float(np.percentile(lat_ms, 50)),
        latency_ms_p90=float(np.percentile(lat_ms, 90)),
        throughput_per_s=float(max_batch / np.median(big_all)),
        max_batch=max_batch,
        runs=len(lat_all),
        threads=threads,
        rounds=rounds,
    )


def compare(upper: Backend, lower: Backend, max_batch: int, runs: int = 30,
            budget_s: float = 3.0) -> tuple[float, float]:
    """How much cheaper ``lower`` is than ``upper``, timed interleaved.

    Why: figures measured minutes apart on a shared machine differ by more than
    the 15 % a ladder rung must save. Here both run in alternation, ``ROUNDS``
    times, so load hits both alike; the result is the least favourable round's
    ratio (batch-1 median latency, and rows/s at ``max_batch``).
    """
    per_round = max(3, -(-runs // ROUNDS))
    b1: list[float] = []
    big: list[float] = []
    for i in range(ROUNDS):
        warm = 3 if i == 0 else 0
        t = budget_s / (4 * ROUNDS)
        up1 = float(np.median(_times(upper, 1, per_round, t, minimum=3, warmup=warm)))
        lo1 = float(np.median(_times(lower, 1, per_round, t, minimum=3, warmup=warm)))
        upn = float(np.median(_times(upper, max_batch, max(2, per_round // 2), t, minimum=2,
                                     warmup=warm)))
        lon = float(np.median(_times(lower, max_batch, max(2, per_round // 2), t, minimum=2,
                                     warmup=warm)))
        b1.append(up1 / lo1)
        big.append(upn / lon)
    return min(b1), min(big)
