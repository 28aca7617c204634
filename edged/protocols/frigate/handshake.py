"""Frigate's start-up handshake and model transfer, on every ``[[server.frigate]]`` endpoint.

Why a module of its own: before its first frame Frigate's ``zmq`` plugin asks
``{"model_request": true, "model_name"}`` and, if told the model is not available, sends
``[{"model_data": true, "model_name"}, file bytes]``; it waits up to 30 s for one JSON frame
each time and is never ready (zeros on every frame) unless
``model_available``/``model_saved`` and ``model_loaded`` come back true (docs/frigate.md,
"The start-up handshake"). It repeats the handshake after every inference timeout, so
answers must be quick and must never reload a model that already serves.

Here: reading a management message (a malformed one gets a JSON answer saying what is
wrong), answering for an endpoint's configured ``model`` (available and loaded once it
is ready; a handshake that arrives while it loads waits for it, within Frigate's 30 s; a
pipeline's ``label_from`` stage is waited for too),
and handing an ``accept_models`` endpoint's questions to ``sent.SentModels``. Each answer is
one JSON frame, sent from a task of its own so the receive loop never waits.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from edged.config.frigate import FrigateConfig
from edged.model.model import Model
from edged.model.pipeline.pipeline import Pipeline
from edged.protocols.frigate.sent import SentModels, log_once
from edged.protocols.frigate.sent_endpoint import SentEndpoint
from edged.protocols.frigate.store import check_name
from edged.protocols.frigate.wire import data_answer, refusal, request_answer
from edged.protocols.serving import Serving
from edged.protocols.sockets import Router

log = logging.getLogger("edged.protocols.frigate")

#: how long a handshake waits for a loading model (Frigate gives up after 30 s)
READY_WAIT_S = 25.0


@dataclass
class ManagedEndpoint:
    """One endpoint's handshake side (and its sent-model side with accept_models)."""

    cfg: FrigateConfig
    address: str
    sent: SentEndpoint | None
    #: names whose serving model was logged (once per name)
    logged: set[str] = field(default_factory=set)


class Handshake:
    def __init__(self, state: Serving) -> None:
        self.state = state
        self.sent = SentModels(state)

    def endpoint(self, cfg: FrigateConfig, address: str) -> ManagedEndpoint:
        """An endpoint's handshake side; with accept_models, its stored model is preloaded."""
        sent = SentEndpoint(cfg, address) if cfg.accept_models else None
        if sent is not None:
            self.state.spawn(self.sent.preload(sent))
        return ManagedEndpoint(cfg, address, sent)

    def handle(self, router: Router, e: ManagedEndpoint, envelope: list[bytes],
               header: dict[str, Any], body: list[Any]) -> None:
        """Answer off the receive loop: a handshake may wait for a model to load."""
        self.state.spawn(self._answer(router, e, envelope, header, body))

    async def _answer(self, router: Router, e: ManagedEndpoint, envelope: list[bytes],
                      header: dict[str, Any], body: list[Any]) -> None:
        t0 = time.perf_counter()
        try:
            answer = await self._dispatch(e, header, body)
        except Exception as exc:  # an answer, whatever happened
            log.exception("frigate %s: management message failed", e.address)
            answer = refusal(header, f"edged failed to handle this message: {exc}")
        log.debug("frigate %s: %s answered in %.1f ms: %s", e.address,
                  "model_data" if "model_data" in header else "model_request",
                  (time.perf_counter() - t0) * 1000, answer.get("message"))
        router.send(envelope, [json.dumps(answer).encode("utf-8")])

    async def _dispatch(self, e: ManagedEndpoint, header: dict[str, Any],
                        body: list[Any]) -> dict[str, Any]:
        if "model_request" in header and "model_data" in header:
            return refusal(header, "a message has model_request or model_data, not both")
        name = header.get("model_name")
        why = check_name(name)
        if why:
            return refusal(header, why)
        assert isinstance(name, str)
        if "model_request" in header:
            if header["model_request"] is not True:
                return refusal(header, "model_request must be true")
            if len(body) != 1:
                return refusal(header, f"a model_request is one frame; got {len(body)}")
            if e.sent is not None:
                await self._wait_serving()  # frames sent before the daemon serves get zeros
                return await self.sent.request(e.sent, name)
            return await self._request_configured(e, name)
        if header["model_data"] is not True:
            return refusal(header, "model_data must be true")
        if len(body) != 2:
            return refusal(header, "model_data is two frames [header, model file bytes]; "
                           f"got {len(body)}")
        if e.sent is None:
            m = self.state.registry.find_served(e.cfg.model)
            return data_answer(name, False, bool(m is not None and m.ready), (
                f"this endpoint serves edged's configured {e.cfg.model!r} and takes no "
                "model files (an endpoint with accept_models = true and no model does)"))
        return await self.sent.receive(e.sent, name, body[1], _peer(body[0]))

    async def _request_configured(self, e: ManagedEndpoint, name: str) -> dict[str, Any]:
        served = await self._wait_ready(e.cfg.model, e.cfg.label_from)
        kind = "pipeline" if isinstance(served, Pipeline) else "model"
        if served is None or not served.ready:
            state = served.state if served is not None else "not loaded"
            detail = f": {served.error}" if served is not None and served.error else ""
            return request_answer(name, True, False, f"edged's {kind} {e.cfg.model!r} is "
                                  f"{state}{detail}")
        note = ""
        if isinstance(served, Pipeline) and e.cfg.label_from is not None:
            stage = served.stage_model(e.cfg.label_from)
            note = f", each box's class read by its stage {e.cfg.label_from!r}"
            if stage is None or not stage.ready:
                state = stage.state if stage is not None else "not served"
                note += (f" (its model is {state} now: boxes carry the detector's class "
                         "until it serves)")
        log_once(e.logged, e.address, name, f"{kind} {e.cfg.model!r} (configured, variant "
                 f"{served.active_variant}{note})")
        return request_answer(name, True, True, f"served by edged's configured {kind} "
                              f"{e.cfg.model!r}{note}")

    async def _wait_ready(self, name: str, stage: str | None = None) -> Model | Pipeline | None:
        """The model or pipeline once it is ready (and the daemon serving), or as it is
        after the wait; a pipeline's ``stage`` is waited for too (ready, failed or not
        served), so Frigate's first frames get the stage's labels."""
        end = time.monotonic() + READY_WAIT_S
        while True:
            m = self.state.registry.find_served(name)
            done = m is not None and (m.state == "failed" or (m.ready and self.state.serving))
            if done and isinstance(m, Pipeline) and stage is not None and m.state != "failed":
                sm = m.stage_model(stage)
                done = sm is None or sm.ready or sm.state == "failed"
            if done or time.monotonic() >= end or self.state.phase in ("draining", "stopped"):
                return m
            await asyncio.sleep(0.05)

    async def _wait_serving(self) -> None:
        end = time.monotonic() + READY_WAIT_S
        while self.state.phase == "starting" and time.monotonic() < end:
            await asyncio.sleep(0.05)


def _peer(frame: Any) -> str:
    """Who sent a message, as libzmq says (a TCP peer's IP, ``localhost:UID:GID:PID`` on
    ``ipc://``); "" when it cannot say (a copied frame)."""
    try:
        return str(frame.get("Peer-Address"))
    except Exception:
        return ""
