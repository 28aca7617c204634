"""The models Frigate sends to ``accept_models`` endpoints: stored, loaded, served, laddered.

Why apart from the handshake: this is the one place that turns bytes from a socket into
a served model; the handshake's two questions and a sent model's frames arrive here, and
each step has a module of its own. A transfer is checked and stored content-addressed
(``edged.protocols.frigate.transfer``: its bounds, then
``edged.protocols.frigate.model_check``: onnx parse, no external data, onnx.checker, the
``model_type``'s layout; ``edged.protocols.frigate.store``), loaded as the model
``frigate@ENDPOINT`` beside the configured ones and switched to only when the bytes changed
(``edged.protocols.frigate.sent_switch``); the stored model is served again after a restart,
and the frames Frigate sent are kept for its INT8 rung (``frigate_rungs``,
``edged.protocols.frigate.sent_rungs``). One lock per endpoint: two Frigate detectors sending
the same model at once store and load it once.

A sent model takes the road of a delivered version (docs/delivery.md) where a stage
applies, and ``edged status`` shows it the same way (``edged.delivery.board``: the
``delivery`` entry of ``frigate@ENDPOINT``, its stage, the last refusal and rollback):
*downloading* is the transfer (its size, the client's pace, the store's quota), *gating* its
contract (the graph against its ``model_type``'s layout, its class ids against Frigate's
labelmap) and its load, *shadowing* when the model it replaces is computing frames another
client sends with the same tensors, *promoting* the registry switch, *watching* the
window after it (the last two: ``edged.protocols.frigate.rollout``), and its rungs are built
from the frames it is then sent. No accuracy gate: Frigate sends no labelled set. Usually
no shadow: Frigate sends its model in a detector's start-up handshake, before its frames,
so the model it replaces gets none meanwhile; the entry says why it was skipped.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any

from edged.config.layouts import normalize_type
from edged.delivery.pace import peer_key
from edged.delivery.rung_launcher import RungLauncher
from edged.delivery.store import VersionStore, default_state_dir, open_store
from edged.errors import InvalidArgument, Unavailable
from edged.model.contract import Prepared
from edged.model.model import Model
from edged.model.request import InputMeta, Request
from edged.protocols.frigate.rollout import watch_transfer, watching
from edged.protocols.frigate.sent_endpoint import SentEndpoint
from edged.protocols.frigate.sent_rungs import SentRungs
from edged.protocols.frigate.sent_switch import SentSwitch
from edged.protocols.frigate.store import FrigateModels, StoredModel
from edged.protocols.frigate.transfer import TransferRefused, Transfers
from edged.protocols.frigate.wire import FrigateRequest, data_answer, request_answer
from edged.protocols.serving import Serving

log = logging.getLogger("edged.protocols.frigate")


def log_once(logged: set[str], address: str, name: str, what: str) -> None:
    if name not in logged:
        logged.add(name)
        log.info("frigate %s: Frigate's model %r is served by %s", address, name, what)


class SentModels:
    """The sent-model side of every ``accept_models`` endpoint: the handshake's questions, a
    sent model's frames, and what serves after a transfer (at start, on a rollback, on a
    header's ``model_type``)."""

    def __init__(self, state: Serving) -> None:
        self.state = state
        #: each endpoint's rung build as ``edged status`` shows it (``frigate_rungs``)
        self.launcher = RungLauncher()
        self.transfers = Transfers(state, self.models)
        self.switch = SentSwitch(state, self.models, self.launcher)
        self.rungs = SentRungs(state, self.models, self.launcher, self.switch)

    @property
    def store(self) -> VersionStore:
        """The daemon's one model store (``edged.delivery.store``)."""
        if self.state.store is None:
            self.state.store = open_store(self.state.config.server, self.state.metrics)
        return self.state.store

    def models(self, e: SentEndpoint) -> FrigateModels:
        """The endpoint's versions in the store (its model is ``frigate@ENDPOINT``)."""
        return FrigateModels(self.store, e.cfg.model)

    # -- the handshake's two questions ------------------------------------------------------
    async def request(self, e: SentEndpoint, name: str) -> dict[str, Any]:
        """``model_request`` for ``name``: served, or loaded from the store, or not here."""
        async with e.lock:
            if self.switch.serving(e, name):
                return self._ready(e, name, request_answer, True)
            stored = await asyncio.to_thread(self.models(e).get, name)
            if stored is not None and self.models(e).never_again(stored.sha256):
                stored = None  # rolled back here: Frigate's transfer is answered why
            if stored is None:
                refused = self.transfers.refused(e)
                return request_answer(name, False, False, refused or (
                    f"edged has no model {name!r} yet; send it (Frigate does so itself)"))
            err = await self.switch.serve(e, stored)
        if err:
            return request_answer(name, True, False, err)
        return self._ready(e, name, request_answer, True)

    async def receive(self, e: SentEndpoint, name: str, data: Any,
                      peer: str = "") -> dict[str, Any]:
        """``model_data``: check, store, load and answer ``model_saved``/``model_loaded``.

        Bounded three ways before a byte is parsed: the file's size (``max_model_bytes``),
        the client's pace (``transfers_per_minute`` new files a minute; the same bytes
        again, as a second detector sends them at start-up, are never counted) and the
        store's quota (``[server] max_store_bytes``). Every refusal is the answer's
        ``message`` and the model's last refusal in ``edged status``."""
        refused = self.transfers.refused(e)
        if refused:
            return data_answer(name, False, False, refused)
        try:
            blob, sha = await self.transfers.read(e, name, data)
            async with e.lock:
                stored = await self.transfers.store(e, name, blob, sha, peer_key(peer))
                before = e.served.stored.sha256 if e.served is not None else None
                err = await self.switch.serve(e, stored, "promoted")
                if err is None and before not in (None, stored.sha256):
                    # a new model replaced one that served: watched, as every delivered version
                    watching(self.state, e.cfg.model, stored.name)
                    self.state.spawn(self._watch(e, stored))
        except TransferRefused as exc:
            return data_answer(name, False, False, str(exc))
        if err:
            return data_answer(name, True, False, err)
        return self._ready(e, name, data_answer, True)

    def _ready(self, e: SentEndpoint, name: str, answer: Any, flag: bool) -> dict[str, Any]:
        assert e.served is not None
        s = e.served
        log_once(e.logged, e.address, name, f"the model Frigate sent ({s.model_type}, sha256 "
                 f"{s.stored.sha256[:12]}) as edged model {e.cfg.model!r}")
        note = f"; {e.ids_note}" if e.ids_note else ""
        return answer(name, flag, True, f"served by edged as {e.cfg.model!r} "
                      f"({s.model_type}){note}")

    # -- what serves, after the transfer ---------------------------------------------------
    async def preload(self, e: SentEndpoint) -> None:
        """At start: serve what this endpoint served before the restart."""
        try:
            stored = await asyncio.to_thread(self.models(e).last_served)
            if stored is None:  # a device upgraded from the store before the one store
                stored = await asyncio.to_thread(
                    self.models(e).adopt_legacy,
                    self.state.config.server.state_dir or default_state_dir(), e.address)
        except OSError as exc:
            log.error("frigate %s: model store unreadable: %s", e.address, exc)
            return
        if stored is None:
            return
        async with e.lock:
            if e.served is None and await self.switch.serve(e, stored) is None:
                log.info("frigate %s: serving stored model %r again", e.address, stored.name)

    async def _retype(self, e: SentEndpoint, model_type: str) -> None:
        """Serve the stored model again decoded as ``model_type`` (and remember it)."""
        async with e.lock:
            if e.served is None:
                return
            stored = replace(e.served.stored, model_type=model_type)
            await asyncio.to_thread(self.models(e).retype, stored, model_type)
            err = await self.switch.switch(e, stored, "retyped")
        if err:
            log.error("frigate %s: could not serve %r as %s: %s", e.address, stored.name,
                      model_type, err)
            if e.served is not None:  # requests naming it get zeros and the warning now
                e.served.fits = tuple(t for t in e.served.fits if t != model_type)
                e.served.retyping = False

    async def _watch(self, e: SentEndpoint, stored: StoredModel) -> None:
        """The watch window after a new model replaced one (``rollout.watch_transfer``
        decides); on a regression the model it replaced serves again, and the regressed
        bytes are never served here again."""
        name, board = e.cfg.model, self.state.board
        why = await watch_transfer(self.state, name, stored.name, stored.sha256, lambda: (
            e.served is not None and e.served.stored.sha256 == stored.sha256))
        if why is None:
            return
        async with e.lock:
            models = self.models(e)
            fb = await asyncio.to_thread(models.fallback)
            if e.served is None or e.served.stored.sha256 != stored.sha256 or fb is None:
                return
            log.error("frigate %s: model %r regressed in its watch window: %s; serving %r "
                      "again (the regressed model is never served here again)", e.address,
                      stored.name, why, fb.name)
            board.entry(name, stage="rolling back", progress=f"to {fb.name}: {why}"[:200])
            board.rolled_back(name, stored.name, stored.sha256, why, "automatic", True)
            err = await self.switch.switch(e, fb, "restored")
            await asyncio.to_thread(models.rolled_back, stored, why)
        if err:
            log.error("frigate %s: rolling back to %r failed: %s", e.address, fb.name, err)

    # -- the inference side ----------------------------------------------------------------
    def prepare(self, e: SentEndpoint, model: Model, req: FrigateRequest,
                options: dict[str, Any]) -> Prepared:
        """A request for a sent model: the tensor goes in as Frigate made it when it is the
        model's input (dtype and shape), else it is fitted like a frame."""
        sent = e.served
        asked = normalize_type(req.model_type)
        if sent is not None and asked is not None and asked != sent.model_type:
            if asked in sent.fits:  # the graph fits what Frigate says too: decode as it says
                if not sent.retyping:
                    sent.retyping = True
                    log.info("frigate %s: Frigate sends model_type %r: serving %r as %s",
                             e.address, req.model_type, sent.stored.name, asked)
                    self.state.spawn(self._retype(e, asked))
                raise Unavailable(f"switching {sent.stored.name!r} to model_type {asked!r}")
            if asked not in e.warned_types:
                e.warned_types.add(asked)
                log.warning("frigate %s: Frigate sends model_type %r but the model it sent "
                            "(%r) has the %r layout; set model_type: %s in Frigate's model "
                            "block", e.address, req.model_type, sent.stored.name,
                            sent.model_type, sent.model_type)
            raise InvalidArgument(f"model_type {req.model_type!r} is not the sent model's "
                                  f"{sent.model_type!r}")
        spec = model.inputs[0] if len(model.inputs) == 1 else None
        t = req.tensor
        if spec is not None and spec.matches_item(t.dtype, t.shape):
            r = Request(op="infer", id=None, model=model.name,
                        inputs=[InputMeta(None, "raw", t.dtype, t.shape, t)], options=options)
            prepared = model.prepare(r)
        else:
            prepared = model.prepare_frame(req.frame, e.cfg.input_pixel_format, options)
        if sent is not None and sent.ring is not None and not sent.rung_started:
            self.rungs.keep_frame(e, sent, prepared.feeds)
        return prepared
