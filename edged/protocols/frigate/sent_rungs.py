"""The rungs of a model Frigate sent, built in the background from the frames it is then sent.

Why apart from serving it: Frigate sends no validation set, so a sent model's rungs
(``frigate_rungs``) are calibrated and checked on the frames Frigate sends once it serves.
This keeps them (``int8_frames`` of them, in a ``FrameRing``), starts the build once the
ring is full (``edged.delivery.rung_launcher``: a child process at the lowest priority,
``edged.protocols.frigate.rung_child``), counts the rungs' files in the store's quota and
puts the ladder it accepted on the served model. It never decides what serves: when the
ladder's top changed, the version is served again through
``edged.protocols.frigate.sent_switch``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np

from edged.delivery.rung_launcher import RungLauncher
from edged.delivery.rungs import FrameRing, drop_rungs, with_rungs
from edged.protocols.frigate.sent_endpoint import SentEndpoint, ServedModel
from edged.protocols.frigate.sent_switch import SentSwitch
from edged.protocols.frigate.store import FrigateModels
from edged.protocols.serving import Serving


class SentRungs:
    """Frames kept for a sent model's rungs, their build, and the ladder offered."""

    def __init__(self, state: Serving, models: Callable[[SentEndpoint], FrigateModels],
                 launcher: RungLauncher, switch: SentSwitch) -> None:
        self.state = state
        #: the endpoint's versions in the store
        self.models = models
        self.launcher = launcher
        self.switch = switch

    def keep_frame(self, e: SentEndpoint, sent: ServedModel, feeds: dict[str, np.ndarray]
                   ) -> None:
        """Frames for the INT8 rung; the build starts once the ring is full."""
        assert sent.ring is not None
        if len(feeds) != 1:
            return
        sent.ring.add(next(iter(feeds.values())))
        if sent.ring.full:
            sent.rung_started = True
            self.state.spawn(self._build(e, sent, sent.ring))

    async def _build(self, e: SentEndpoint, sent: ServedModel, ring: FrameRing) -> None:
        """The rung build (``edged.delivery.rung_launcher``); its outcome is also the
        model's ``rungs`` in ``edged status``'s ``delivery``, as a delivered version's."""
        board = self.state.board
        board.entry(e.cfg.model, rungs={"state": "building", "progress": f"{len(ring)} "
                                        "frames Frigate sent"})
        entry = await self.launcher.build(
            e.address, f"frigate {e.address}", sent.path,
            ["edged.protocols.frigate.rung_child", "--model-type", sent.model_type,
             "--color", e.cfg.input_pixel_format], ring.save, len(ring),
            "frames Frigate sent", lambda: self._offer(e))
        board.entry(e.cfg.model, rungs={k: entry.get(k) for k in ("state", "ladder",
                                                                  "progress", "build_s")})

    async def _offer(self, e: SentEndpoint) -> str | None:
        """An accepted rung was built: put it on the served model's ladder, in place (the
        fp32 session serves on); served again only when the ladder's top changed (an
        OpenVINO fp32 rung measured faster than the served model)."""
        async with e.lock:
            s = e.served
            if s is None:
                return "the endpoint serves nothing any more"
            # the rungs' files count in the store's quota like the model's own
            over = await asyncio.to_thread(self._fit, e, s)
            if over:
                return over
            m = self.state.registry.find(e.cfg.model)
            if m is not None:
                mc = await asyncio.to_thread(with_rungs, m.cfg, s.path)
                if m.add_rungs(mc):
                    s.ring = None
                    self.launcher.status(e.address, variants=m.variant_names)
                    return None
            return await self.switch.switch(e, s.stored, "served with its rungs")

    def _fit(self, e: SentEndpoint, s: ServedModel) -> str | None:
        """Count the rungs' bytes in the store (evicting older versions for them); when
        they do not fit even so, remove them and say why (blocking)."""
        models = self.models(e)
        models.grew(s.stored)
        store = models.store
        over = store.over_quota()
        if not over:
            return None
        why = (f"the rungs would put the model store {over} bytes over its quota "
               f"([server] max_store_bytes = {store.max_bytes}); they were removed")
        drop_rungs(s.stored.path, why)
        models.grew(s.stored)
        return why
