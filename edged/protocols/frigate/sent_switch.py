"""The one writer of what an ``accept_models`` endpoint serves: load a stored version, switch.

Why apart from the transfer and the handshake (``edged.protocols.frigate.sent``): every road
that changes the model ``frigate@ENDPOINT`` goes through ``SentSwitch.switch`` (a transfer
*promoted*, the stored model *restored* at start or after a rollback, *retyped* by a
header, *served with its rungs*), so each is loaded the same way (its file checked against
its sha256 and its ``model_type``'s layout again, the adapted graph written once, its
accepted rungs on its ladder), gated by its load, shadowed when it is promoted
(``edged.protocols.frigate.rollout``), switched in the registry, recorded in the store (what
serves after a restart) and said on ``edged.delivery.board``. The same bytes again are no
reload.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from edged.delivery.atomic import atomic_write
from edged.delivery.rung_launcher import RungLauncher
from edged.delivery.rungs import FrameRing, built, with_rungs
from edged.errors import EdgedError
from edged.model.model import Model
from edged.protocols.frigate.model_check import ModelRefused, check_model, model_config
from edged.protocols.frigate.rollout import shadow_transfer
from edged.protocols.frigate.sent_endpoint import SentEndpoint, ServedModel
from edged.protocols.frigate.store import FrigateModels, StoredModel
from edged.protocols.serving import Serving

log = logging.getLogger("edged.protocols.frigate")


class SentSwitch:
    """Loads a stored version and makes it what the endpoint serves."""

    def __init__(self, state: Serving, models: Callable[[SentEndpoint], FrigateModels],
                 launcher: RungLauncher) -> None:
        self.state = state
        #: the endpoint's versions in the store
        self.models = models
        #: told when a version comes back with rungs built before (no new build)
        self.launcher = launcher

    def serving(self, e: SentEndpoint, name: str) -> bool:
        """The endpoint serves the model sent as ``name`` now, and it is ready."""
        m = self.state.registry.find(e.cfg.model)
        return (e.served is not None and e.served.stored.name == name and m is not None
                and m.ready)

    async def serve(self, e: SentEndpoint, stored: StoredModel,
                    how: str = "restored") -> str | None:
        """Serve ``stored`` on the endpoint (no reload for the same bytes); None, or why not."""
        if (e.served is not None and e.served.stored.sha256 == stored.sha256
                and self.serving(e, e.served.stored.name)):
            e.served.stored = stored  # the same bytes under a new name
            await asyncio.to_thread(self.models(e).served, stored)
            return None
        return await self.switch(e, stored, how)

    async def switch(self, e: SentEndpoint, stored: StoredModel, how: str) -> str | None:
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
        e.served = ServedModel(stored, model_type, path, ring, fits=fits)
        if done:
            await asyncio.to_thread(self.launcher.restored, e.address, path,
                                    model.variant_names)
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


async def _retire(m: Model) -> None:
    """A replaced model finishes what it took, then closes."""
    with contextlib.suppress(Exception):
        await m.drain(5.0)
        await m.close()
