"""Frigate detector endpoints: Frigate's ``zmq`` requests through edged's own model path.

Why a room of its own: the protocol differs from edged's (no ids, no statuses, one
480-byte reply), but the work must not: a Frigate frame is prepared like a native raw
frame (``Model.prepare_frame``), admitted, queued and counted through the same
``Admission`` as a native request, so frames of several cameras, native clients
included, compute together under the same governor, deadline and metrics. Frigate
gives up after ``request_timeout_ms`` and cannot read an error, so every request gets
exactly one reply and a failure is an all-zero result plus a counted error
(``edged_frigate_requests_total{status!="OK"}``), never silence.

Management messages (the start-up handshake, a model file) are told apart by their
header keys and answered by ``handshake``; a sent model's requests are prepared by
``sent`` (the tensor as Frigate made it when it is the model's input). An endpoint
serving a pipeline prepares the frame through the pipeline (``Pipeline.prepare_frame``,
as a model's) and sends each row with its ``label_from`` stage's class (``stage_class``).
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

import zmq

from edged.batching.queue import Result
from edged.config.file import Config
from edged.config.frigate import FRIGATE_IDS, FrigateConfig
from edged.errors import EdgedError, StartupError
from edged.host.ports import Where
from edged.host.runtime_dir import resolve_endpoints
from edged.protocols import sockets
from edged.protocols.admission import Admission, Ticket
from edged.protocols.frigate.handshake import Handshake, ManagedEndpoint
from edged.protocols.frigate.stage_class import StageClass
from edged.protocols.frigate.wire import (
    MAX_ROWS,
    ZEROS,
    encode_result,
    management_header,
    parse_request,
)
from edged.protocols.serving import Listener, Loop, Serving
from edged.protocols.sockets import split_envelope

log = logging.getLogger("edged.protocols.frigate")


class _Endpoint:
    """One bound Frigate endpoint: its config and its metric series."""

    def __init__(self, state: Serving, cfg: FrigateConfig, address: str,
                 manage: ManagedEndpoint) -> None:
        self.cfg = cfg
        #: the handshake/transfer side of this endpoint (``handshake``)
        self.manage = manage
        self.address = address
        self.router: sockets.Router | None = None  # set once bound
        self.class_map = dict(cfg.class_map)
        #: a sent model's ids must stay in Frigate's labelmap (0..90); a configured model's
        #: ids are the operator's (class_map and Frigate's labelmap_path)
        self.max_id = FRIGATE_IDS - 1 if cfg.accept_models else None
        self._metrics = state.metrics
        #: a pipeline's endpoint: which class each row carries (``label_from``)
        self.stage_class: StageClass | None = None
        self.take_stage(state.config)
        self.duration = state.metrics.frigate_duration.labels(address)
        self._requests = state.metrics.frigate_requests
        self._ok = self._requests.labels(address, cfg.model, "OK")
        # Frigate asks for at most 20 rows; min_score becomes the request's conf.
        self.options: dict[str, Any] = {"max_det": MAX_ROWS}
        if cfg.min_score is not None:
            self.options["conf"] = cfg.min_score

    def take_stage(self, config: Config) -> None:
        """The ``label_from`` stage as ``config`` has it (at start, and after a reload that
        changed the pipeline's stage: its labels are what rows are checked against)."""
        pipe = config.pipeline(self.cfg.model)
        if pipe is None or self.cfg.label_from is None:
            return
        stage = next(s for s in pipe.stages if s.name == self.cfg.label_from)  # checked
        if self.stage_class is None or self.stage_class.stage != stage:
            self.stage_class = StageClass(self._metrics, self.address, stage, self.class_map)

    def count(self, status: str) -> None:
        (self._ok if status == "OK" else
         self._requests.labels(self.address, self.cfg.model, status)).inc()


class FrigateRoom:
    def __init__(self, serving: Serving) -> None:
        self.state = serving
        self.admission = Admission(serving)
        self.manage = Handshake(serving)
        #: [[server.frigate]] endpoints as bound
        self.endpoints: list[_Endpoint] = []

    # -- the room, as the lifecycle drives it --------------------------------------------

    async def start(self, config: Config) -> None:
        cfg = config.server
        assert self.state.runtime_dir is not None
        for i, f in enumerate(cfg.frigate):
            ep = resolve_endpoints((f.endpoint,), self.state.runtime_dir)[0]
            if sockets.is_network(ep):
                # Frigate's zmq detector cannot do CURVE: a network endpoint is plain text.
                if not cfg.insecure:
                    raise StartupError(
                        f"frigate endpoint {ep} is reachable from the network and Frigate's "
                        "zmq detector has no CURVE; use ipc:// or loopback, or set [server] "
                        "insecure = true")
                log.warning("insecure: frigate endpoint %s accepts unauthenticated clients", ep)
            # A model file travels in one frame: read it (and answer) up to twice the limit.
            cap = max(cfg.limits.hard_cap, 2 * f.max_model_bytes) if f.accept_models \
                else cfg.limits.hard_cap
            sock = sockets.bind_router(self.state.zmq, ep, cap, None, Where(
                f"[[server.frigate]] endpoint (table {i})", None, str(config.file)))
            e = _Endpoint(self.state, f, ep, self.manage.endpoint(f, ep))
            e.router = sockets.Router(sock, ep, functools.partial(self.on_message, e))
            self.endpoints.append(e)
            log.info("frigate endpoint %s serves %s", ep, _serves(e))
        for e in self.endpoints:
            assert e.router is not None
            e.router.start()

    def loops(self) -> list[Loop]:
        return []  # each endpoint's Router is driven by the loop itself

    async def apply(self, config: Config) -> list[str]:
        # [[server.frigate]] is bound at start (a change needs a restart); a pipeline's
        # label_from stage may have changed with the reload (load_config checked it)
        for e in self.endpoints:
            e.take_stage(config)
        return []

    def listeners(self) -> list[Listener]:
        return [Listener("frigate", e.address, _serves(e)) for e in self.endpoints]

    def status(self) -> dict[str, Any]:
        return {"frigate": {e.address: e.cfg.model for e in self.endpoints},
                "frigate_rungs": self.manage.sent.launcher.entries}

    async def stop(self) -> None:
        for e in self.endpoints:
            if e.router is not None:
                e.router.close()
        self.endpoints.clear()

    # -- requests ------------------------------------------------------------------------

    def on_message(self, ep: _Endpoint, router: sockets.Router, frames: list[Any]) -> None:
        envelope, body = split_envelope(frames)
        header = management_header(body)
        if header is not None:
            self.manage.handle(router, ep.manage, envelope, header, body)
        else:
            self.handle(ep, envelope, body)

    def handle(self, ep: _Endpoint, envelope: list[bytes], body: list[zmq.Frame]) -> None:
        received = time.monotonic()
        try:
            ticket = self.admission.admit(ep.cfg.model, received,
                                          functools.partial(self._respond, ep, envelope))
        except EdgedError as e:
            self._refuse(ep, envelope, e)
            return
        try:
            self.admission.check_size(body)
            req = parse_request(body, self.state.config.server.limits.max_image_pixels)
            if ep.manage.sent is not None:
                prepared = self.manage.sent.prepare(ep.manage.sent, ticket.model, req,
                                                    ep.options)
            else:
                prepared = ticket.model.prepare_frame(req.frame, ep.cfg.input_pixel_format,
                                                      ep.options)
        except EdgedError as e:
            self.admission.fail(ticket, e)
            return
        except Exception as e:  # a bug still answers (zeros) and is counted once
            log.exception("frigate %s: request failed", ep.address)
            self.admission.fail(ticket, EdgedError(f"{type(e).__name__}: {e}"))
            return
        ticket.context = (req.frame.shape[1], req.frame.shape[0])  # what rows normalise to
        self.admission.submit(ticket, prepared, priority=ep.cfg.priority,
                              timeout_ms=ep.cfg.timeout_ms)

    def _respond(self, ep: _Endpoint, envelope: list[bytes], ticket: Ticket,
                 outcome: Result | EdgedError) -> None:
        """The request's one 480-byte reply (``Admission`` has counted it already)."""
        if isinstance(outcome, EdgedError):
            self._zeros(ep, envelope, outcome)
            return
        assert outcome.detections is not None
        dets = outcome.detections
        if ep.stage_class is not None:
            dets = ep.stage_class.rows(dets, outcome.detections_header)
        ep.count("OK")  # counted before the reply leaves: a scrape after it sees it
        ep.duration.observe(time.monotonic() - ticket.received)
        w, h = ticket.context
        self._reply(ep, envelope, encode_result(dets, w, h, 0.0, ep.class_map, ep.max_id))

    def _refuse(self, ep: _Endpoint, envelope: list[bytes], err: EdgedError) -> None:
        """Refused before admission (unknown model, not serving): counted, all zeros."""
        self.admission.reject(err, ep.cfg.model)
        self._zeros(ep, envelope, err)

    def _zeros(self, ep: _Endpoint, envelope: list[bytes], err: EdgedError) -> None:
        """Frigate cannot read an error: an all-zero result, and the status counted."""
        ep.count(err.status)
        self._reply(ep, envelope, ZEROS)
        log.debug("frigate %s: %s %s", ep.address, err.status, err)

    def _reply(self, ep: _Endpoint, envelope: list[bytes], result: bytes) -> None:
        self.state.answered += 1
        assert ep.router is not None
        ep.router.send(envelope, [result])


def _serves(e: _Endpoint) -> str:
    """What an endpoint serves, as ``edged status`` and the start-up log say it."""
    if e.cfg.accept_models:
        return "the model Frigate sends"
    if e.stage_class is not None:
        return f"pipeline {e.cfg.model} (class from stage {e.stage_class.stage.name})"
    return e.cfg.model
