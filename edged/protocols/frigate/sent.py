"""The models Frigate sends to ``accept_models`` endpoints: stored, loaded, served, laddered.

Why apart from the handshake: this is the one place that turns bytes from a socket into
a served model. It checks them (``edged.protocols.frigate.model_check``: onnx parse, no
external data, onnx.checker, the ``model_type``'s layout), stores them content-addressed
(``edged.protocols.frigate.store``), loads them as the model ``frigate@ENDPOINT`` beside the
configured ones, switches to a new one only when the bytes changed, serves the stored model
again after a restart, and keeps the frames Frigate sent for its INT8 rung
(``frigate_rungs``). One lock per endpoint: two Frigate detectors sending the same model at
once store and load it once.

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
import contextlib
import hashlib
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from edged.config.frigate import FrigateConfig
from edged.config.layouts import normalize_type
from edged.delivery.pace import OncePerMinute, Pace, peer_key
from edged.delivery.rung_launcher import RungLauncher
from edged.delivery.rungs import FrameRing, built, drop_rungs, with_rungs
from edged.delivery.store import VersionStore, default_state_dir, open_store
from edged.delivery.store_bounds import StoreFull
from edged.errors import EdgedError, InvalidArgument, Unavailable
from edged.model.contract import Prepared
from edged.model.model import Model
from edged.model.request import InputMeta, Request
from edged.protocols.frigate.model_check import (
    ModelRefused,
    check_model,
    labelmap_fit,
    model_config,
)
from edged.protocols.frigate.rollout import shadow_transfer, watch_transfer, watching
from edged.protocols.frigate.store import FrigateModels, StoredModel, atomic_write
from edged.protocols.frigate.wire import FrigateRequest, data_answer, request_answer
from edged.protocols.serving import Serving
from edged.protocols.sockets import is_local

log = logging.getLogger("edged.protocols.frigate")


@dataclass
class _Served:
    """What an ``accept_models`` endpoint serves now."""

    stored: StoredModel
    model_type: str
    #: the file the fp32 rung loads (the stored one, or its adapted graph)
    path: Path
    #: frames Frigate sent, for an INT8 rung (None: it has one, or none is wanted)
    ring: FrameRing | None = None
    rung_started: bool = False
    #: the other Frigate types the graph fits (a header naming one switches to it)
    fits: tuple[str, ...] = ()
    retyping: bool = False


@dataclass
class SentEndpoint:
    cfg: FrigateConfig
    address: str
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    served: _Served | None = None
    #: names whose serving model was logged, header model_types warned about (once each)
    logged: set[str] = field(default_factory=set)
    warned_types: set[str] = field(default_factory=set)
    #: new model files per client and minute (``transfers_per_minute``)
    pace: Pace | None = None
    #: a refusal is logged once per client and minute, not per message
    log_due: OncePerMinute = field(default_factory=OncePerMinute)
    #: what the last transfer's answer says of its class ids and Frigate's labelmap
    ids_note: str = ""

    def __post_init__(self) -> None:
        if self.pace is None:
            self.pace = Pace(self.cfg.transfers_per_minute)


def log_once(logged: set[str], address: str, name: str, what: str) -> None:
    if name not in logged:
        logged.add(name)
        log.info("frigate %s: Frigate's model %r is served by %s", address, name, what)


class SentModels:
    def __init__(self, state: Serving) -> None:
        self.state = state
        self.rungs = RungLauncher()

    @property
    def store(self) -> VersionStore:
        """The daemon's one model store (``edged.delivery.store``)."""
        if self.state.store is None:
            self.state.store = open_store(self.state.config.server, self.state.metrics)
        return self.state.store

    def models(self, e: SentEndpoint) -> FrigateModels:
        """The endpoint's versions in the store (its model is ``frigate@ENDPOINT``)."""
        return FrigateModels(self.store, e.cfg.model)

    def transfer_refused(self, e: SentEndpoint) -> str | None:
        """Why this endpoint takes no model files (None: it does)."""
        a = e.address
        if is_local(a):
            return None
        return (f"edged takes no model files on {a}: it is plain TCP reachable from the "
                "network and Frigate's zmq detector has no CURVE (a model file is code-like "
                "input). Use an ipc:// or 127.0.0.1 endpoint, or configure the model in edged "
                "([[models]] and model = NAME on this endpoint)")

    # -- the handshake's two questions ------------------------------------------------------
    async def request(self, e: SentEndpoint, name: str) -> dict[str, Any]:
        """``model_request`` for ``name``: served, or loaded from the store, or not here."""
        async with e.lock:
            if self._serving(e, name):
                return self._ready(e, name, request_answer, True)
            stored = await asyncio.to_thread(self.models(e).get, name)
            if stored is not None and self.models(e).never_again(stored.sha256):
                stored = None  # rolled back here: Frigate's transfer is answered why
            if stored is None:
                refused = self.transfer_refused(e)
                return request_answer(name, False, False, refused or (
                    f"edged has no model {name!r} yet; send it (Frigate does so itself)"))
            err = await self._serve(e, stored)
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
        refused = self.transfer_refused(e)
        if refused:
            return data_answer(name, False, False, refused)
        size, limit = len(data), e.cfg.max_model_bytes
        if size > limit:
            return self._refuse(e, name, "downloading", "too_large", (
                f"the model file is {size} bytes; this endpoint takes at most {limit} "
                "(max_model_bytes)"))
        blob = memoryview(data).tobytes()
        sha = await asyncio.to_thread(lambda: hashlib.sha256(blob).hexdigest())
        client = peer_key(peer)
        models = self.models(e)
        async with e.lock:
            never = await asyncio.to_thread(models.never_again, sha)
            if never:
                self._count(e, "refused_rolled_back")
                return self._refuse(e, name, "verifying", "rolled_back", (
                    f"edged refused {name!r}: these bytes were rolled back here ({never}); "
                    "send a fixed model"))
            known = await asyncio.to_thread(models.by_digest, sha)
            if known is not None:  # the same bytes (maybe under another name): no new file
                self._count(e, "same")
                stored = await asyncio.to_thread(models.rename, known, name)
            else:
                why = self._bounded(e, models, client, name, sha, size)
                if why:
                    return self._refuse(e, name, "downloading", *why)
                self.state.board.entry(e.cfg.model, stage="gating", candidate=name,
                                       progress=f"{name} ({sha[:12]}): the graph against "
                                       "its model_type's layout, its class ids against "
                                       "Frigate's labelmap")
                try:
                    checked = await asyncio.to_thread(check_model, blob, e.cfg.model_type)
                    why_ids, ids_note = labelmap_fit(checked, dict(e.cfg.class_map))
                    reason = "labelmap"
                except ModelRefused as exc:
                    why_ids, ids_note, reason = str(exc), "", "contract"
                if not why_ids:
                    e.ids_note = ids_note
                else:
                    self._count(e, "refused_check")
                    if e.log_due(client, "check"):
                        log.warning("frigate %s: model %r from %s refused: %s", e.address,
                                    name, client, why_ids)
                    return self._refuse(e, name, "gating", reason,
                                        f"edged refused {name!r}: {why_ids}")
                try:
                    stored = await asyncio.to_thread(models.put, name, blob, sha,
                                                     checked.model_type)
                except StoreFull as exc:  # the store changed since the check above
                    return self._refuse(e, name, "downloading", f"store_{exc.reason}",
                                        self._full(e, client, name, exc))
                self._count(e, "stored")
                log.info("frigate %s: stored model %r (%s, %d bytes, sha256 %s)", e.address,
                         name, checked.model_type, size, stored.sha256[:12])
            before = e.served.stored.sha256 if e.served is not None else None
            err = await self._serve(e, stored, "promoted")
            if err is None and before not in (None, stored.sha256):
                # a new model replaced one that served: watched, as every delivered version
                watching(self.state, e.cfg.model, stored.name)
                self.state.spawn(self._watch(e, stored))
        if err:
            return data_answer(name, True, False, err)
        return self._ready(e, name, data_answer, True)

    def _refuse(self, e: SentEndpoint, name: str, stage: str, reason: str,
                message: str) -> dict[str, Any]:
        """The transfer's answer, refused; said in ``edged status`` as a delivered
        version's refusal is (the caller logs it, once a minute per client)."""
        self.state.board.refused(e.cfg.model, stage, reason, message,
                                 self.state.registry.find(e.cfg.model) is not None)
        return data_answer(name, False, False, message)

    def _bounded(self, e: SentEndpoint, models: FrigateModels, client: str, name: str,
                 sha: str, size: int) -> tuple[str, str] | None:
        """Why a new file from ``client`` is refused now (the pace, the store), as
        (reason, message), or None."""
        assert e.pace is not None
        wait = e.pace.take(client)
        if wait is not None:
            self._count(e, "refused_pace")
            n = e.cfg.transfers_per_minute
            if e.log_due(client, "pace"):
                log.warning("frigate %s: %s sends more than %d new model files a minute; "
                            "refusing them for %.0f s (transfers_per_minute; logged once a "
                            "minute)", e.address, client, n, wait)
            return "pace", (f"edged refused {name!r}: this client sent {n} new model files "
                            f"in the last minute, the most this endpoint takes "
                            f"(transfers_per_minute = {n}); send it again in {wait:.0f} s")
        try:
            models.admit(sha, size)
        except StoreFull as exc:
            return f"store_{exc.reason}", self._full(e, client, name, exc)
        return None

    def _full(self, e: SentEndpoint, client: str, name: str, exc: StoreFull) -> str:
        self._count(e, f"refused_{exc.reason}")
        if e.log_due(client, exc.reason):
            log.error("frigate %s: model %r from %s refused: %s (logged once a minute per "
                      "client)", e.address, name, client, exc)
        return f"edged refused {name!r}: {exc}"

    def _count(self, e: SentEndpoint, outcome: str) -> None:
        self.state.metrics.frigate_transfers.labels(e.address, outcome).inc()

    def _serving(self, e: SentEndpoint, name: str) -> bool:
        m = self.state.registry.find(e.cfg.model)
        return (e.served is not None and e.served.stored.name == name and m is not None
                and m.ready)

    def _ready(self, e: SentEndpoint, name: str, answer: Any, flag: bool) -> dict[str, Any]:
        assert e.served is not None
        s = e.served
        log_once(e.logged, e.address, name, f"the model Frigate sent ({s.model_type}, sha256 "
                 f"{s.stored.sha256[:12]}) as edged model {e.cfg.model!r}")
        note = f"; {e.ids_note}" if e.ids_note else ""
        return answer(name, flag, True, f"served by edged as {e.cfg.model!r} "
                      f"({s.model_type}){note}")

    # -- loading and switching ------------------------------------------------------------
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
            if e.served is None and await self._serve(e, stored) is None:
                log.info("frigate %s: serving stored model %r again", e.address, stored.name)

    async def _serve(self, e: SentEndpoint, stored: StoredModel,
                     how: str = "restored") -> str | None:
        """Serve ``stored`` on the endpoint (no reload for the same bytes); None, or why not."""
        if (e.served is not None and e.served.stored.sha256 == stored.sha256
                and self._serving(e, e.served.stored.name)):
            e.served.stored = stored  # the same bytes under a new name
            await asyncio.to_thread(self.models(e).served, stored)
            return None
        return await self._switch(e, stored, how)

    async def _switch(self, e: SentEndpoint, stored: StoredModel, how: str) -> str | None:
        """Load ``stored`` (with its rungs if it has accepted ones) and switch. ``how``:
        ``promoted`` (a transfer: gated by its load, shadowed by the model it replaces
        when it can be), ``restored`` (served again: at start, after a rollback), or a
        change of the same version (``retyped``, ``served with its rungs``)."""
        board, name = self.state.board, e.cfg.model
        try:
            model, model_type, path, fits = await self._load(e, stored)
        except (ModelRefused, EdgedError, OSError) as exc:
            log.error("frigate %s: model %r failed to load: %s", e.address, stored.name, exc)
            msg = f"edged stored {stored.name!r} but could not load it: {exc}"
            if how == "promoted":
                board.refused(name, "gating", "load", msg,
                              self.state.registry.find(name) is not None)
            return msg
        if how == "promoted":
            why = await shadow_transfer(self.state, e.address, name, stored.name,
                                        self.state.registry.find(name), model)
            if why is not None:
                await model.close()
                return why
            board.entry(name, stage="promoting", progress=stored.name)
        for m in self.state.registry.replace({name: model}, []):
            self.state.spawn(_retire(m))
        done = await asyncio.to_thread(built, path)  # rungs built before: no new build
        ring = FrameRing(e.cfg.int8_frames) if e.cfg.int8_rung and not done else None
        e.served = _Served(stored, model_type, path, ring, fits=fits)
        if done:
            await asyncio.to_thread(self.rungs.restored, e.address, path, model.variant_names)
        await asyncio.to_thread(self.models(e).served, stored)
        if how in ("promoted", "restored"):
            board.served(name, stored.name, stored.sha256, f"frigate {e.address}", how,
                         fleet=False)
        else:
            board.history(name, version=stored.name, digest=stored.sha256, event=how)
        if how == "promoted":
            board.promoted(name, "frigate")
        return None

    async def _load(self, e: SentEndpoint, stored: StoredModel
                    ) -> tuple[Model, str, Path, tuple[str, ...]]:
        def prepare() -> Any:
            if not self.models(e).verify(stored):
                raise ModelRefused(f"{stored.path} no longer matches its sha256")
            data = stored.path.read_bytes()
            want = e.cfg.model_type or stored.model_type or None
            # unpinned: every type the graph fits, for a header that names another one
            auto = None if e.cfg.model_type else check_model(data)
            checked = auto if auto is not None and want in (None, auto.model_type) else \
                check_model(data, want)
            if auto is not None:
                checked = replace(checked, fits=auto.fits)
            path = stored.path
            if checked.adapted is not None:
                path = stored.path.with_suffix(".serve.onnx")
                if not path.is_file():
                    atomic_write(path, checked.adapted)
            mc = with_rungs(model_config(e.cfg.model, stored.name, path, checked,
                                         e.cfg.input_pixel_format), path)
            return mc, checked.model_type, path, checked.fits

        mc, model_type, path, fits = await asyncio.to_thread(prepare)
        st = self.state
        model = st.registry.create(mc, st.config.server)
        try:
            await model.load(0)
        except Exception:
            await model.close()
            raise
        return model, model_type, path, fits

    async def _retype(self, e: SentEndpoint, model_type: str) -> None:
        """Serve the stored model again decoded as ``model_type`` (and remember it)."""
        async with e.lock:
            if e.served is None:
                return
            stored = replace(e.served.stored, model_type=model_type)
            await asyncio.to_thread(self.models(e).retype, stored, model_type)
            err = await self._switch(e, stored, "retyped")
        if err:
            log.error("frigate %s: could not serve %r as %s: %s", e.address, stored.name,
                      model_type, err)
            if e.served is not None:  # requests naming it get zeros and the warning now
                e.served.fits = tuple(t for t in e.served.fits if t != model_type)
                e.served.retyping = False

    async def _offer_rung(self, e: SentEndpoint) -> str | None:
        """An accepted rung was built: put it on the served model's ladder, in place (the
        fp32 session serves on); served again only when the ladder's top changed (an
        OpenVINO fp32 rung measured faster than the served model)."""
        async with e.lock:
            s = e.served
            if s is None:
                return "the endpoint serves nothing any more"
            # the rungs' files count in the store's quota like the model's own
            over = await asyncio.to_thread(self._rungs_fit, e, s)
            if over:
                return over
            m = self.state.registry.find(e.cfg.model)
            if m is not None:
                mc = await asyncio.to_thread(with_rungs, m.cfg, s.path)
                if m.add_rungs(mc):
                    s.ring = None
                    self.rungs.status(e.address, variants=m.variant_names)
                    return None
            return await self._switch(e, s.stored, "served with its rungs")

    def _rungs_fit(self, e: SentEndpoint, s: _Served) -> str | None:
        """Count the rungs' bytes in the store (evicting older versions for them); when
        they do not fit even so, remove them and say why (blocking)."""
        models = self.models(e)
        models.grew(s.stored)
        over = self.store.over_quota()
        if not over:
            return None
        why = (f"the rungs would put the model store {over} bytes over its quota "
               f"([server] max_store_bytes = {self.store.max_bytes}); they were removed")
        drop_rungs(s.stored.path, why)
        models.grew(s.stored)
        return why

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
            err = await self._switch(e, fb, "restored")
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
            self._keep_frame(e, sent, prepared.feeds)
        return prepared

    def _keep_frame(self, e: SentEndpoint, sent: _Served, feeds: dict[str, np.ndarray]
                    ) -> None:
        """Frames for the INT8 rung; the build starts once the ring is full."""
        assert sent.ring is not None
        if len(feeds) != 1:
            return
        sent.ring.add(next(iter(feeds.values())))
        if sent.ring.full:
            sent.rung_started = True
            self.state.spawn(self._build_rungs(e, sent, sent.ring))

    async def _build_rungs(self, e: SentEndpoint, sent: _Served, ring: FrameRing) -> None:
        """The rung build (``edged.delivery.rung_launcher``); its outcome is also the
        model's ``rungs`` in ``edged status``'s ``delivery``, as a delivered version's."""
        board = self.state.board
        board.entry(e.cfg.model, rungs={"state": "building", "progress": f"{len(ring)} "
                                        "frames Frigate sent"})
        entry = await self.rungs.build(
            e.address, f"frigate {e.address}", sent.path,
            ["edged.protocols.frigate.rung_child", "--model-type", sent.model_type,
             "--color", e.cfg.input_pixel_format], ring.save, len(ring),
            "frames Frigate sent", lambda: self._offer_rung(e))
        board.entry(e.cfg.model, rungs={k: entry.get(k) for k in ("state", "ladder",
                                                                  "progress", "build_s")})


async def _retire(m: Model) -> None:
    """A replaced model finishes what it took, then closes."""
    with contextlib.suppress(Exception):
        await m.drain(5.0)
        await m.close()
