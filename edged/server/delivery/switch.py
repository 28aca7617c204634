"""What serves, moved: a checked candidate in (a promotion), or the version before back (a
rollback).

Why a part of its own: these are the only two moves of what a delivered model serves, and
each moves three things together: the registry's pointer (``Registry.replace``), the
governor's throttle and rung (``adopt``), and the store's pointer (written atomically: a
restart serves one whole version), then retires what served before. The stages before
(``stages``) only check; the window after (``watches``) only watches and calls back here.

Why promotion fails no request and makes none wait: it is the standby switch
(``edged.model.standby``) one level up. The new version is a model of its own, opened,
warmed at its batch sizes and checked on this device (the gate, the shadow) beside the
serving one before anything points at it; the switch is one pointer
(``Registry.replace``): requests the old version admitted (queued, computing, or a frame
still being decoded off the event loop) finish there (``Model.drain`` waits for them), new
ones go to the new version, which computes at once, with no load in their path. The
governor's rung follows right after (``adopt``) by a swap that is itself a switch.
(tests/test_delivery.py: four promotions under eight clients' tensors and frames.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from edged.config.models import ModelConfig
from edged.delivery.bundle import BundleRefused, Manifest
from edged.delivery.download import Refused
from edged.delivery.gate import version_config
from edged.delivery.store import Version
from edged.delivery.watch import Readings, read, window
from edged.errors import Unavailable
from edged.model.model import Model
from edged.server.delivery.stored import rollback_target, served, stored_manifest
from edged.server.delivery.watches import Watches
from edged.server.state import ServerState

log = logging.getLogger("edged.server.delivery")


class Switch:
    """Promotion and rollback of a delivered model (the caller holds the model's lock)."""

    def __init__(self, state: ServerState, readings: Readings, watches: Watches,
                 adopt: Callable[[Model, str], None]) -> None:
        self.state = state
        #: one reading a second of each delivered model: a promotion's baseline
        self.readings = readings
        self.watches = watches
        #: a model switched in takes the governor's throttle and rung at once
        self.adopt = adopt

    async def promote(self, mc: ModelConfig, v: Version, manifest: Manifest, cand: Model,
                      by: str, where: str) -> None:
        """``cand`` (version ``v``, through its stages) serves now; its watch window starts
        against the baseline of what served before."""
        st = self.state
        assert st.store is not None
        st.board.entry(mc.name, stage="promoting", progress=f"{manifest.version}")
        now = read(st.metrics, mc.name)
        before = self.readings.since(mc.name, mc.rollout.watch_s)
        baseline = window(before, now) if before is not None else None
        self.watches.stop(mc.name)  # the version it watched is replaced now
        old = st.registry.replace({mc.name: cand}, [])
        for m in old:
            st.spawn(_retire(m, st.config.server.drain_timeout_s))
        self.adopt(cand, f"delivery: {manifest.version} promoted")
        watch = ({"seconds": mc.rollout.watch_s, "restarts": 0,
                  "baseline": baseline.to_json() if baseline else None}
                 if mc.rollout.watch_s > 0 else None)
        await asyncio.to_thread(st.store.promote, mc.name, v.digest, watch)
        served(st, mc.name, v, manifest, "promoted")
        st.board.promoted(mc.name, by)
        log.info("delivery: model %s now serves %s (%s) from %s", mc.name, manifest.version,
                 v.digest[:12], where)
        if watch is not None:
            self.watches.start(mc, v, manifest, baseline, 0)

    async def roll_back(self, mc: ModelConfig, reason: str, automatic: bool
                        ) -> dict[str, Any]:
        """The version before this one (its fallback, else its configured variants) serves
        again; this one is never taken again from its source. Its status entry after."""
        st = self.state
        assert st.store is not None and mc.source is not None
        cur = st.store.serving(mc.name)
        if cur is None:
            raise Unavailable(f"model {mc.name!r} serves no delivered version; nothing to "
                              "roll back")
        fb = st.store.fallback(mc.name)
        target = None
        label = "its configured variants"
        if fb is not None:
            try:
                fb_manifest = stored_manifest(fb)
                target = version_config(mc, fb, fb_manifest)
                label = fb_manifest.version
            except (Refused, BundleRefused, OSError) as e:
                log.error("delivery: model %s: fallback %s unusable: %s", mc.name,
                          fb.digest[:12], e)
        elif mc.variants:
            target = mc
        if target is None:
            raise Unavailable(f"model {mc.name!r} has no version to roll back to")
        st.board.entry(mc.name, stage="rolling back", progress=f"to {label}: {reason}"[:200])
        model = st.registry.create(target, st.config.server)
        try:
            await model.load(0)
        except Exception:
            await model.close()
            raise Unavailable(f"rolling {mc.name!r} back to {label} failed: "
                              f"{model.error}") from None
        for m in st.registry.replace({mc.name: model}, []):
            st.spawn(_retire(m, st.config.server.drain_timeout_s))
        self.adopt(model, "delivery: rolled back")
        # an operator's rollback keeps the version it left as the rollback target
        await asyncio.to_thread(st.store.demote, mc.name, cur.digest, reason, True,
                                mc.source.url, not automatic)
        kind = "automatic" if automatic else "operator"
        log.warning("delivery: model %s rolled back from %s to %s (%s): %s; %s is never "
                    "taken again from %s", mc.name, cur.name, label, kind, reason,
                    cur.name, mc.source.url)
        st.board.rolled_back(mc.name, cur.name, cur.digest, reason, kind, automatic)
        if fb is not None and target is not mc:
            served(st, mc.name, fb, stored_manifest(fb), "restored")
        else:
            st.board.unserved(mc.name, "serving its configured variants")
            st.board.entry(mc.name, rollback_target=rollback_target(st, mc.name))
        return st.board.entries[mc.name]


async def _retire(m: Model, timeout: float) -> None:
    """A replaced version finishes what it took, then closes."""
    with contextlib.suppress(Exception):
        await m.drain(timeout)
        await m.close()
