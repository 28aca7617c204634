"""A stored version made a checked candidate: its rungs built, its gate, its shadow.

Why a part of its own: these are the stages between a version in the store and the switch
(``switch``), each a check on this device of a model loaded beside the serving one, and
each refuses (``Refused``) with the stage and the reason; nothing here changes what
serves. What each stage checks is the library's (``edged.delivery.gate``, ``.shadow``,
``.rung_launcher``); here they are run in order, and said on the board.
"""

from __future__ import annotations

import asyncio
import logging

import numpy as np

from edged.config.models import ModelConfig
from edged.delivery.bundle import Manifest
from edged.delivery.download import Refused
from edged.delivery.gate import (
    accuracy_gate,
    check_contract,
    needs_rungs,
    rung_frames,
    version_config,
)
from edged.delivery.rung_launcher import RungLauncher
from edged.delivery.rungs import drop_rungs
from edged.delivery.shadow import refusal, shadow_live
from edged.delivery.store import Version
from edged.model.model import Model
from edged.preprocess.preprocessor import Preprocessor
from edged.server.state import ServerState

log = logging.getLogger("edged.server.delivery")


class Stages:
    """The stages a stored version goes through before it may serve."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        #: versions' rung builds (the same build as a model Frigate sent)
        self.rungs = RungLauncher()

    async def candidate(self, mc: ModelConfig, v: Version, manifest: Manifest) -> Model:
        """``v``'s model, its rungs built (where its ladder wants them), loaded, gated and
        shadowed: ready to switch to. ``Refused`` (and closed) at the first stage it fails."""
        if mc.rollout.build_rungs and needs_rungs(version_config(mc, v, manifest)):
            await self._build_rungs(mc, v, manifest)
        self.state.board.entry(mc.name, stage="gating", candidate=manifest.version,
                               progress=f"{manifest.version} ({v.digest[:12]}): contract, "
                               "accuracy")
        cand = await self._gate(mc, v, manifest)
        try:
            await self._shadow(mc, cand, manifest)
        except BaseException:
            await cand.close()
            raise
        return cand

    async def _build_rungs(self, mc: ModelConfig, v: Version, manifest: Manifest) -> None:
        """The version's rungs, built here from its validation rows by the same build as a
        model Frigate sent (``edged.delivery.rung_child``, nice 19, one core); a build
        that finds none leaves the version with its one variant."""
        st = self.state
        assert st.store is not None
        top = version_config(mc, v, manifest).variants[0]
        st.board.entry(mc.name, stage="building rungs", progress=f"{manifest.version}: INT8 "
                       "(and OpenVINO's where installed) from its validation rows")
        pre = Preprocessor(mc.preprocess) if mc.preprocess else None
        frames = await asyncio.to_thread(rung_frames, mc, v, manifest, pre)
        entry = await self.rungs.build(
            mc.name, f"delivery: model {mc.name} {manifest.version}", top.path,
            ["edged.delivery.rung_child", "--config", str(st.config.file), "--model",
             mc.name], lambda p: np.savez(p, frames=frames), len(frames),
            f"rows of {manifest.validation}")
        await asyncio.to_thread(st.store.refresh, v.digest)
        if st.store.over_quota():
            why = (f"the rungs would put the model store over its quota ([server] "
                   f"max_store_bytes = {st.store.max_bytes}); they were removed")
            await asyncio.to_thread(drop_rungs, top.path, why)
            await asyncio.to_thread(st.store.refresh, v.digest)
            entry = {**entry, "state": "refused", "error": why}
        st.board.entry(mc.name, rungs={k: entry.get(k) for k in ("state", "ladder",
                                                                  "progress", "build_s")})

    async def _gate(self, mc: ModelConfig, v: Version, manifest: Manifest) -> Model:
        """The candidate model, loaded beside the serving one and checked; closed and
        ``Refused`` on any failure."""
        st = self.state
        vc = version_config(mc, v, manifest)
        cand = st.registry.create(vc, st.config.server)
        try:
            try:
                await cand.load(0)
            except Exception as e:
                raise Refused("gating", "load", f"the new version does not load here: "
                              f"{cand.error or e}") from None
            cur = st.registry.find(mc.name)
            if cur is not None and cur.ready:
                check_contract(cur.inputs, cur.outputs, cand.inputs, cand.outputs)
            loaded = cand.live.loaded
            assert loaded is not None
            report = await asyncio.to_thread(accuracy_gate, loaded, cand.preprocessor, v,
                                              manifest, vc.postprocess)
            st.board.entry(mc.name, gate=report)
            log.info("delivery: model %s %s passed the gate: %s", mc.name, manifest.version,
                     report)
            return cand
        except BaseException:
            await cand.close()
            raise

    async def _shadow(self, mc: ModelConfig, cand: Model, manifest: Manifest) -> None:
        """A share of live requests also computed by the candidate (``edged.delivery.
        shadow``) for ``shadow_requests`` rows or ``shadow_s``; refused on its errors, or
        below ``min_agreement`` when one is set (else agreement is only recorded)."""
        ro = mc.rollout
        cur = self.state.registry.find(mc.name)
        loaded = cand.live.loaded
        if ro.shadow_s <= 0 or ro.shadow_requests <= 0 or cur is None or not cur.ready \
                or loaded is None:
            return
        self.state.board.entry(mc.name, stage="shadowing", progress=f"{manifest.version}: "
                               f"{ro.shadow_share:.0%} of live requests, up to "
                               f"{ro.shadow_requests} or {ro.shadow_s:g} s")
        shadow = await shadow_live(cur, loaded, ro.shadow_share, ro.shadow_requests,
                                   ro.shadow_s)
        report = shadow.report()
        self.state.board.entry(mc.name, shadow=report)
        log.info("delivery: model %s %s shadow: %s", mc.name, manifest.version, report)
        why = refusal(shadow, ro.min_agreement)
        if why is not None:
            raise Refused("shadowing", *why)
