"""The daemon's lifecycle, as plain as uvicorn's Server: start, serve, drain, stop.

``start`` (metrics, sockets, models, READY), ``serve`` (until SIGTERM/SIGINT),
``drain`` (stop taking work, finish what is queued within the drain timeout, answer
the rest UNAVAILABLE), ``stop`` (close everything). SIGHUP reloads the config.
Signals only set a flag or schedule work; this module alone creates the long-lived
tasks (receive loops, control, governor, watchdog, the shared-memory reaper). All
socket I/O and batching run on one asyncio loop; inference on one worker thread per
model; image decoding on a small pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from typing import Any

from edged import __version__, memory, threadplan
from edged.backends.load import discard_preopened
from edged.config import Config, ModelConfig
from edged.errors import ConfigError
from edged.metrics import Metrics
from edged.registry import Registry
from edged.runtime_dir import resolve_runtime_dir
from edged.server.control import Control
from edged.server.endpoints import Endpoints, is_local
from edged.server.frigate import FrigatePath
from edged.server.governing import Governing
from edged.server.health import Health
from edged.server.inference import InferencePath
from edged.server.kserve import KServeRoom
from edged.server.offload import Offload
from edged.server.reload import Reloader
from edged.server.shm import ShmRings
from edged.server.state import ServerState, StartupError, swap_headroom_bytes
from edged.systemd import Notifier

log = logging.getLogger("edged.server")


class Server:
    def __init__(self, config: Config, overrides: dict[str, Any] | None = None) -> None:
        metrics = Metrics()
        self.state = state = ServerState(
            config=config, overrides=overrides or {}, metrics=metrics,
            notifier=Notifier.from_env(),
            registry=Registry(metrics, lambda: state.power_w))
        self.governing = Governing(state)
        self.health = Health(state, self.governing)
        self.governing.on_level_change = lambda: state.notifier.status(self.health.status_line())
        self.shm = ShmRings(state)
        self.inference = InferencePath(state, self.health, self.shm)
        self.frigate = FrigatePath(state)
        self.kserve = KServeRoom(state)
        self.offload = state.offload = Offload(state, lambda: self.governing.level)
        self.endpoints = Endpoints()
        self.reloader = Reloader(state, self.endpoints, self.governing)
        self.control = Control(state, self.health, self.governing, self.reload,
                               lambda mc: self._load([mc], startup=False))
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []

    async def start(self) -> None:
        st = self.state
        cfg = st.config
        try:
            runtime_dir = resolve_runtime_dir(cfg.server.runtime_dir)
        except ConfigError as e:
            raise StartupError(str(e)) from None
        memory.limit_arenas()  # before the metrics, ZeroMQ and worker threads start
        self._serve_metrics()
        plan = threadplan.current()
        threadplan.apply_process_wide(plan)
        log.info("thread plan %s", " ".join(f"{k}={v}" for k, v in plan.describe().items()))
        ep = self.endpoints
        ep.bind(cfg.server, runtime_dir)
        st.endpoints, st.control_endpoint = ep.endpoints, ep.control_endpoint
        st.frigate_endpoints = {address: f.model for f, address, _ in ep.frigate}
        log.info("edged %s listening endpoints=%s control=%s metrics=%s runtime_dir=%s",
                 __version__, ",".join(ep.endpoints), ep.control_endpoint,
                 f"{cfg.metrics.host}:{st.metrics.port}" if cfg.metrics.enabled else "off",
                 runtime_dir)
        loop = asyncio.get_running_loop()
        self.shm.configure(runtime_dir)
        for s, e in zip(ep.sockets, ep.endpoints, strict=True):
            if not is_local(e):
                self.inference.remote.add(s)
            self._tasks.append(loop.create_task(self.inference.recv_loop(s), name="recv"))
        for fcfg, address, s in ep.frigate:
            self._tasks.append(loop.create_task(self.frigate.recv_loop(fcfg, address, s),
                                                name="frigate"))
        self._tasks.append(loop.create_task(self.shm.loop(), name="shm-reaper"))
        assert ep.control is not None
        self._tasks.append(loop.create_task(self.control.loop(ep.control), name="control"))
        self.governing.configure(cfg)
        self._tasks.append(loop.create_task(self.governing.loop(), name="governor"))
        self._tasks.append(loop.create_task(self.governing.watch_load(), name="overload"))
        await self.offload.configure(cfg.offload)
        self._tasks.append(loop.create_task(self.offload.loop(), name="offload-health"))
        try:
            await self.kserve.start(cfg.server.kserve)
        except (OSError, ImportError) as e:
            raise StartupError(str(e)) from None
        try:
            await self._load(list(cfg.models), startup=True)
        finally:
            # What start-up did not take (may still be opening) is closed off READY's path.
            loop.run_in_executor(None, discard_preopened)
        self._tasks.append(loop.create_task(self.health.watchdog_loop(), name="watchdog"))
        st.ready = True
        st.phase = "serving"
        st.notifier.ready(self.health.status_line())
        log.info("ready models=%s startup_ms=%.0f", ",".join(st.registry.names),
                 (time.time() - st.started_at) * 1000)

    def _serve_metrics(self) -> None:
        m = self.state.config.metrics
        if not m.enabled:
            return
        if m.host in ("0.0.0.0", "::", ""):
            log.warning("metrics listen on all interfaces (%s:%d) without authentication; "
                        "use 127.0.0.1 and a local Prometheus or firewall the port",
                        m.host, m.port)
        try:
            self.state.metrics.serve(m.host or "127.0.0.1", m.port)
        except OSError as e:
            raise StartupError(f"metrics listen {m.host}:{m.port}: {e.strerror or e}") from None

    async def _load(self, models: list[ModelConfig], startup: bool) -> list[str]:
        """Load models concurrently; a failed model that is not required stays in state
        'failed' (its requests get UNAVAILABLE with the reason)."""
        st = self.state
        created = [st.registry.create(mc, st.config.server.limits,
                                      swap_headroom_bytes(st.config)) for mc in models]
        async with st.loading():
            failed = await st.registry.load(created, self.governing.index_for)
        memory.trim()  # what loading and warm-up freed goes back to the system
        for m in failed:
            if startup and m.cfg.required:
                raise StartupError(f"required model {m.name!r} failed to load: {m.error}")
        return [m.name for m in failed]

    async def serve(self) -> None:
        await self._stop.wait()

    def request_stop(self) -> None:
        self._stop.set()

    async def reload(self) -> dict[str, Any]:
        res = await self.reloader.reload()
        if res["ok"]:
            await self.offload.configure(self.state.config.offload)
            problems = await self.kserve.apply(self.state.config.server.kserve)
            if problems:
                res = {**res, "kserve_errors": problems}
            self.state.notifier.ready(self.health.status_line())
        return res

    async def drain(self) -> None:
        """Stop taking new work; queued requests finish within the drain timeout."""
        st = self.state
        st.phase = "draining"
        st.notifier.stopping()
        timeout = st.config.server.drain_timeout_s
        log.info("draining timeout_s=%.1f queued=%d", timeout, st.registry.queued())
        await st.registry.drain(timeout)
        # Give replies already handed to ZeroMQ a moment to leave.
        await asyncio.sleep(0.05)

    async def stop(self) -> None:
        st = self.state
        st.phase = "stopped"
        tasks = [*self._tasks, *st.background]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks.clear()
        await self.kserve.stop()
        await self.offload.close()
        await st.registry.close()
        self.governing.close()
        self.endpoints.close()
        self.inference.close()
        self.shm.close()
        st.metrics.close()
        log.info("stopped answered=%d", st.answered)

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        loop.add_signal_handler(signal.SIGHUP, lambda: self.state.spawn(self.reload()))
        try:
            await self.start()
        except StartupError:
            await self.stop()
            raise
        await self.serve()
        await self.drain()
        await self.stop()
        return 0
