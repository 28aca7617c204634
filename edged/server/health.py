"""Health: the systemd watchdog, the STATUS= line, and the status/health replies.

Why the watchdog lives with status: both answer "is this daemon making progress?";
the watchdog withholds WATCHDOG=1 while any model's batch is stuck, so systemd
restarts a daemon whose runtime hangs even though its event loop still runs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from edged import __version__
from edged.metrics import Metrics, quantile_ms
from edged.model.status import describe_model
from edged.server.governing import Governing
from edged.server.state import ServerState

log = logging.getLogger("edged.server")


class Health:
    def __init__(self, state: ServerState, governing: Governing) -> None:
        self.state = state
        self.governing = governing
        self._answered_window: list[tuple[float, int]] = []
        #: more entries of the status reply (the delivered models' stages, ...)
        self.sections: list[Callable[[], dict[str, Any]]] = []

    async def watchdog_loop(self) -> None:
        """Ping systemd only while the loop runs (this task) and no worker is stuck."""
        notifier = self.state.notifier
        interval = notifier.watchdog_interval()
        status_every = 10.0
        last_status = 0.0
        was_stuck: list[str] = []
        while True:
            now = time.monotonic()
            stall = self.state.config.server.stall_timeout_s  # a batch running longer is stuck
            stuck = [m.name for m in self.state.registry if m.stuck(now, stall)]
            if stuck != was_stuck:
                if stuck:
                    log.error("watchdog: no progress on model(s) %s for > %.1f s; "
                              "withholding WATCHDOG=1", ",".join(stuck), stall)
                else:
                    log.warning("watchdog: model(s) %s progress again", ",".join(was_stuck))
                was_stuck = stuck
            if interval is not None and not stuck:
                notifier.watchdog()
            if now - last_status >= status_every:
                last_status = now
                self._answered_window.append((now, self.state.answered))
                self._answered_window = self._answered_window[-7:]
                notifier.status(self.status_line())
            await asyncio.sleep(min(interval or 1.0, 1.0))

    def requests_per_second(self) -> float:
        w = self._answered_window
        if len(w) < 2:
            return 0.0
        (t0, n0), (t1, n1) = w[0], w[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0

    def status_line(self) -> str:
        models = list(self.state.registry)
        ready = sum(m.ready for m in models)
        parts = [f"{self.state.phase}: {ready}/{len(models)} model(s) ready"]
        level = self.governing.level
        if level is not None:
            parts.append(f"governor={level}")
        parts.append(f"{self.requests_per_second():.1f} req/s")
        return "; ".join(parts)

    def health(self, request_id: str | int | None) -> dict[str, Any]:
        st = self.state
        models = list(st.registry)
        required = [m for m in models if m.cfg.required]
        ok = st.ready and st.serving and all(m.ready for m in required)
        return {
            "v": 1, "id": request_id, "status": "OK" if ok else "UNAVAILABLE",
            **({} if ok else {"error": f"daemon is {st.phase}; models: " + ", ".join(
                f"{m.name}={m.state}" for m in models)}),
            "state": st.phase,
            "uptime_s": round(time.time() - st.started_at, 1),
            "version": __version__,
            "models": {m.name: m.state for m in models},
            **({"pipelines": {p.name: p.state for p in st.registry.pipelines}}
               if st.registry.pipelines else {}),
            "governor": self.governing.summary(),
        }

    def status(self) -> dict[str, Any]:
        st = self.state
        cfg = st.config
        return {
            "version": __version__,
            "state": st.phase,
            "pid": os.getpid(),
            "uptime_s": round(time.time() - st.started_at, 1),
            "config": str(cfg.file),
            "control": st.control_endpoint,
            "listeners": [asdict(li) for room in st.rooms for li in room.listeners()],
            **{k: v for room in st.rooms for k, v in room.status().items()},
            "metrics": (f"{cfg.metrics.host}:{st.metrics.port}" if cfg.metrics.enabled
                        else None),
            "requests_per_second": round(self.requests_per_second(), 2),
            "answered": st.answered,
            "models": [{**describe_model(m), "pin": self.governing.pins.describe(m.name),
                        "overload": self.governing.overload.describe(m),
                        **latency(st.metrics, m.name)} for m in st.registry],
            "pipelines": [{**p.describe(), "overload": self.governing.overload.describe(p),
                           **latency(st.metrics, p.name)} for p in st.registry.pipelines],
            "governor": self.governing.summary(),
            "store": st.store.describe() if st.store is not None else None,
            "last_reload": st.last_reload,
            **{k: v for section in self.sections for k, v in section().items()},
        }


def latency(metrics: Metrics, model: str) -> dict[str, Any]:
    """p50/p99 request latency from the histogram buckets (since start)."""
    metrics.flush()
    h = metrics.request_duration.labels(model)
    buckets = [(float(b), c) for b, c in _bucket_counts(h)]
    total = buckets[-1][1] if buckets else 0
    if not total:
        return {"p50_ms": None, "p99_ms": None, "served": 0}
    return {"p50_ms": round(quantile_ms(buckets, 0.5) or 0.0, 3),
            "p99_ms": round(quantile_ms(buckets, 0.99) or 0.0, 3), "served": int(total)}


def _bucket_counts(h: Any) -> list[tuple[str, float]]:
    out = []
    for metric in h.collect():
        for s in metric.samples:
            if s.name.endswith("_bucket"):
                out.append((s.labels["le"], s.value))
    return out
