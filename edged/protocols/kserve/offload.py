"""Offload: hand a request to a bigger KServe v2 server when this device should not compute it.

When: the governor's level lists the model (``offload = ["person"]``: the board is hot),
or, with ``on_deadline``, the model's queue would answer after the request's deadline (the
batcher's EWMA of compute time predicts it). Only to a remote whose background health
check passes (a dead remote is never tried on the request path) and only tensors: the
request is prepared here as always, its tensors go to the remote, and a detector's raw
outputs come back to be decoded here, so replies look the same, with ``variant =
"remote:<name>"``. On any remote failure the request is computed here if its deadline
still allows, else answered DEADLINE_EXCEEDED. ``Admission.submit`` asks ``take``
before it queues a request here, so every protocol room offloads the same way.

What marks a remote down, and what does not: only a connection failure on the request
path (``RemoteError.down``) and the background readiness check. A request the remote
refuses or fails (an HTTP status, a gRPC status other than UNAVAILABLE) is that
request's failure alone: one bad request must not stop offloading for everyone.

The metadata check: at start and on each health check the remote model's metadata is
compared with the local model's tensors (``remote.metadata_mismatch``); a model whose
remote does not match stays local, with the reason in ``status()`` and one log line per
change (not per check). The tensors compared are the model's contract: what a request
is prepared into here and what the head reads back, for every variant of the model,
the one the remote counts as included.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from edged.batching.queue import Result
from edged.config.file import Config
from edged.config.kserve import OffloadConfig, OffloadModel
from edged.errors import DeadlineExceeded, EdgedError
from edged.model.contract import Prepared
from edged.model.model import Model
from edged.protocols.serving import Listener, Loop, Serving

log = logging.getLogger(__name__)

#: seconds a health check waits for each answer at least, whatever the interval: a busy
#: remote (or a busy device) that answers in 300 ms is not down
MIN_CHECK_TIMEOUT_S = 1.0


@dataclass
class _Job:
    """One request on its way to the remote: what a local fallback needs too."""

    model: Model
    prepared: Prepared
    respond: Callable[[Any], None]
    arrival: float
    priority: int
    deadline: float | None
    mapping: OffloadModel
    reason: str


class OffloadRoom:
    def __init__(self, state: Serving, level: Any) -> None:
        """``level()``: the governor's current level name (None without a governor)."""
        self.state = state
        self._level = level
        self.cfg = OffloadConfig()
        self._remote: Any = None  # edged.protocols.kserve.remote.Remote
        self._up: dict[str, bool] = {}
        #: why a model's offload is unused although its remote is up (None: it is used)
        self._unused: dict[str, str | None] = {}
        self._logged: dict[str, str | None] = {}  # the reason last logged, per model
        self._inflight = 0
        m = state.metrics
        self.m_requests, self.m_remote, self.m_up = (m.offload_requests, m.offload_remote,
                                                     m.offload_up)

    async def configure(self, cfg: OffloadConfig) -> None:
        """At start and after a reload: a new remote client when the section changed."""
        if cfg == self.cfg:
            return
        await self.close()
        self.cfg = cfg
        self._up = {m.model: False for m in cfg.models}
        self._unused = {m.model: "the remote model's metadata is not checked yet"
                        for m in cfg.models}
        self._logged = {}
        for m in cfg.models:
            self.m_up.labels(m.model).set(0)
        if cfg.enabled:
            from edged.protocols.kserve.remote import Remote

            self._remote = Remote(cfg)
            log.info("offload to %s for %s", cfg.url, ",".join(m.model for m in cfg.models))

    async def loop(self) -> None:
        """Background health checks (the lifecycle runs this task): readiness, then the
        remote model's metadata against the local model's tensors."""
        while True:
            remote, cfg = self._remote, self.cfg
            if remote is not None:
                for m in cfg.models:
                    try:
                        await self._check(remote, cfg, m)
                    except Exception as e:  # one odd answer must not end the checks
                        log.exception("offload check of %s failed", m.model)
                        self._set_unused(m, f"the check failed: {type(e).__name__}: {e}")
            await asyncio.sleep(cfg.health_interval_s)

    async def _check(self, remote: Any, cfg: OffloadConfig, m: OffloadModel) -> None:
        from edged.protocols.kserve.remote import RemoteError, metadata_mismatch

        local = self.state.registry.find(m.model)
        if local is None or not local.inputs:
            return  # nothing to compare with until the local model has loaded
        timeout = max(MIN_CHECK_TIMEOUT_S, min(cfg.health_interval_s, 2.0))
        ok = await remote.ready(m.remote_model, timeout)
        if ok:
            try:
                meta = await remote.metadata(m.remote_model, timeout)
            except RemoteError as e:
                if e.down:  # gone (or hung) between the two calls: the next check sees it
                    ok = False
                else:  # it answered, but not with the model's metadata
                    self._set_unused(m, f"the remote model's metadata could not be read: {e}")
            else:
                why = metadata_mismatch(local.inputs, local.outputs, meta)
                self._set_unused(m, None if why is None else
                                 f"the remote model does not match {m.model!r}: {why}")
        if ok != self._up.get(m.model):
            log.log(logging.INFO if ok else logging.WARNING,
                    "offload remote %s model %s is %s", cfg.url, m.remote_model,
                    "up" if ok else "down")
        self._up[m.model] = ok
        self.m_up.labels(m.model).set(int(ok))

    def _set_unused(self, m: OffloadModel, why: str | None) -> None:
        """Record why the model's offload is unused (None: used); log only a change."""
        self._unused[m.model] = why
        if self._logged.get(m.model, "") == why:
            return
        self._logged[m.model] = why
        if why is None:
            log.info("offload remote %s model %s matches model %s's inputs and outputs; "
                     "offloading it", self.cfg.url, m.remote_model, m.model)
        else:
            log.warning("offload of model %s to %s model %s is unused: %s", m.model,
                        self.cfg.url, m.remote_model, why)

    # -- as the lifecycle drives it (a room with no listener of its own) -------------------

    async def start(self, config: Config) -> None:
        await self.configure(config.offload)

    def loops(self) -> list[Loop]:
        return [("offload-health", self.loop())]

    async def apply(self, config: Config) -> list[str]:
        await self.configure(config.offload)
        return []

    def listeners(self) -> list[Listener]:
        return []

    def status(self) -> dict[str, Any]:
        return {"offload": self.describe()}

    async def stop(self) -> None:
        await self.close()

    def describe(self) -> dict[str, Any] | None:
        """The section of ``edged status``: a model whose remote is up but not used has
        ``unused`` (why); over HTTP, ``tensors`` says how they travel (binary or JSON)."""
        if not self.cfg.enabled:
            return None
        out: dict[str, Any] = {
            "url": self.cfg.url, "up": dict(self._up), "inflight": self._inflight,
            "models": {m.model: {"remote_model": m.remote_model,
                                 "counts_as": m.variant or self._first_variant(m.model),
                                 **({"unused": self._unused[m.model]}
                                    if self._unused.get(m.model) else {})}
                       for m in self.cfg.models}}
        if self._remote is not None and self._remote.http:
            out["tensors"] = self._remote.tensors
        return out

    def _first_variant(self, model: str) -> str | None:
        m = self.state.registry.find(model)
        return m.variant_names[0] if m is not None and m.variant_names else None

    def take(self, model: Model, prepared: Prepared, respond: Callable[[Any], None],
             arrival: float, priority: int, deadline: float | None) -> bool:
        """Start computing a request remotely and return True, or return False (local).
        ``respond`` gets its outcome once, as from ``Model.submit``."""
        mapping = self.cfg.for_model(model.name)
        if (mapping is None or self._remote is None or not self._up.get(model.name)
                or self._unused.get(model.name)):
            return False
        if self._inflight >= self.cfg.max_inflight:
            return False  # the remote has enough of ours: this one waits its turn here
        if getattr(prepared.meta, "track", False):
            return False  # track ids live in this daemon's per-stream trackers
        reason = self._reason(model, deadline)
        if reason is None:
            return False
        self._inflight += 1
        job = _Job(model, prepared, respond, arrival, priority, deadline, mapping, reason)
        self.state.spawn(self._run(job))
        return True

    def _reason(self, model: Model, deadline: float | None) -> str | None:
        level = self._level()
        if level is not None:
            for lv in self.state.config.governor.levels or ():
                if lv.name == level and model.name in lv.offload:
                    return "governor"
        if (self.cfg.on_deadline and deadline is not None
                and time.monotonic() + model.predicted_latency_s() > deadline):
            return "deadline"
        return None

    async def _run(self, job: _Job) -> None:
        model, prepared = job.model, job.prepared
        t0 = time.monotonic()
        timeout = self.cfg.timeout_ms / 1000.0
        if job.deadline is not None:
            timeout = max(0.001, min(timeout, job.deadline - t0))
        names = [o.name for o in model.outputs] if model.cfg.postprocess is not None else (
            prepared.outputs or [o.name for o in model.outputs])
        try:
            outs = await self._remote.infer(job.mapping.remote_model, prepared.feeds, names,
                                            timeout)
            done = model.finish_remote(prepared, outs)
        except Exception as e:
            self._fallback(job, e)
            return
        finally:
            self._inflight -= 1
        took = time.monotonic() - t0
        self.m_remote.labels(model.name).observe(took)
        self.m_requests.labels(model.name, job.reason, "remote").inc()
        job.respond(Result(f"remote:{job.mapping.remote_model}", done[0], t0 - job.arrival,
                           took, prepared.rows, done[1]))

    def _fallback(self, job: _Job, err: Exception) -> None:
        model = job.model
        if getattr(err, "down", False):
            # A connection failure: not tried again until a health check passes. Every
            # model of this remote goes local (they share the connection).
            if any(self._up.values()):
                log.warning("offload remote %s is down (%s)", self.cfg.url, err)
            for name in self._up:
                self._up[name] = False
                self.m_up.labels(name).set(0)
        else:
            log.warning("offload of a %s request failed (%s); computing it here",
                        model.name, err)
        if job.deadline is not None and (
                time.monotonic() + model.predicted_latency_s() > job.deadline):
            self.m_requests.labels(model.name, job.reason, "failed").inc()
            job.respond(DeadlineExceeded(f"the offload server failed ({err}) and there is no "
                                         "time left to compute it here"))
            return
        self.m_requests.labels(model.name, job.reason, "fallen_back").inc()
        try:
            model.submit(job.prepared, job.respond, arrival=job.arrival, priority=job.priority,
                         deadline=job.deadline)
        except EdgedError as e:
            job.respond(e)

    async def close(self) -> None:
        if self._remote is not None:
            await self._remote.close()
            self._remote = None
