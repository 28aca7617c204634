"""The native room: edged's own ZeroMQ protocol on ``[server] endpoints``.

Binding: every endpoint a ROUTER; a network (non-loopback tcp) endpoint needs CURVE
(``[server.curve]``) unless ``[server] insecure = true``. One request, in order:
the socket's ``Router`` -> ``handle`` (parse; ``Admission.admit``; shared-memory inputs read by
``shm_frames``) -> ``Model.prepare`` (on the event loop for raw tensors, on the decode pool for
images) -> ``Admission.submit`` -> the model's batcher computes -> ``Admission`` counts the
outcome -> ``_respond`` (reply frames). Every request that can be attributed to a sender
gets exactly one reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import zmq

from edged.batching.queue import Result
from edged.config.file import Config
from edged.config.server import ServerConfig
from edged.errors import EdgedError, ResourceExhausted, StartupError, Unavailable
from edged.host.ports import Where
from edged.host.runtime_dir import resolve_endpoints
from edged.host.thread_names import name_os_thread
from edged.model.contract import Prepared
from edged.model.request import Request
from edged.protocols import sockets
from edged.protocols.admission import Admission, Ticket, prepare_outcome
from edged.protocols.native.reply import encode_header, error_reply, ok_reply_frames
from edged.protocols.native.request import ProtocolError, decode_header, parse_request, peek_id
from edged.protocols.native.shm_frames import Read, ShmFrames
from edged.protocols.serving import Listener, Loop, Serving
from edged.protocols.sockets import split_envelope

log = logging.getLogger("edged.protocols.native")

#: image decodes queued at once, all clients together (each holds a decoded frame)
MAX_PENDING_DECODES = 64


class NativeRoom:
    def __init__(self, serving: Serving,
                 health: Callable[[str | int | None], dict[str, Any]]) -> None:
        self.state = serving
        self.health = health  # the health op's reply (the server's, for a request id)
        self.shm = ShmFrames(serving)
        self.admission = Admission(serving)
        self.endpoints: list[str] = []
        self.routers: list[sockets.Router] = []
        #: routers on endpoints other hosts can reach: no shared-memory rings there
        self.remote: set[sockets.Router] = set()
        self._auth: Any = None
        self._pre_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="edged-pre",
                                            initializer=name_os_thread)
        self._decoding = 0  # requests waiting for image decode/preprocess
        self._quiet: dict[sockets.Router, Callable[[], bool]] = {}

    # -- the room, as the lifecycle drives it --------------------------------------------

    async def start(self, config: Config) -> None:
        cfg = config.server
        assert self.state.runtime_dir is not None
        self.endpoints = resolve_endpoints(cfg.endpoints, self.state.runtime_dir)
        keys = self._security(cfg)
        where = Where("[server] endpoints", "--endpoint ENDPOINT", str(config.file))
        for ep in self.endpoints:
            r = sockets.Router(sockets.bind_router(self.state.zmq, ep, cfg.limits.hard_cap, keys,
                                                   where), ep, self.handle)
            self.routers.append(r)
            if not sockets.is_local(ep):
                self.remote.add(r)
        self.shm.configure(self.state.runtime_dir)
        for r in self.routers:
            r.start()

    def loops(self) -> list[Loop]:
        return [("shm-reaper", self.shm.loop())]

    async def apply(self, config: Config) -> list[str]:
        """Re-read the allowed client keys: adds and revokes take effect now."""
        cfg = config.server
        if self._auth is not None and cfg.curve is not None:
            self._auth.configure_curve(domain="*", location=str(cfg.curve.clients_dir))
            log.info("CURVE client keys reloaded from %s", cfg.curve.clients_dir)
        return []

    def listeners(self) -> list[Listener]:
        return [Listener("native", e, "every model") for e in self.endpoints]

    def status(self) -> dict[str, Any]:
        return {"endpoints": self.endpoints}

    async def stop(self) -> None:
        if self._auth is not None:
            self._auth.stop()
        for r in self.routers:
            r.close()
        self.routers.clear()
        self._pre_pool.shutdown(wait=False)
        self.shm.close()

    def _security(self, cfg: ServerConfig) -> tuple[bytes, bytes] | None:
        """Refuse network endpoints without CURVE (unless insecure); start CURVE auth."""
        insecure_tcp = [e for e in self.endpoints if sockets.is_network(e)]
        if insecure_tcp and cfg.curve is None:
            if not cfg.insecure:
                raise StartupError(
                    f"endpoint {insecure_tcp[0]} is reachable from the network but CURVE is "
                    "not configured; set [server.curve] (see docs/security.md) or, to accept "
                    "unauthenticated clients, [server] insecure = true")
            log.warning("insecure: %s accepts unauthenticated, unencrypted clients",
                        ",".join(insecure_tcp))
        if cfg.curve is None:
            return None
        keys = sockets.load_server_key(cfg.curve.server_secret_key)
        try:
            sockets.check_client_keys(cfg.curve.clients_dir)
        except ValueError as e:
            raise StartupError(str(e)) from None
        from zmq.auth.asyncio import AsyncioAuthenticator

        self._auth = AsyncioAuthenticator(self.state.zmq, log=log)
        self._auth.start()
        self._auth.configure_curve(domain="*", location=str(cfg.curve.clients_dir))
        return keys

    # -- requests ------------------------------------------------------------------------

    def handle(self, router: sockets.Router, frames: list[zmq.Frame]) -> None:
        received = time.monotonic()
        envelope, body = split_envelope(frames)
        limits = self.state.config.server.limits
        try:
            self.admission.check_size(body)
        except EdgedError as e:
            header = None
            with contextlib.suppress(Exception):
                header = decode_header(body[0], limits)
            self._refuse(router, envelope, peek_id(header, limits), None, e)
            return
        try:
            req = parse_request(body, limits)
        except ProtocolError as e:
            self._refuse(router, envelope, e.request_id, None, e)
            return
        if req.op == "health":
            self._reply(router, envelope, [encode_header(self.health(req.id))])
            return
        if req.op == "models":
            self._reply(router, envelope, [encode_header({
                "v": 1, "id": req.id, "status": "OK",
                "models": self.state.registry.describe(),
                "pipelines": self.state.registry.describe_pipelines()})])
            return
        if req.op == "shm":
            try:
                body = self.shm.op(envelope[0], req, router not in self.remote)
            except EdgedError as e:
                self._refuse(router, envelope, req.id, None, e)
                return
            self._reply(router, envelope, [encode_header(body)])
            return
        assert req.model is not None
        try:
            ticket = self.admission.admit(
                req.model, received, functools.partial(self._respond, router, envelope, req.id),
                client=envelope[0])
        except EdgedError as e:
            self._refuse(router, envelope, req.id, req.model, e)
            return
        reads: list[Read] = []
        if req.shm_inputs:
            try:
                reads = self.shm.plan(envelope[0], req)
                if not Read.off_loop(reads):
                    self.shm.read(reads)
                    reads = []
            except EdgedError as e:
                self.admission.fail(ticket, e)
                return
        model = ticket.model
        if reads or model.needs_thread(req):
            if self._decoding >= MAX_PENDING_DECODES:
                # Decoded images (and large shm frames) are large: bound the backlog across
                # all clients, not only per client, so a flood cannot fill a small device.
                self.admission.fail(ticket, ResourceExhausted(
                    f"{self._decoding} images are waiting to be decoded; try again shortly"))
                return
            self._decoding += 1
            try:
                self._pre_pool.submit(self._prepare_off_loop, asyncio.get_running_loop(),
                                      router, ticket, req, reads)
            except RuntimeError:  # the pool is shut down: the daemon is stopping
                self._decoding -= 1
                self.admission.fail(ticket, Unavailable("the daemon is shutting down"))
            return
        try:
            prepared = model.prepare(req)
        except EdgedError as e:
            self.admission.fail(ticket, e)
            return
        self.admission.submit(ticket, prepared, priority=req.priority, timeout_ms=req.timeout_ms,
                              quiet=self._quiet_on(router))

    def _prepare_off_loop(self, loop: asyncio.AbstractEventLoop, router: sockets.Router,
                          ticket: Ticket, req: Request, reads: list[Read]) -> None:
        """On the decode pool: read large shm slots, prepare, then one call back onto the
        loop. (No task and no asyncio future per request: the same two thread hand-offs,
        less work on the loop.)"""
        def work() -> Prepared:
            self.shm.read(reads)
            return ticket.model.prepare(req)

        outcome = prepare_outcome(work, log)
        with contextlib.suppress(RuntimeError):  # the loop is closed: the daemon stopped
            loop.call_soon_threadsafe(self._prepared, router, ticket, req, outcome)

    def _prepared(self, router: sockets.Router, ticket: Ticket, req: Request,
                  outcome: Any) -> None:
        """Back on the loop with a decoded request (or why it could not be)."""
        self._decoding -= 1
        self.admission.decoded(ticket, outcome, priority=req.priority,
                               timeout_ms=req.timeout_ms, quiet=self._quiet_on(router))

    def _quiet_on(self, router: sockets.Router) -> Callable[[], bool]:
        """Nothing else waits on ``router``: one function per socket, asked only by a batcher
        that may compute inline (``inline_max_ms``)."""
        quiet = self._quiet.get(router)
        if quiet is None:
            def quiet() -> bool:
                return not router.waiting()

            self._quiet[router] = quiet
        return quiet

    def _respond(self, router: sockets.Router, envelope: list[bytes],
                 request_id: str | int | None, ticket: Ticket,
                 outcome: Result | EdgedError) -> None:
        """The request's one reply (``Admission`` has counted it already)."""
        if isinstance(outcome, EdgedError):
            self._send_error(router, envelope, request_id, outcome)
            return
        timing = {"queue_us": int(outcome.queue_s * 1e6),
                  "compute_us": int(outcome.compute_s * 1e6), "batch": outcome.batch,
                  "total_us": int((time.monotonic() - ticket.received) * 1e6)}
        dets = outcome.detections
        header = None
        if dets is not None:  # a pipeline's answer has its own (its stages' batches)
            header = outcome.detections_header or ticket.model.detections_header(dets)
        frames = ok_reply_frames(request_id, ticket.model.name, outcome.variant,
                                 outcome.outputs, timing, dets, header)
        self._reply(router, envelope, frames)

    def _refuse(self, router: sockets.Router, envelope: list[bytes],
                request_id: str | int | None, model: str | None, err: EdgedError) -> None:
        """A request refused before admission: counted, then answered."""
        self.admission.reject(err, model)
        self._send_error(router, envelope, request_id, err)

    def _send_error(self, router: sockets.Router, envelope: list[bytes],
                    request_id: str | int | None, err: EdgedError) -> None:
        self._reply(router, envelope, [encode_header(error_reply(request_id, err.status,
                                                               str(err)))])

    def _reply(self, router: sockets.Router, envelope: list[bytes], frames: list[Any]) -> None:
        self.state.answered += 1
        router.send(envelope, frames)
