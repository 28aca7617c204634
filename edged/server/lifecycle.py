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
from pathlib import Path
from typing import Any

from edged import __version__
from edged.config.file import Config
from edged.config.models import ModelConfig
from edged.delivery.store import open_store
from edged.errors import ConfigError, StartupError
from edged.host import memory, threadplan
from edged.host.ports import Where, bind_failed
from edged.host.runtime_dir import remove_made, resolve_runtime_dir
from edged.host.systemd import Notifier
from edged.metrics import FLUSH_S, Metrics
from edged.model.preopen import discard_preopened
from edged.model.registry import Registry
from edged.protocols.frigate.room import FrigateRoom
from edged.protocols.kserve.offload import OffloadRoom
from edged.protocols.kserve.room import KServeRoom
from edged.protocols.native.room import NativeRoom
from edged.server.control import Control
from edged.server.delivery.deliveries import Deliveries
from edged.server.governing import Governing
from edged.server.health import Health
from edged.server.reload import Reloader
from edged.server.state import ServerState

log = logging.getLogger("edged.server")


class Server:
    def __init__(self, config: Config, overrides: dict[str, Any] | None = None) -> None:
        metrics = Metrics()
        self.state = state = ServerState(
            config=config, overrides=overrides or {}, metrics=metrics,
            notifier=Notifier.from_env(),
            registry=Registry(metrics, lambda: state.power_w))
        # the one store of model versions: a restart reads a consistent index here
        state.store = open_store(config.server, metrics)
        self.governing = Governing(state)
        self.health = Health(state, self.governing)
        self.governing.on_level_change = lambda: state.notifier.status(self.health.status_line())
        self.offload = OffloadRoom(state, lambda: self.governing.level)
        state.offload = self.offload
        # The protocol rooms, in the order they bind; each is driven through ``Room`` only.
        state.rooms = [NativeRoom(state, self.health.health), FrigateRoom(state),
                       KServeRoom(state), self.offload]
        self.reloader = Reloader(state, self.governing)
        self.deliveries = Deliveries(state)
        self.reloader.resolve = self.deliveries.current_config
        self.deliveries.adopt = self.governing.adopt
        self.health.sections.append(lambda: {"delivery": state.board.status()})
        self.control = Control(state, self.health, self.governing, self.reload,
                               lambda mc: self._load([mc], startup=False), self.deliveries)
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        #: runtime folders this daemon created, removed at stop
        self._made: list[Path] = []

    async def start(self) -> None:
        st = self.state
        cfg = st.config
        try:
            st.runtime_dir = resolve_runtime_dir(cfg.server.runtime_dir, self._made)
        except ConfigError as e:
            raise StartupError(str(e)) from None
        memory.limit_arenas()  # before the metrics, ZeroMQ and worker threads start
        self._serve_metrics()
        plan = threadplan.current()
        threadplan.apply_process_wide(plan)
        log.info("thread plan %s", " ".join(f"{k}={v}" for k, v in plan.describe().items()))
        loop = asyncio.get_running_loop()
        for room in st.rooms:
            await room.start(cfg)
            self._tasks += [loop.create_task(coro, name=name) for name, coro in room.loops()]
        st.control_endpoint = self.control.bind(cfg.server, st.runtime_dir)
        self._tasks.append(loop.create_task(self.control.loop(), name="control"))
        log.info("edged %s listening %s control=%s metrics=%s runtime_dir=%s", __version__,
                 " ".join(f"{li.protocol}={li.address}" for r in st.rooms
                          for li in r.listeners()),
                 st.control_endpoint,
                 f"{cfg.metrics.host}:{st.metrics.port}" if cfg.metrics.enabled else "off",
                 st.runtime_dir)
        self.governing.configure(cfg)
        # Before the models load: the governor's first choice of a pipeline's members
        # already follows the pipeline's step-down order.
        st.registry.set_pipelines(cfg.pipelines, cfg.models)
        self._tasks.append(loop.create_task(self.governing.loop(), name="governor"))
        self._tasks.append(loop.create_task(self.governing.watch_load(), name="overload"))
        try:
            await self._load(self.deliveries.startup_models(list(cfg.models)), startup=True)
        finally:
            # What start-up did not take (may still be opening) is closed off READY's path.
            loop.run_in_executor(None, discard_preopened)
        self._tasks.append(loop.create_task(self.health.watchdog_loop(), name="watchdog"))
        self._tasks.append(loop.create_task(self._flush_metrics(), name="metrics"))
        await self.deliveries.resume_watches()
        self._tasks.append(loop.create_task(self.deliveries.loop(), name="delivery"))
        st.ready = True
        st.phase = "serving"
        st.notifier.ready(self.health.status_line())
        log.info("ready models=%s%s startup_ms=%.0f", ",".join(st.registry.names),
                 "".join(f" pipeline={p.name}" for p in st.registry.pipelines),
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
            where = Where("[metrics] listen", "--metrics HOST:PORT (or off)",
                          str(self.state.config.file))
            raise StartupError(bind_failed(f"{m.host}:{m.port}", e, where)) from None

    async def _flush_metrics(self) -> None:
        """Apply the request path's pending metric updates at least every ``FLUSH_S``
        (a scrape applies them too; ``edged.metrics.Later`` says why they wait)."""
        later = self.state.metrics.later
        while True:
            await asyncio.sleep(FLUSH_S)
            if len(later):
                try:
                    later.flush()
                except Exception:  # one bad update must not leave the rest piling up
                    log.exception("applying pending metric updates failed")

    async def _load(self, models: list[ModelConfig], startup: bool) -> list[str]:
        """Load models concurrently; a failed model that is not required stays in state
        'failed' (its requests get UNAVAILABLE with the reason)."""
        st = self.state
        created = [st.registry.create(mc, st.config.server) for mc in models]
        async with st.loading():
            failed = await st.registry.load(created, self.governing.index_for)
        memory.trim()  # what loading and warm-up freed goes back to the system
        for m in failed:
            if startup and m.cfg.required:
                raise StartupError(f"required model {m.name!r} failed to load: {m.error} "
                                   "(fix its file, or set required = false to serve without "
                                   "it; `edged check` loads every model file)")
        return [m.name for m in failed]

    async def serve(self) -> None:
        await self._stop.wait()

    def request_stop(self) -> None:
        self._stop.set()

    async def reload(self) -> dict[str, Any]:
        res = await self.reloader.reload()
        if res["ok"]:
            srv = self.state.config.server
            if self.state.store is not None:
                await asyncio.to_thread(self.state.store.configure, srv.max_store_bytes,
                                        srv.max_store_versions)
            before = self._listening()
            problems = [p for room in self.state.rooms for p in await room.apply(self.state.config)]
            if problems:
                res = {**res, "listener_errors": problems}
            after = self._listening()
            # a reload that only opens or closes a listener still changed something
            opened, closed = sorted(after - before), sorted(before - after)
            if opened or closed:
                res = self.state.last_reload = {**res, "listeners": {"opened": opened,
                                                                     "closed": closed}}
            self.state.notifier.ready(self.health.status_line())
        return res

    def _listening(self) -> set[str]:
        """Every listener of every room as ``protocol address``."""
        return {f"{li.protocol} {li.address}" for r in self.state.rooms for li in r.listeners()}

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
        for room in reversed(st.rooms):
            await room.stop()
        await st.registry.close()
        self.governing.close()
        self.control.close()
        st.zmq.term()
        st.metrics.close()
        remove_made(self._made)
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
