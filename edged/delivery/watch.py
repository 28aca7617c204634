"""The watch window after a promotion: is the new version worse than the one before it?

Why from the daemon's own metrics: every request of every protocol is already counted by
status (``edged_requests_total``) and timed (``edged_request_duration_seconds``) per model,
so a window is the difference of two readings, and the previous version's window is the
same difference taken before the promotion (``Readings`` keeps one reading a second). Three
rules, each a threshold of ``[models.rollout]``: the error rate (INTERNAL, UNAVAILABLE,
RESOURCE_EXHAUSTED answers), the deadline-miss rate (DEADLINE_EXCEEDED, DROPPED), and the
p99 against the previous version's — compared only at a comparable load (request rates
within a factor of two, or requests in flight on average within a factor of two: clients
that wait for each answer send fewer requests to a slower version, at the same load) and
with enough requests in both windows, since a p99 measured at another load says nothing
about the version.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from edged.config.rollout import RolloutConfig
from edged.metrics import quantile_ms

ERRORS = ("INTERNAL", "UNAVAILABLE", "RESOURCE_EXHAUSTED")
MISSES = ("DEADLINE_EXCEEDED", "DROPPED")
#: request rates within this factor count as the same load
SAME_LOAD = 2.0


@dataclass(frozen=True)
class Reading:
    at: float
    statuses: dict[str, float]
    buckets: tuple[tuple[float, float], ...]  # (le, cumulative count)
    #: seconds of latency summed over OK requests (the histogram's _sum)
    latency_s: float = 0.0


@dataclass(frozen=True)
class Window:
    seconds: float
    requests: int
    errors: int
    misses: int
    p99_ms: float | None
    #: requests in flight on average (Little's law: latency summed over the window's time)
    in_flight: float = 0.0

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"seconds": round(self.seconds, 1), "requests": self.requests,
                "errors": self.errors, "deadline_misses": self.misses,
                "p99_ms": None if self.p99_ms is None else round(self.p99_ms, 2),
                "rate": round(self.rate, 1), "in_flight": round(self.in_flight, 2)}

    @classmethod
    def from_json(cls, d: Any) -> Window | None:
        """A window ``to_json`` wrote (the baseline kept in the store across a restart);
        None for anything else."""
        try:
            p99 = d["p99_ms"]
            return cls(float(d["seconds"]), int(d["requests"]), int(d["errors"]),
                       int(d["deadline_misses"]), None if p99 is None else float(p99),
                       float(d.get("in_flight", 0.0)))
        except (TypeError, KeyError, ValueError, AttributeError):
            return None


def read(metrics: Any, model: str) -> Reading:
    """One reading of ``model``'s counters (every variant) and latency histogram."""
    statuses: dict[str, float] = {}
    metrics.flush()
    for metric in metrics.requests.collect():
        for s in metric.samples:
            if s.name.endswith("_total") and s.labels.get("model") == model:
                st = s.labels.get("status", "")
                statuses[st] = statuses.get(st, 0.0) + s.value
    buckets = []
    total = 0.0
    for metric in metrics.request_duration.collect():
        for s in metric.samples:
            if s.labels.get("model") != model:
                continue
            if s.name.endswith("_bucket"):
                buckets.append((float(s.labels["le"]), s.value))
            elif s.name.endswith("_sum"):
                total = s.value
    return Reading(time.monotonic(), statuses, tuple(sorted(buckets)), total)


def window(a: Reading, b: Reading) -> Window:
    d = {k: b.statuses.get(k, 0.0) - a.statuses.get(k, 0.0) for k in b.statuses}
    total = int(sum(d.values()))
    before = dict(a.buckets)
    counts = [(le, c - before.get(le, 0.0)) for le, c in b.buckets]
    seconds = b.at - a.at
    return Window(seconds, total, int(sum(d.get(k, 0.0) for k in ERRORS)),
                  int(sum(d.get(k, 0.0) for k in MISSES)), quantile_ms(counts, 0.99),
                  (b.latency_s - a.latency_s) / seconds if seconds > 0 else 0.0)


class Readings:
    """One reading a second per watched model, for as long as a window back."""

    def __init__(self, keep_s: float = 600.0) -> None:
        self.keep_s = keep_s
        self._by_model: dict[str, deque[Reading]] = {}

    def add(self, model: str, r: Reading) -> None:
        q = self._by_model.setdefault(model, deque())
        q.append(r)
        while q and r.at - q[0].at > self.keep_s:
            q.popleft()

    def since(self, model: str, seconds: float) -> Reading | None:
        """The oldest reading no more than ``seconds`` old (None: none kept)."""
        q = self._by_model.get(model)
        if not q:
            return None
        now = q[-1].at
        return next((r for r in q if now - r.at <= seconds), None)


def judge(watched: Window, baseline: Window | None, cfg: RolloutConfig) -> str | None:
    """Why the watched version must be rolled back (None: it may stay)."""
    if watched.requests < cfg.min_requests:
        return None
    if watched.errors / watched.requests > cfg.max_error_rate:
        return (f"errors: {watched.errors} of {watched.requests} requests failed "
                f"({watched.errors / watched.requests:.1%} > max_error_rate "
                f"{cfg.max_error_rate:.1%})")
    if watched.misses / watched.requests > cfg.max_deadline_miss_rate:
        return (f"deadline_misses: {watched.misses} of {watched.requests} requests missed "
                f"their deadline ({watched.misses / watched.requests:.1%} > "
                f"max_deadline_miss_rate {cfg.max_deadline_miss_rate:.1%})")
    if (baseline is None or baseline.requests < cfg.min_requests or baseline.p99_ms is None
            or watched.p99_ms is None or not baseline.rate):
        return None
    def near(a: float, b: float) -> bool:
        return b > 0 and 1 / SAME_LOAD <= a / b <= SAME_LOAD

    if not (near(watched.rate, baseline.rate) or near(watched.in_flight, baseline.in_flight)):
        return None  # another load: its p99 says nothing about the version
    if watched.p99_ms > cfg.max_p99_ratio * baseline.p99_ms:
        return (f"p99: {watched.p99_ms:.1f} ms against {baseline.p99_ms:.1f} ms for the "
                f"previous version at a comparable load ({watched.rate:.0f} vs "
                f"{baseline.rate:.0f} requests/s, {watched.in_flight:.1f} vs "
                f"{baseline.in_flight:.1f} in flight; > max_p99_ratio {cfg.max_p99_ratio:g})")
    return None
