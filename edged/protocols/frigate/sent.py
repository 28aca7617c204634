"""The models Frigate sends to ``accept_models`` endpoints: stored, loaded, served, laddered.

Why apart from the handshake room: this is the one place that turns bytes from a socket into
a served model. It checks them (``edged.protocols.frigate.model_check``: onnx parse, no
external data, onnx.checker, the ``model_type``'s layout), stores them content-addressed
(``edged.protocols.frigate.store``), loads them as the model ``frigate@ENDPOINT`` beside the
configured ones, switches to a new one only when the bytes changed, serves the stored model
again after a restart, and keeps the frames Frigate sent for its INT8 rung
(``frigate_rungs``). One lock per endpoint: two Frigate detectors sending the same model at
once store and load it once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from edged.config.frigate import FrigateConfig
from edged.config.layouts import normalize_type
from edged.errors import EdgedError, InvalidArgument, Unavailable
from edged.model.contract import Prepared
from edged.model.model import Model
from edged.model.request import InputMeta, Request
from edged.protocols.frigate.model_check import ModelRefused, check_model, model_config
from edged.protocols.frigate.rung_builds import RungBuilds
from edged.protocols.frigate.rungs import FrameRing, built, with_rungs
from edged.protocols.frigate.store import ModelStore, StoredModel, atomic_write, default_state_dir
from edged.protocols.frigate.wire import FrigateRequest, data_answer, request_answer
from edged.protocols.serving import Serving
from edged.protocols.sockets import is_local

log = logging.getLogger("edged.frigate")


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


def log_once(logged: set[str], address: str, name: str, what: str) -> None:
    if name not in logged:
        logged.add(name)
        log.info("frigate %s: Frigate's model %r is served by %s", address, name, what)


class SentModels:
    def __init__(self, state: Serving) -> None:
        self.state = state
        self._store: ModelStore | None = None
        self.rungs = RungBuilds(state)

    @property
    def store(self) -> ModelStore:
        if self._store is None:
            # beside, never inside, the installed artifacts of /var/lib/edged/models
            root = (self.state.config.server.state_dir or default_state_dir()) / "frigate"
            self._store = ModelStore(root)
            log.info("frigate model store %s", root)
        return self._store

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
            stored = await asyncio.to_thread(self.store.get, name)
            if stored is None:
                refused = self.transfer_refused(e)
                return request_answer(name, False, False, refused or (
                    f"edged has no model {name!r} yet; send it (Frigate does so itself)"))
            err = await self._serve(e, stored)
        if err:
            return request_answer(name, True, False, err)
        return self._ready(e, name, request_answer, True)

    async def receive(self, e: SentEndpoint, name: str, data: Any) -> dict[str, Any]:
        """``model_data``: check, store, load and answer ``model_saved``/``model_loaded``."""
        refused = self.transfer_refused(e)
        if refused:
            return data_answer(name, False, False, refused)
        size, limit = len(data), e.cfg.max_model_bytes
        if size > limit:
            return data_answer(name, False, False, f"the model file is {size} bytes; this "
                               f"endpoint takes at most {limit} (max_model_bytes)")
        blob = memoryview(data).tobytes()
        async with e.lock:
            try:
                checked = await asyncio.to_thread(check_model, blob, e.cfg.model_type)
            except ModelRefused as exc:
                log.warning("frigate %s: model %r refused: %s", e.address, name, exc)
                return data_answer(name, False, False, f"edged refused {name!r}: {exc}")
            stored = await asyncio.to_thread(self.store.put, name, blob, checked.model_type)
            log.info("frigate %s: stored model %r (%s, %d bytes, sha256 %s)", e.address, name,
                     checked.model_type, size, stored.sha256[:12])
            err = await self._serve(e, stored)
        if err:
            return data_answer(name, True, False, err)
        return self._ready(e, name, data_answer, True)

    def _serving(self, e: SentEndpoint, name: str) -> bool:
        m = self.state.registry.find(e.cfg.model)
        return (e.served is not None and e.served.stored.name == name and m is not None
                and m.ready)

    def _ready(self, e: SentEndpoint, name: str, answer: Any, flag: bool) -> dict[str, Any]:
        assert e.served is not None
        s = e.served
        log_once(e.logged, e.address, name, f"the model Frigate sent ({s.model_type}, sha256 "
                 f"{s.stored.sha256[:12]}) as edged model {e.cfg.model!r}")
        return answer(name, flag, True, f"served by edged as {e.cfg.model!r} ({s.model_type})")

    # -- loading and switching ------------------------------------------------------------
    async def preload(self, e: SentEndpoint) -> None:
        """At start: serve what this endpoint served before the restart."""
        try:
            stored = await asyncio.to_thread(self.store.last_for, e.address)
        except OSError as exc:
            log.error("frigate %s: model store unreadable: %s", e.address, exc)
            return
        if stored is None:
            return
        async with e.lock:
            if e.served is None and await self._serve(e, stored) is None:
                log.info("frigate %s: serving stored model %r again", e.address, stored.name)

    async def _serve(self, e: SentEndpoint, stored: StoredModel) -> str | None:
        """Serve ``stored`` on the endpoint (no reload for the same bytes); None, or why not."""
        if (e.served is not None and e.served.stored.sha256 == stored.sha256
                and self._serving(e, e.served.stored.name)):
            e.served.stored = stored  # the same bytes under a new name
            await asyncio.to_thread(self.store.served_by, e.address, stored.name)
            return None
        return await self._switch(e, stored)

    async def _switch(self, e: SentEndpoint, stored: StoredModel) -> str | None:
        """Load ``stored`` (with its INT8 rung if it has an accepted one) and switch."""
        try:
            model, model_type, path, fits = await self._load(e, stored)
        except (ModelRefused, EdgedError, OSError) as exc:
            log.error("frigate %s: model %r failed to load: %s", e.address, stored.name, exc)
            return f"edged stored {stored.name!r} but could not load it: {exc}"
        for m in self.state.registry.replace({e.cfg.model: model}, []):
            self.state.spawn(_retire(m))
        done = await asyncio.to_thread(built, path)  # rungs built before: no new build
        ring = FrameRing(e.cfg.int8_frames) if e.cfg.int8_rung and not done else None
        e.served = _Served(stored, model_type, path, ring, fits=fits)
        if done:
            await asyncio.to_thread(self.rungs.restored, e.address, path, model.variant_names)
        await asyncio.to_thread(self.store.served_by, e.address, stored.name)
        return None

    async def _load(self, e: SentEndpoint, stored: StoredModel
                    ) -> tuple[Model, str, Path, tuple[str, ...]]:
        def prepare() -> Any:
            if not self.store.verify(stored):
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
            await asyncio.to_thread(self.store.retype, stored.name, model_type)
            err = await self._switch(e, stored)
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
            m = self.state.registry.find(e.cfg.model)
            if m is not None:
                mc = await asyncio.to_thread(with_rungs, m.cfg, s.path)
                if m.add_rungs(mc):
                    s.ring = None
                    self.rungs.status(e.address, variants=m.variant_names)
                    return None
            return await self._switch(e, s.stored)

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
            self.state.spawn(self.rungs.build(e.address, sent.path, sent.model_type,
                                              e.cfg.input_pixel_format, sent.ring,
                                              lambda: self._offer_rung(e)))


async def _retire(m: Model) -> None:
    """A replaced model finishes what it took, then closes."""
    with contextlib.suppress(Exception):
        await m.drain(5.0)
        await m.close()
