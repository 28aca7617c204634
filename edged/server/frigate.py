"""Frigate detector endpoints: Frigate's ``zmq`` requests through edged's own model path.

Why a room of its own: the protocol differs from edged's (no ids, no statuses, one
480-byte reply), but the work must not: a Frigate frame is prepared like a native raw
frame (``Model.prepare_frame``) and queued in the same batcher, so frames of several
cameras, native clients included, compute together under the same governor, deadline
and metrics. Frigate gives up after ``request_timeout_ms`` and cannot read an error,
so every request gets exactly one reply and a failure is an all-zero result plus a
counted error (``edged_frigate_requests_total{status!="OK"}``), never silence.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

import zmq
import zmq.asyncio

from edged.batcher import Pending, Result
from edged.config import FrigateConfig
from edged.errors import EdgedError, ResourceExhausted, Unavailable
from edged.frigate_protocol import MAX_ROWS, ZEROS, encode_result, parse_request
from edged.model import Model
from edged.server.endpoints import send, split_envelope
from edged.server.state import ServerState

log = logging.getLogger("edged.frigate")


class _Endpoint:
    """One bound Frigate endpoint: its config and its metric series."""

    def __init__(self, state: ServerState, cfg: FrigateConfig, address: str,
                 sock: zmq.asyncio.Socket) -> None:
        self.cfg = cfg
        self.address = address
        self.sock = sock
        self.class_map = dict(cfg.class_map)
        self.duration = state.metrics.frigate_duration.labels(address)
        self._requests = state.metrics.frigate_requests
        self._ok = self._requests.labels(address, cfg.model, "OK")
        # Frigate asks for at most 20 rows; min_score becomes the request's conf.
        self.options: dict[str, Any] = {"max_det": MAX_ROWS}
        if cfg.min_score is not None:
            self.options["conf"] = cfg.min_score

    def count(self, status: str) -> None:
        (self._ok if status == "OK" else
         self._requests.labels(self.address, self.cfg.model, status)).inc()


class FrigatePath:
    def __init__(self, state: ServerState) -> None:
        self.state = state

    async def recv_loop(self, cfg: FrigateConfig, address: str,
                        sock: zmq.asyncio.Socket) -> None:
        ep = _Endpoint(self.state, cfg, address, sock)
        log.info("frigate endpoint %s serves model %s", address, cfg.model)
        while True:
            frames = await sock.recv_multipart(copy=False)
            try:
                self.handle(ep, frames)
            except Exception:  # nothing a client sends may stop the loop
                log.exception("unhandled error while handling a Frigate request")

    def handle(self, ep: _Endpoint, frames: list[zmq.Frame]) -> None:
        received = time.monotonic()
        envelope, body = split_envelope(frames)
        model: Model | None = None
        try:
            model = self.state.registry.get(ep.cfg.model)
            if not self.state.serving:
                raise Unavailable("the daemon is " + ("starting" if not self.state.ready
                                                      else "shutting down"))
            limits = self.state.config.server.limits
            size = sum(len(f) for f in body)
            if size > limits.max_message_bytes:
                raise ResourceExhausted(f"message is {size} bytes; the limit is "
                                        f"{limits.max_message_bytes}")
            req = parse_request(body, limits.max_image_pixels)
            feeds, rows, key, job = model.prepare_frame(req.frame, ep.cfg.input_pixel_format,
                                                        ep.options)
            wh = (req.frame.shape[1], req.frame.shape[0])
            p = Pending(feeds=feeds, rows=rows, key=key, meta=job, arrival=received,
                        priority=ep.cfg.priority,
                        deadline=received + ep.cfg.timeout_ms / 1000.0,
                        respond=functools.partial(self._respond, ep, envelope, model, wh,
                                                  received))
            model.submit(p)
        except EdgedError as e:
            self._fail(ep, envelope, model, e)

    def _respond(self, ep: _Endpoint, envelope: list[bytes], model: Model,
                 size: tuple[int, int], received: float, p: Pending,
                 outcome: Result | EdgedError) -> None:
        """The batcher's completion callback: one 480-byte reply per request."""
        if isinstance(outcome, EdgedError):
            self._fail(ep, envelope, model, outcome)
            return
        assert outcome.detections is not None
        total = time.monotonic() - received
        ep.count("OK")  # counted before the reply leaves: a scrape after it sees it
        ep.duration.observe(total)
        model.observe_reply(outcome.variant, total, outcome.queue_s)
        self._reply(ep, envelope, encode_result(outcome.detections, size[0], size[1], 0.0,
                                                ep.class_map))

    def _fail(self, ep: _Endpoint, envelope: list[bytes], model: Model | None,
              err: EdgedError) -> None:
        ep.count(err.status)
        self.state.metrics.requests.labels(ep.cfg.model if model is not None else "",
                                           model.active_variant if model is not None else "",
                                           err.status).inc()
        self._reply(ep, envelope, ZEROS)
        log.debug("frigate %s: %s %s", ep.address, err.status, err)

    def _reply(self, ep: _Endpoint, envelope: list[bytes], result: bytes) -> None:
        self.state.answered += 1
        send(ep.sock, envelope, [result])
