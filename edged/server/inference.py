"""The inference path: receive, admit, decode off the loop, submit, reply, count.

One request, in order: ``recv_loop`` -> ``handle`` (parse, admission, shared-memory
inputs read by the shm room) -> ``Model.prepare``
(on the event loop for raw tensors, on the decode pool for images) -> ``Model.submit``
-> the model's batcher computes -> ``_respond`` (reply frames, request metrics).
Every request that can be attributed to a sender gets exactly one reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import zmq
import zmq.asyncio

from edged.batcher import Pending, Result
from edged.errors import EdgedError, ResourceExhausted, Unavailable
from edged.model import Model
from edged.protocol.reply import encode_header, error_reply, ok_reply_frames
from edged.protocol.request import ProtocolError, Request, decode_header, parse_request, peek_id
from edged.server.endpoints import send, split_envelope
from edged.server.health import Health
from edged.server.shm import ShmRings
from edged.server.state import ServerState

log = logging.getLogger("edged.server")

#: image decodes queued at once, all clients together (each holds a decoded frame)
MAX_PENDING_DECODES = 64


class _Ctx:
    """Where a reply goes, and what it is about."""

    __slots__ = ("envelope", "ident", "model", "received", "request_id", "sock")

    def __init__(self, sock: zmq.asyncio.Socket, envelope: list[bytes],
                 request_id: str | int | None, model: Model, received: float) -> None:
        self.sock = sock
        self.envelope = envelope
        self.ident = envelope[0]
        self.request_id = request_id
        self.model = model  # the model that took the request (survives a reload)
        self.received = received


class InferencePath:
    def __init__(self, state: ServerState, health: Health, shm: ShmRings) -> None:
        self.state = state
        self.health = health
        self.shm = shm
        #: sockets on endpoints other hosts can reach: no shared-memory rings there
        self.remote: set[zmq.asyncio.Socket] = set()
        self._pre_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="edged-pre")
        self._inflight: dict[bytes, int] = {}
        self._decoding = 0  # requests waiting for image decode/preprocess

    def close(self) -> None:
        self._pre_pool.shutdown(wait=False)

    async def recv_loop(self, sock: zmq.asyncio.Socket) -> None:
        while True:
            frames = await sock.recv_multipart(copy=False)
            try:
                self.handle(sock, frames)
            except Exception:  # nothing a client sends may stop the loop
                log.exception("unhandled error while handling a request")

    def handle(self, sock: zmq.asyncio.Socket, frames: list[zmq.Frame]) -> None:
        received = time.monotonic()
        envelope, body = split_envelope(frames)
        limits = self.state.config.server.limits
        total = sum(len(f) for f in body)
        if total > limits.max_message_bytes:
            header = None
            with contextlib.suppress(Exception):
                header = decode_header(body[0], limits)
            self._send_error(sock, envelope, peek_id(header, limits), None,
                             ResourceExhausted(f"message is {total} bytes; the limit is "
                                               f"{limits.max_message_bytes}"))
            return
        try:
            req = parse_request(body, limits)
        except ProtocolError as e:
            self._send_error(sock, envelope, e.request_id, None, e)
            return
        if req.op == "health":
            self._reply(sock, envelope, [encode_header(self.health.health(req.id))])
            return
        if req.op == "models":
            self._reply(sock, envelope, [encode_header({
                "v": 1, "id": req.id, "status": "OK",
                "models": self.state.registry.describe()})])
            return
        if req.op == "shm":
            try:
                body = self.shm.op(envelope[0], req, sock not in self.remote)
            except EdgedError as e:
                self._send_error(sock, envelope, req.id, None, e)
                return
            self._reply(sock, envelope, [encode_header(body)])
            return
        assert req.model is not None
        try:
            model = self._admit(envelope[0], req.model)
        except EdgedError as e:
            self._send_error(sock, envelope, req.id, req.model, e)
            return
        self._inflight[envelope[0]] = self._inflight.get(envelope[0], 0) + 1
        self.state.metrics.inflight.inc()
        ctx = _Ctx(sock, envelope, req.id, model, received)
        if req.shm_inputs:
            try:
                self.shm.resolve(envelope[0], req)
            except EdgedError as e:
                self._fail(ctx, e)
                return
        if model.needs_thread(req):
            if self._decoding >= MAX_PENDING_DECODES:
                # Decoded images are large: bound the backlog across all clients, not only
                # per client, so a flood of JPEGs cannot fill a small device's memory.
                self._fail(ctx, ResourceExhausted(
                    f"{self._decoding} images are waiting to be decoded; try again shortly"))
                return
            self._decoding += 1
            self.state.spawn(self._prepare_async(model, req, ctx))
            return
        try:
            prepared = model.prepare(req)
        except EdgedError as e:
            self._fail(ctx, e)
            return
        self._submit(model, req, ctx, *prepared)

    def _admit(self, ident: bytes, name: str) -> Model:
        model = self.state.registry.get(name)
        if not self.state.serving:
            raise Unavailable("the daemon is " + ("starting" if not self.state.ready
                                                  else "shutting down"))
        n = self._inflight.get(ident, 0)
        cap = self.state.config.server.max_inflight_per_client
        if n >= cap:
            raise ResourceExhausted(f"this client has {n} requests in flight; the limit is {cap}")
        return model

    async def _prepare_async(self, model: Model, req: Request, ctx: _Ctx) -> None:
        try:
            prepared = await asyncio.get_running_loop().run_in_executor(
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
        if not self.state.serving:
            self._fail(ctx, Unavailable("the daemon is shutting down"))
            return
        self._submit(model, req, ctx, *prepared)

    def _submit(self, model: Model, req: Request, ctx: _Ctx, feeds: dict[str, Any],
                rows: int, key: tuple[Any, ...], meta: Any) -> None:
        deadline = ctx.received + req.timeout_ms / 1000.0 if req.timeout_ms else None
        p = Pending(feeds=feeds, rows=rows, key=key, respond=functools.partial(self._respond, ctx),
                    priority=req.priority, stream=req.stream, deadline=deadline,
                    outputs=req.outputs, meta=meta, arrival=ctx.received,
                    max_fps=req.max_fps)
        try:
            model.submit(p)
        except EdgedError as e:
            self._fail(ctx, e)

    def _respond(self, ctx: _Ctx, p: Pending, outcome: Result | EdgedError) -> None:
        """The batcher's completion callback: one reply per request."""
        if isinstance(outcome, EdgedError):
            self._fail(ctx, outcome)
            return
        now = time.monotonic()
        timing = {"queue_us": int(outcome.queue_s * 1e6),
                  "compute_us": int(outcome.compute_s * 1e6), "batch": outcome.batch,
                  "total_us": int((now - ctx.received) * 1e6)}
        frames = ok_reply_frames(
            ctx.request_id, ctx.model.name, outcome.variant, outcome.outputs, timing,
            outcome.detections,
            ctx.model.detections_header(outcome.detections)
            if outcome.detections is not None else None)
        self._reply(ctx.sock, ctx.envelope, frames)
        self._done(ctx)
        ctx.model.observe_reply(outcome.variant, now - ctx.received, outcome.queue_s)

    def _fail(self, ctx: _Ctx, err: EdgedError) -> None:
        self._send_error(ctx.sock, ctx.envelope, ctx.request_id, ctx.model.name, err)
        self._done(ctx)

    def _done(self, ctx: _Ctx) -> None:
        n = self._inflight.get(ctx.ident, 0) - 1
        if n > 0:
            self._inflight[ctx.ident] = n
        else:
            self._inflight.pop(ctx.ident, None)
        self.state.metrics.inflight.dec()

    def _send_error(self, sock: zmq.asyncio.Socket, envelope: list[bytes],
                    request_id: str | int | None, model: str | None, err: EdgedError) -> None:
        self._reply(sock, envelope, [encode_header(error_reply(request_id, err.status,
                                                               str(err)))])
        m = self.state.registry.find(model) if model else None
        self.state.metrics.requests.labels(model if m is not None else "",
                                           m.active_variant if m is not None else "",
                                           err.status).inc()

    def _reply(self, sock: zmq.asyncio.Socket, envelope: list[bytes], frames: list[Any]) -> None:
        self.state.answered += 1
        send(sock, envelope, frames)
