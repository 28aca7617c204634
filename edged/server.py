"""The daemon: ZeroMQ ROUTER endpoints, model registry, governor, control, lifecycle.

Lifecycle as plain as uvicorn's Server: ``start`` (metrics, sockets, models, READY),
``serve`` (until SIGTERM/SIGINT), ``drain`` (stop taking work, finish what is queued
within the drain timeout, answer the rest UNAVAILABLE), ``stop`` (close everything).
SIGHUP reloads the config. All socket I/O and batching run on one asyncio loop;
inference runs on one worker thread per model; image decoding on a small pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from edged import __version__
from edged.batcher import Pending, Result
from edged.config import Config, ModelConfig, load_config
from edged.errors import (
    ConfigError,
    EdgedError,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unavailable,
)
from edged.metrics import Metrics
from edged.protocol import (
    ProtocolError,
    Request,
    decode_header,
    encode_header,
    error_reply,
    ok_reply_frames,
    parse_request,
    peek_id,
)
from edged.registry import ModelRuntime, unknown_model
from edged.runtime_dir import resolve_endpoints, resolve_runtime_dir
from edged.systemd import Notifier

log = logging.getLogger("edged.server")

LOOPBACK_PREFIXES = ("tcp://127.", "tcp://localhost:", "tcp://[::1]:")
#: image decodes queued at once, all clients together (each holds a decoded frame)
MAX_PENDING_DECODES = 64


class StartupError(Exception):
    """A one-line reason the daemon cannot start (exit code 1)."""


class Server:
    def __init__(self, config: Config, overrides: dict[str, Any] | None = None) -> None:
        self.config = config
        #: command-line flags (Config.with_overrides kwargs), re-applied on every reload
        self.overrides = overrides or {}
        self.metrics = Metrics()
        self.notifier = Notifier.from_env()
        self.models: dict[str, ModelRuntime] = {}
        self.ctx: zmq.asyncio.Context | None = None
        self.sockets: list[zmq.asyncio.Socket] = []
        self.control: zmq.asyncio.Socket | None = None
        self.endpoints: list[str] = []
        self.control_endpoint = ""
        self.runtime_dir: Path | None = None
        self.started_at = time.time()
        self.ready = False
        self.state = "starting"
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self._pre_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="edged-pre")
        self._inflight: dict[bytes, int] = {}
        self._decoding = 0  # requests waiting for image decode/preprocess
        self._answered = 0
        self._answered_window: list[tuple[float, int]] = []
        self._auth: Any = None
        self.governor: Any = None
        self._gov_metrics: Any = None
        self._gov_decision: Any = None
        self._power_w: float | None = None
        self._reload_lock = asyncio.Lock()
        self._gov_wake = asyncio.Event()
        self._background: set[asyncio.Task[Any]] = set()
        self.last_reload: dict[str, Any] | None = None

    # == lifecycle =======================================================================
    async def start(self) -> None:
        cfg = self.config
        try:
            self.runtime_dir = resolve_runtime_dir(cfg.server.runtime_dir)
        except ConfigError as e:
            raise StartupError(str(e)) from None
        if cfg.metrics.enabled:
            if cfg.metrics.host in ("0.0.0.0", "::", ""):
                log.warning("metrics listen on all interfaces (%s:%d) without authentication; "
                            "use 127.0.0.1 and a local Prometheus or firewall the port",
                            cfg.metrics.host, cfg.metrics.port)
            try:
                self.metrics.serve(cfg.metrics.host or "127.0.0.1", cfg.metrics.port)
            except OSError as e:
                raise StartupError(f"metrics listen {cfg.metrics.host}:{cfg.metrics.port}: "
                                   f"{e.strerror or e}") from None
        self.ctx = zmq.asyncio.Context()
        await self._bind()
        log.info("edged %s listening endpoints=%s control=%s metrics=%s runtime_dir=%s",
                 __version__, ",".join(self.endpoints), self.control_endpoint,
                 f"{cfg.metrics.host}:{self.metrics.port}" if cfg.metrics.enabled else "off",
                 self.runtime_dir)
        loop = asyncio.get_running_loop()
        for s in self.sockets:
            self._tasks.append(loop.create_task(self._recv_loop(s), name="recv"))
        self._tasks.append(loop.create_task(self._control_loop(), name="control"))
        self._start_governor()
        await self._load_models(cfg.models, startup=True)
        self._tasks.append(loop.create_task(self._watchdog_loop(), name="watchdog"))
        self.ready = True
        self.state = "serving"
        self.notifier.ready(self._status_line())
        log.info("ready models=%s startup_ms=%.0f", ",".join(self.models),
                 (time.time() - self.started_at) * 1000)

    async def serve(self) -> None:
        await self._stop.wait()

    def request_stop(self) -> None:
        self._stop.set()

    async def drain(self) -> None:
        """Stop taking new work; queued requests finish within the drain timeout."""
        self.state = "draining"
        self.notifier.stopping()
        timeout = self.config.server.drain_timeout_s
        log.info("draining timeout_s=%.1f queued=%d", timeout,
                 sum(m.batcher.depth for m in self.models.values()))
        await asyncio.gather(*(m.batcher.drain(timeout) for m in self.models.values()))
        # Give replies already handed to ZeroMQ a moment to leave.
        await asyncio.sleep(0.05)

    async def stop(self) -> None:
        self.state = "stopped"
        for t in [*self._tasks, *self._background]:
            t.cancel()
        for t in [*self._tasks, *self._background]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks.clear()
        for m in list(self.models.values()):
            await m.close()
        if self._auth is not None:
            self._auth.stop()
        for s in [*self.sockets, *([self.control] if self.control else [])]:
            s.close(linger=500)
        if self.ctx is not None:
            self.ctx.term()
        self._pre_pool.shutdown(wait=False)
        self.metrics.close()
        for e in [*self.endpoints, self.control_endpoint]:
            if e.startswith("ipc:///"):
                with contextlib.suppress(OSError):
                    os.unlink(e[len("ipc://"):])
        log.info("stopped answered=%d", self._answered)

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        loop.add_signal_handler(signal.SIGHUP, lambda: self._spawn(self.reload()))
        try:
            await self.start()
        except StartupError:
            await self.stop()
            raise
        await self.serve()
        await self.drain()
        await self.stop()
        return 0

    # == sockets =========================================================================
    async def _bind(self) -> None:
        assert self.ctx is not None and self.runtime_dir is not None
        cfg = self.config.server
        self.endpoints = resolve_endpoints(cfg.endpoints, self.runtime_dir)
        insecure_tcp = [e for e in self.endpoints
                        if e.startswith("tcp://") and not e.startswith(LOOPBACK_PREFIXES)]
        if insecure_tcp and cfg.curve is None:
            if not cfg.insecure:
                raise StartupError(
                    f"endpoint {insecure_tcp[0]} is reachable from the network but CURVE is "
                    "not configured; set [server.curve] (see docs/security.md) or, to accept "
                    "unauthenticated clients, [server] insecure = true")
            log.warning("insecure: %s accepts unauthenticated, unencrypted clients",
                        ",".join(insecure_tcp))
        server_keys: tuple[bytes, bytes] | None = None
        if cfg.curve is not None:
            server_keys = _load_server_key(cfg.curve.server_secret_key)
            try:
                _check_client_keys(cfg.curve.clients_dir)
            except ValueError as e:
                raise StartupError(str(e)) from None
            self._start_auth()
        limits = cfg.limits
        for ep in self.endpoints:
            s = self.ctx.socket(zmq.ROUTER)
            try:
                s.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a reply is never dropped silently
                s.setsockopt(zmq.LINGER, 1000)
                # A single frame above the limit makes libzmq drop the peer before we read it.
                s.setsockopt(zmq.MAXMSGSIZE, limits.max_message_bytes)
                # Per peer: unread messages libzmq may buffer (each up to max_message_bytes).
                s.setsockopt(zmq.RCVHWM, 1000)
                s.setsockopt(zmq.SNDHWM, 1000)
                if server_keys is not None and ep.startswith("tcp://"):
                    s.curve_publickey, s.curve_secretkey = server_keys
                    s.curve_server = True
                s.bind(ep)
            except zmq.ZMQError as e:
                s.close(linger=0)
                raise StartupError(f"cannot bind {ep}: {e}") from None
            if ep.startswith("ipc:///"):
                os.chmod(ep[len("ipc://"):], 0o660)
            self.sockets.append(s)
        self.control_endpoint = resolve_endpoints((cfg.control,), self.runtime_dir)[0]
        c = self.ctx.socket(zmq.ROUTER)
        c.setsockopt(zmq.LINGER, 500)
        c.setsockopt(zmq.MAXMSGSIZE, 1 << 20)
        try:
            c.bind(self.control_endpoint)
        except zmq.ZMQError as e:
            c.close(linger=0)
            raise StartupError(f"cannot bind control endpoint {self.control_endpoint}: {e}") \
                from None
        if self.control_endpoint.startswith("ipc:///"):
            os.chmod(self.control_endpoint[len("ipc://"):], 0o660)
        self.control = c

    def _start_auth(self) -> None:
        from zmq.auth.asyncio import AsyncioAuthenticator

        curve = self.config.server.curve
        assert curve is not None and self.ctx is not None
        self._auth = AsyncioAuthenticator(self.ctx, log=logging.getLogger("edged.auth"))
        self._auth.start()
        self._auth.configure_curve(domain="*", location=str(curve.clients_dir))

    # == inference requests ==============================================================
    async def _recv_loop(self, sock: zmq.asyncio.Socket) -> None:
        while True:
            frames = await sock.recv_multipart(copy=False)
            try:
                self._handle(sock, frames)
            except Exception:  # nothing a client sends may stop the loop
                log.exception("unhandled error while handling a request")

    def _handle(self, sock: zmq.asyncio.Socket, frames: list[zmq.Frame]) -> None:
        received = time.monotonic()
        ident = frames[0].bytes
        body = frames[1:]
        envelope: list[bytes] = [ident]
        if body and len(body[0]) == 0:  # REQ client: echo the empty delimiter
            envelope.append(b"")
            body = body[1:]
        limits = self.config.server.limits
        total = sum(len(f) for f in body)
        if total > limits.max_message_bytes:
            header = None
            with contextlib.suppress(Exception):
                header = decode_header(body[0], limits)
            self._send_error(sock, envelope, peek_id(header, limits), None,
                             InvalidArgument(f"message is {total} bytes; the limit is "
                                             f"{limits.max_message_bytes}"))
            return
        try:
            req = parse_request(body, limits)
        except ProtocolError as e:
            self._send_error(sock, envelope, e.request_id, None, e)
            return
        if req.op == "health":
            self._send_json(sock, envelope, self._health(req.id))
            return
        if req.op == "models":
            self._send_json(sock, envelope, {
                "v": 1, "id": req.id, "status": "OK",
                "models": [m.describe() for m in self.models.values()]})
            return
        assert req.model is not None
        model = self.models.get(req.model)
        try:
            if model is None:
                raise unknown_model(req.model, list(self.models))
            if self.state != "serving":
                raise Unavailable("the daemon is " + ("starting" if not self.ready
                                                      else "shutting down"))
            n = self._inflight.get(ident, 0)
            if n >= self.config.server.max_inflight_per_client:
                raise ResourceExhausted(
                    f"this client has {n} requests in flight; the limit is "
                    f"{self.config.server.max_inflight_per_client}")
        except EdgedError as e:
            self._send_error(sock, envelope, req.id, req.model, e)
            return
        self._inflight[ident] = self._inflight.get(ident, 0) + 1
        self.metrics.inflight.inc()
        ctx = _Ctx(sock, envelope, ident, req.id, model, received)
        if model.needs_thread(req):
            if self._decoding >= MAX_PENDING_DECODES:
                # Decoded images are large: bound the backlog across all clients, not only
                # per client, so a flood of JPEGs cannot fill a small device's memory.
                self._fail(ctx, ResourceExhausted(
                    f"{self._decoding} images are waiting to be decoded; try again shortly"))
                return
            self._decoding += 1
            self._spawn(self._prepare_async(model, req, ctx))
        else:
            try:
                feeds, rows, key = model.prepare(req)
            except EdgedError as e:
                self._fail(ctx, e)
                return
            self._submit(model, req, ctx, feeds, rows, key)

    async def _prepare_async(self, model: ModelRuntime, req: Request, ctx: _Ctx) -> None:
        try:
            feeds, rows, key = await asyncio.get_running_loop().run_in_executor(
                self._pre_pool, model.prepare, req)
        except EdgedError as e:
            self._fail(ctx, e)
            return
        except Exception as e:
            log.exception("preprocessing failed")
            self._fail(ctx, EdgedError(f"preprocessing failed: {type(e).__name__}: {e}"))
            return
        finally:
            self._decoding -= 1
        if self.state != "serving":
            self._fail(ctx, Unavailable("the daemon is shutting down"))
            return
        self._submit(model, req, ctx, feeds, rows, key)

    def _submit(self, model: ModelRuntime, req: Request, ctx: _Ctx, feeds: dict[str, Any],
                rows: int, key: tuple[Any, ...]) -> None:
        deadline = ctx.received + req.timeout_ms / 1000.0 if req.timeout_ms else None
        p = Pending(feeds=feeds, rows=rows, key=key, respond=functools.partial(self._respond, ctx),
                    priority=req.priority, stream=req.stream, deadline=deadline,
                    outputs=req.outputs, arrival=ctx.received)
        try:
            model.batcher.submit(p)
        except EdgedError as e:
            self._fail(ctx, e)
            return
        model.m_queue_depth.set(model.batcher.depth)

    def _respond(self, ctx: _Ctx, p: Pending, outcome: Result | EdgedError) -> None:
        if isinstance(outcome, EdgedError):
            self._fail(ctx, outcome)
            return
        now = time.monotonic()
        timing = {"queue_us": int(outcome.queue_s * 1e6),
                  "compute_us": int(outcome.compute_s * 1e6), "batch": outcome.batch,
                  "total_us": int((now - ctx.received) * 1e6)}
        frames = ok_reply_frames(ctx.request_id, ctx.model, outcome.variant, outcome.outputs,
                                 timing)
        self._send(ctx.sock, ctx.envelope, frames)
        self._done(ctx)
        model = ctx.runtime
        model.variant_series(outcome.variant)[0].inc()
        model.m_request_duration.observe(now - ctx.received)
        model.m_queue_duration.observe(outcome.queue_s)
        model.m_queue_depth.set(model.batcher.depth)

    def _fail(self, ctx: _Ctx, err: EdgedError) -> None:
        self._send_error(ctx.sock, ctx.envelope, ctx.request_id, ctx.model, err)
        self._done(ctx)

    def _done(self, ctx: _Ctx) -> None:
        n = self._inflight.get(ctx.ident, 0) - 1
        if n > 0:
            self._inflight[ctx.ident] = n
        else:
            self._inflight.pop(ctx.ident, None)
        self.metrics.inflight.dec()

    def _send_error(self, sock: zmq.asyncio.Socket, envelope: list[bytes],
                    request_id: str | int | None, model: str | None, err: EdgedError) -> None:
        self._send(sock, envelope, [encode_header(error_reply(request_id, err.status, str(err)))])
        variant = ""
        m = self.models.get(model) if model else None
        if m is not None and m.active is not None:
            variant = m.active.config.name
        self.metrics.requests.labels(model if m is not None else "", variant, err.status).inc()

    def _send_json(self, sock: zmq.asyncio.Socket, envelope: list[bytes],
                   obj: dict[str, Any]) -> None:
        self._send(sock, envelope, [encode_header(obj)])

    def _send(self, sock: zmq.asyncio.Socket, envelope: list[bytes], frames: list[Any]) -> None:
        self._answered += 1
        try:
            fut = sock.send_multipart([*envelope, *frames], copy=False)
        except zmq.ZMQError as e:
            self._send_failed(e)
            return
        if fut.done():
            self._check_send(fut)
        else:
            fut.add_done_callback(self._check_send)

    def _check_send(self, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled():
            return
        e = fut.exception()
        if e is not None:
            self._send_failed(e)

    def _send_failed(self, e: BaseException) -> None:
        if isinstance(e, zmq.ZMQError) and e.errno == zmq.EHOSTUNREACH:
            log.debug("client went away before its reply")  # costs nothing else
        else:
            log.warning("reply not sent: %s", e)

    def _health(self, request_id: str | int | None) -> dict[str, Any]:
        required = [m for m in self.models.values() if m.cfg.required]
        ok = self.ready and self.state == "serving" and all(m.state == "ready" for m in required)
        return {
            "v": 1, "id": request_id, "status": "OK" if ok else "UNAVAILABLE",
            **({} if ok else {"error": f"daemon is {self.state}; models: " + ", ".join(
                f"{m.name}={m.state}" for m in self.models.values())}),
            "state": self.state,
            "uptime_s": round(time.time() - self.started_at, 1),
            "version": __version__,
            "models": {m.name: m.state for m in self.models.values()},
            "governor": self._governor_summary(),
        }

    # == models ==========================================================================
    async def _load_models(self, models: tuple[ModelConfig, ...] | list[ModelConfig],
                           startup: bool) -> list[str]:
        """Load models concurrently; failures of non-required models are logged and the
        model is kept in state 'failed' (its requests get UNAVAILABLE with the reason)."""
        runtimes = []
        for mc in models:
            rt = ModelRuntime(mc, self.metrics, self.config.server.limits, self._current_power,
                              _headroom(self.config))
            self.models[mc.name] = rt
            runtimes.append(rt)
        extend = asyncio.get_running_loop().create_task(self._extend_timeout_while_loading())
        try:
            results = await asyncio.gather(*(rt.load(self._ladder_index(rt)) for rt in runtimes),
                                           return_exceptions=True)
        finally:
            extend.cancel()
        failed = []
        for rt, res in zip(runtimes, results, strict=True):
            if isinstance(res, BaseException):
                failed.append(rt.name)
                if startup and rt.cfg.required:
                    raise StartupError(f"required model {rt.name!r} failed to load: {rt.error}")
        return failed

    async def _extend_timeout_while_loading(self) -> None:
        while True:
            self.notifier.extend_timeout(30.0)
            await asyncio.sleep(10)

    def _ladder_index(self, rt: ModelRuntime) -> int:
        d = self._gov_decision
        steps = getattr(d, "ladder_steps", 0) if d is not None else 0
        return min(steps, len(rt.cfg.variants) - 1)

    def _current_power(self) -> float | None:
        return self._power_w

    # == reload ==========================================================================
    async def reload(self) -> dict[str, Any]:
        """Re-read the config; keep serving on the old one if the new one is invalid.

        Unchanged models keep serving untouched; new or changed models are loaded in
        the background and switched in atomically; removed ones are drained."""
        async with self._reload_lock:
            self.notifier.reloading()
            t0 = time.perf_counter()
            try:
                new = await asyncio.to_thread(load_config, self.config.file)
            except ConfigError as e:
                return self._reload_failed(e.problems)
            if new.server.curve is not None:
                try:
                    # configure_curve() would log a malformed key and keep the OLD allow-list:
                    # a revocation would silently not apply. Check first, reject the reload.
                    await asyncio.to_thread(_check_client_keys, new.server.curve.clients_dir)
                except ValueError as e:
                    return self._reload_failed([str(e)])
            # The flags given on the command line still win over the file.
            new = new.with_overrides(**self.overrides)
            changed_bound = _needs_restart(self.config, new)
            if changed_bound:
                return self._reload_failed([
                    f"{', '.join(changed_bound)} changed: sockets and listeners are bound at "
                    "start, so this needs a restart (systemctl restart edged); nothing was "
                    "changed"])
            old_by = {m.name: m for m in self.config.models}
            new_by = {m.name: m for m in new.models}
            added = [m for n, m in new_by.items() if n not in old_by]
            changed = [m for n, m in new_by.items() if n in old_by and old_by[n] != m]
            removed = [n for n in old_by if n not in new_by]
            staged: dict[str, ModelRuntime] = {}
            errors = []
            extend = asyncio.get_running_loop().create_task(self._extend_timeout_while_loading())
            try:
                for mc in [*added, *changed]:
                    rt = ModelRuntime(mc, self.metrics, new.server.limits, self._current_power,
                                      _headroom(new))
                    try:
                        await rt.load(self._ladder_index(rt))
                        staged[mc.name] = rt
                    except Exception:
                        errors.append(f"{mc.name}: {rt.error}")
                        await rt.close()
            finally:
                extend.cancel()
            if errors:
                for rt in staged.values():
                    await rt.close()
                return self._reload_failed(errors)
            old_runtimes = [self.models[n] for n in [*removed, *(m.name for m in changed)]
                            if n in self.models]
            for name, rt in staged.items():
                self.models[name] = rt  # atomic switch: new requests go to the new runtime
            for n in removed:
                self.models.pop(n, None)
            self.config = new
            if self._auth is not None and new.server.curve is not None:
                # Re-read the allowed client keys: adds and revokes take effect now.
                self._auth.configure_curve(domain="*", location=str(new.server.curve.clients_dir))
                log.info("CURVE client keys reloaded from %s", new.server.curve.clients_dir)
            if self.governor is not None or new.governor.enabled:
                self._restart_governor()
            for rt in old_runtimes:
                await rt.batcher.drain(new.server.drain_timeout_s)
                await rt.close()
            ms = (time.perf_counter() - t0) * 1000
            self.metrics.reloads.labels("ok").inc()
            self.last_reload = {"ok": True, "added": [m.name for m in added],
                                "changed": [m.name for m in changed], "removed": removed,
                                "ms": round(ms, 1), "at": time.time()}
            log.info("reload done added=%s changed=%s removed=%s reload_ms=%.0f",
                     ",".join(self.last_reload["added"]) or "-",
                     ",".join(self.last_reload["changed"]) or "-", ",".join(removed) or "-", ms)
            self.notifier.ready(self._status_line())
            return self.last_reload

    def _reload_failed(self, problems: list[str]) -> dict[str, Any]:
        self.metrics.reloads.labels("error").inc()
        self.last_reload = {"ok": False, "error": problems, "at": time.time()}
        log.error("reload rejected; still serving the previous config: %s", "; ".join(problems))
        self.notifier.ready(f"reload FAILED (old config kept): {problems[0]}")
        return self.last_reload

    # == governor ========================================================================
    def _start_governor(self) -> None:
        gcfg = self.config.governor
        if not getattr(gcfg, "enabled", False):
            return
        from edged.governor.metrics import GovernorMetrics
        from edged.governor.policy import Governor

        self.governor = Governor(gcfg)
        if self._gov_metrics is None:
            self._gov_metrics = GovernorMetrics(self.metrics.registry)
        self._tasks.append(asyncio.get_running_loop().create_task(self._governor_loop(),
                                                                  name="governor"))

    def _restart_governor(self) -> None:
        for t in [t for t in self._tasks if t.get_name() == "governor"]:
            t.cancel()
            self._tasks.remove(t)
        pinned = None
        if self.governor is not None:
            pinned = self.governor.snapshot().get("pinned")
        self.governor = None
        self._start_governor()
        if self.governor is not None and pinned:
            with contextlib.suppress(ValueError):
                self.governor.pin(pinned)

    async def _governor_loop(self) -> None:
        gov = self.governor
        interval = float(self.config.governor.interval_s)
        last = time.monotonic()
        while True:
            try:
                readings = await asyncio.to_thread(gov.sample)
                decision = gov.step(readings)
                now = time.monotonic()
                self._gov_metrics.update(readings, decision, now - last)
                last = now
                self._power_w = readings.total_power_w
                self._apply(decision)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("governor step failed; keeping the previous level")
            self._gov_wake.clear()
            with contextlib.suppress(TimeoutError):  # a pin wakes us early
                await asyncio.wait_for(self._gov_wake.wait(), interval)

    def _apply(self, decision: Any) -> None:
        prev = self._gov_decision
        self._gov_decision = decision
        if prev is None or prev.level != decision.level:
            log.info("governor level=%s reason=%r", decision.level, decision.reason)
            self.notifier.status(self._status_line())
        for m in self.models.values():
            lim = m.batcher.limits
            lim.max_batch_size = decision.max_batch_size
            lim.max_rate_hz = decision.max_rate_hz
            lim.shed_priority_above = decision.shed_priority_above
            lim.reason = f"level {decision.level}: {decision.reason}"
            if m.state != "ready" or m.active is None or m.swap_target is not None:
                continue  # a swap in progress re-applies the latest decision when it ends
            want = min(decision.ladder_steps, len(m.cfg.variants) - 1)
            if want != m.active.index:
                self._spawn(self._governor_swap(
                    m, want, f"governor: level {decision.level}: {decision.reason}"))

    async def _governor_swap(self, m: ModelRuntime, index: int, reason: str) -> None:
        await m.swap_to(index, reason)
        d = self._gov_decision
        if d is not None and m.active is not None and m.state == "ready":
            want = min(d.ladder_steps, len(m.cfg.variants) - 1)
            if want != m.active.index and m.swap_target is None:
                # The level moved while we were swapping: follow it now, not a tick later.
                self._spawn(self._governor_swap(m, want, f"governor: level {d.level}: "
                                                         f"{d.reason}"))

    def _spawn(self, coro: Any) -> None:
        """A background task kept referenced until done (asyncio holds tasks weakly)."""
        t = asyncio.get_running_loop().create_task(coro)
        self._background.add(t)
        t.add_done_callback(self._background.discard)

    def _governor_summary(self) -> dict[str, Any] | None:
        if self.governor is None:
            return None
        try:
            return self.governor.snapshot()
        except Exception as e:  # status must never fail because of a sensor
            return {"error": str(e)}

    # == watchdog & status ===============================================================
    async def _watchdog_loop(self) -> None:
        """Ping systemd only while the loop runs (this task) and no worker is stuck."""
        interval = self.notifier.watchdog_interval()
        status_every = 10.0
        last_status = 0.0
        was_stuck: list[str] = []
        while True:
            now = time.monotonic()
            stall = self.config.server.stall_timeout_s  # a batch running longer is stuck
            stuck = [m.name for m in self.models.values()
                     if m.batcher.busy and now - m.batcher.last_progress > stall]
            if stuck != was_stuck:
                if stuck:
                    log.error("watchdog: no progress on model(s) %s for > %.1f s; "
                              "withholding WATCHDOG=1", ",".join(stuck), stall)
                else:
                    log.warning("watchdog: model(s) %s progress again", ",".join(was_stuck))
                was_stuck = stuck
            if interval is not None and not stuck:
                self.notifier.watchdog()
            if now - last_status >= status_every:
                last_status = now
                self._answered_window.append((now, self._answered))
                self._answered_window = self._answered_window[-7:]
                self.notifier.status(self._status_line())
            await asyncio.sleep(min(interval or 1.0, 1.0))

    def requests_per_second(self) -> float:
        w = self._answered_window
        if len(w) < 2:
            return 0.0
        (t0, n0), (t1, n1) = w[0], w[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0

    def _status_line(self) -> str:
        ready = sum(m.state == "ready" for m in self.models.values())
        level = getattr(self._gov_decision, "level", None)
        parts = [f"{self.state}: {ready}/{len(self.models)} model(s) ready"]
        if level is not None:
            parts.append(f"governor={level}")
        parts.append(f"{self.requests_per_second():.1f} req/s")
        return "; ".join(parts)

    # == control endpoint ================================================================
    async def _control_loop(self) -> None:
        assert self.control is not None
        while True:
            frames = await self.control.recv_multipart()
            envelope = [frames[0]]
            body = frames[1:]
            if body and not body[0]:
                envelope.append(b"")
                body = body[1:]
            reply = await self._control(body)
            with contextlib.suppress(zmq.ZMQError):
                await self.control.send_multipart([*envelope, encode_header(reply)])

    async def _control(self, body: list[bytes]) -> dict[str, Any]:
        import json

        rid = None
        try:
            if len(body) != 1:
                raise InvalidArgument("a control message is one JSON frame")
            try:
                msg = json.loads(body[0])
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise InvalidArgument(f"not JSON: {e}") from None
            if not isinstance(msg, dict):
                raise InvalidArgument("a control message is a JSON object")
            rid = msg.get("id")
            op = msg.get("op")
            if op == "status":
                return {"status": "OK", "id": rid, **self.status()}
            if op == "models":
                return {"status": "OK", "id": rid,
                        "models": [m.describe() for m in self.models.values()]}
            if op == "reload":
                res = await self.reload()
                return {"status": "OK" if res["ok"] else "INVALID_ARGUMENT", "id": rid,
                        "reload": res, **({} if res["ok"] else
                                          {"error": "; ".join(map(str, res["error"]))})}
            if op == "level":
                return {"status": "OK", "id": rid, "governor": self._pin(msg.get("level"))}
            if op == "unload":
                name = _str_arg(msg, "model")
                rt = self.models.get(name)
                if rt is None:
                    raise unknown_model(name, list(self.models))
                await rt.batcher.drain(self.config.server.drain_timeout_s)
                await rt.close()
                return {"status": "OK", "id": rid, "model": rt.describe()}
            if op == "load":
                name = _str_arg(msg, "model")
                mc = self.config.model(name)
                if mc is None:
                    raise NotFound(f"model {name!r} is not in {self.config.file}; add it there "
                                   "and run `edged ctl reload`")
                if name in self.models and self.models[name].state == "ready":
                    return {"status": "OK", "id": rid, "model": self.models[name].describe()}
                failed = await self._load_models([mc], startup=False)
                if failed:
                    raise Unavailable(f"model {name!r} failed to load: {self.models[name].error}")
                return {"status": "OK", "id": rid, "model": self.models[name].describe()}
            if op == "swap":
                name = _str_arg(msg, "model")
                rt = self.models.get(name)
                if rt is None:
                    raise unknown_model(name, list(self.models))
                variant = _str_arg(msg, "variant")
                names = [v.name for v in rt.cfg.variants]
                if variant not in names:
                    raise NotFound(f"model {name!r} has no variant {variant!r}: {names}")
                ok = await rt.swap_to(names.index(variant), "operator: edged ctl swap")
                return {"status": "OK" if ok or (rt.active and rt.active.config.name == variant)
                        else "INTERNAL", "id": rid, "model": rt.describe()}
            raise NotFound(f"unknown control op {op!r}; known: status, models, reload, load, "
                           "unload, level, swap")
        except EdgedError as e:
            return {"status": e.status, "id": rid, "error": str(e)}

    def _pin(self, level: Any) -> dict[str, Any]:
        if self.governor is None:
            raise Unavailable("the governor is disabled ([governor] enabled = false)")
        if not isinstance(level, str) or not level:
            raise InvalidArgument("level needs a level name or 'auto'")
        try:
            self.governor.pin(None if level == "auto" else level)
        except ValueError as e:
            raise InvalidArgument(str(e)) from None
        log.info("governor pinned level=%s by operator", level)
        self._gov_wake.set()  # act now, not at the next monitor tick
        return self.governor.snapshot()

    def status(self) -> dict[str, Any]:
        return {
            "version": __version__,
            "state": self.state,
            "pid": os.getpid(),
            "uptime_s": round(time.time() - self.started_at, 1),
            "config": str(self.config.file),
            "endpoints": self.endpoints,
            "control": self.control_endpoint,
            "metrics": (f"{self.config.metrics.host}:{self.metrics.port}"
                        if self.config.metrics.enabled else None),
            "requests_per_second": round(self.requests_per_second(), 2),
            "answered": self._answered,
            "models": [{**m.describe(), **_latency(self.metrics, m.name)}
                       for m in self.models.values()],
            "governor": self._governor_summary(),
            "last_reload": self.last_reload,
        }


class _Ctx:
    """Where a reply goes, and what it is about."""

    __slots__ = ("envelope", "ident", "model", "received", "request_id", "runtime", "sock")

    def __init__(self, sock: zmq.asyncio.Socket, envelope: list[bytes], ident: bytes,
                 request_id: str | int | None, runtime: ModelRuntime, received: float) -> None:
        self.sock = sock
        self.envelope = envelope
        self.ident = ident
        self.request_id = request_id
        self.runtime = runtime  # the runtime that took the request (survives a reload)
        self.model = runtime.name
        self.received = received


def _str_arg(msg: dict[str, Any], key: str) -> str:
    v = msg.get(key)
    if not isinstance(v, str) or not v:
        raise InvalidArgument(f"{key!r} must be a non-empty string")
    return v


def _load_server_key(path: Path) -> tuple[bytes, bytes]:
    """The server's CURVE key pair, or a one-line StartupError naming the file."""
    from zmq.auth import load_certificate

    try:
        public, secret = load_certificate(str(path))
    except (OSError, ValueError) as e:
        raise StartupError(f"{path}: not a CURVE certificate: {e}") from None
    if secret is None:
        raise StartupError(f"{path}: holds no secret key (use the *.key_secret file written "
                           "by `edged keys generate`)")
    return public, secret


def _check_client_keys(clients_dir: Path) -> None:
    """Raise ValueError naming the file if any allowed-client certificate is malformed."""
    from zmq.auth import load_certificates

    try:
        load_certificates(str(clients_dir))
    except (OSError, ValueError) as e:
        raise ValueError(f"{clients_dir}: cannot read the allowed client keys: {e}") from None


def _headroom(cfg: Config) -> int:
    return int(cfg.server.swap_memory_headroom_mb * (1 << 20))


def _needs_restart(old: Config, new: Config) -> list[str]:
    """Settings a reload cannot apply: what was bound or secured at start."""
    a, b = old.server, new.server
    keys = []
    if a.endpoints != b.endpoints:
        keys.append("server.endpoints")
    if a.control != b.control:
        keys.append("server.control")
    if a.runtime_dir != b.runtime_dir:
        keys.append("server.runtime_dir")
    if a.insecure != b.insecure:
        keys.append("server.insecure")
    if (a.curve is None) != (b.curve is None) or (
            a.curve is not None and b.curve is not None
            and a.curve.server_secret_key != b.curve.server_secret_key):
        keys.append("server.curve")
    if a.limits.max_message_bytes != b.limits.max_message_bytes:
        keys.append("server.limits.max_message_bytes")
    if old.metrics != new.metrics:
        keys.append("metrics.listen")
    return keys


def _latency(metrics: Metrics, model: str) -> dict[str, Any]:
    """p50/p99 request latency from the histogram buckets (since start)."""
    h = metrics.request_duration.labels(model)
    buckets = [(float(b), c) for b, c in _bucket_counts(h)]
    total = buckets[-1][1] if buckets else 0
    if not total:
        return {"p50_ms": None, "p99_ms": None, "served": 0}

    def q(frac: float) -> float:
        want = frac * total
        prev_b, prev_c = 0.0, 0.0
        for b, c in buckets:
            if c >= want:
                if b == float("inf"):
                    return prev_b * 1000
                span = c - prev_c
                return (prev_b + (b - prev_b) * ((want - prev_c) / span if span else 1)) * 1000
            prev_b, prev_c = b, c
        return prev_b * 1000

    return {"p50_ms": round(q(0.5), 3), "p99_ms": round(q(0.99), 3), "served": int(total)}


def _bucket_counts(h: Any) -> list[tuple[str, float]]:
    out = []
    for metric in h.collect():
        for s in metric.samples:
            if s.name.endswith("_bucket"):
                out.append((s.labels["le"], s.value))
    return out
