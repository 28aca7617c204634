"""The watch window after a promotion: a background check that rolls a regression back.

Why a part of its own: a window outlives the promotion that started it (it is a task of
its own, one per model, for ``watch_s``), is stopped by the next switch, and outlives the
process too: its pointer and baseline are in the store, so a restart starts it again.
What it judges is the library's (``edged.delivery.watch``); here it is run, resumed and
stopped.

A daemon stopped (or killed) while a version was in its watch window restarts on that
version (its pointer was written at promotion) and watches it again for a *whole* window,
not what was left of it: the requests seen before the stop were counted in the stopped
process and died with it, so the rest of the window alone would judge the version on fewer
requests than ``watch_s`` was set for, and a stop during a watch is a reason to look again,
not less. The previous version's baseline (its p99 at its load before the promotion) is
kept in the store with the pointer, so the p99 rule still has something to compare with.
The restarts are counted and shown (``watch.restarts``). A pull while a version is watched
does not end its watch unless the pulled version replaces it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from edged.config.models import ModelConfig
from edged.delivery.bundle import BundleRefused, Manifest
from edged.delivery.store import Version
from edged.delivery.watch import Window, judge, read, window
from edged.server.delivery.stored import stored_manifest
from edged.server.state import ServerState

log = logging.getLogger("edged.server.delivery")


class Watches:
    """Each delivered model's watch window, while one runs."""

    def __init__(self, state: ServerState,
                 rollback: Callable[..., Awaitable[dict[str, Any]]]) -> None:
        self.state = state
        #: ``Deliveries.rollback``: what a regression calls (``automatic=True``)
        self._rollback = rollback
        self._watching: dict[str, asyncio.Task[Any]] = {}

    def start(self, mc: ModelConfig, v: Version, manifest: Manifest,
              baseline: Window | None, restarts: int) -> None:
        self.state.board.entry(mc.name, stage="watching", watch={
            "version": manifest.version, "seconds": mc.rollout.watch_s, "restarts": restarts,
            "baseline": baseline.to_json() if baseline else None})
        self._watching[mc.name] = asyncio.get_running_loop().create_task(
            self._watch(mc, v, manifest, baseline))

    async def resume(self, models: list[ModelConfig]) -> None:
        """At start, once the models loaded and before the daemon is READY (so its first
        status says so): each delivered model serving a version its store still has in a
        watch window is watched again, for a whole window (the module's docstring says
        why), against the baseline kept with the pointer."""
        store = self.state.store
        if store is None:
            return
        for mc in models:
            pending = store.watch(mc.name)
            v = store.serving(mc.name)
            if pending is None or v is None:
                continue
            if (self.state.board.entries.get(mc.name) or {}).get("digest") != v.digest \
                    or mc.rollout.watch_s <= 0:
                # it does not serve (its fallback does), or the config no longer watches
                await asyncio.to_thread(store.set_watch, mc.name, v.digest, None)
                continue
            restarts = int(pending.get("restarts") or 0) + 1
            baseline = Window.from_json(pending.get("baseline"))
            await asyncio.to_thread(store.set_watch, mc.name, v.digest,
                                    {**pending, "restarts": restarts})
            try:
                manifest = stored_manifest(v)
            except (BundleRefused, OSError) as e:
                log.error("delivery: model %s: cannot watch %s again: %s", mc.name, v.name, e)
                continue
            log.warning("delivery: model %s %s was in its watch window when the daemon "
                        "stopped; watching it again for %g s (restart %d of its window)",
                        mc.name, manifest.version, mc.rollout.watch_s, restarts)
            self.state.board.history(mc.name, version=manifest.version, digest=v.digest,
                                     event="watched again after a restart")
            self.start(mc, v, manifest, baseline, restarts)

    def stop(self, name: str) -> None:
        t = self._watching.pop(name, None)
        if t is not None and not t.done() and t is not asyncio.current_task():
            t.cancel()

    async def _watch(self, mc: ModelConfig, v: Version, manifest: Manifest,
                     baseline: Window | None) -> None:
        """The watch window: roll back by itself on a regression (``edged.delivery.
        watch``); when it passes, the store forgets the window."""
        st = self.state
        assert st.store is not None
        start = read(st.metrics, mc.name)
        end = start.at + mc.rollout.watch_s
        while True:
            await asyncio.sleep(1.0)
            w = window(start, read(st.metrics, mc.name))
            st.board.entry(mc.name, watch={**(st.board.entries[mc.name].get("watch") or {}),
                                           "watched": w.to_json()})
            why = judge(w, baseline, mc.rollout)
            if why is not None:
                log.error("delivery: model %s %s regressed in its watch window: %s; rolling "
                          "back", mc.name, manifest.version, why)
                await self._rollback(mc.name, why, automatic=True)
                return
            if time.monotonic() >= end:
                break
        await asyncio.to_thread(st.store.set_watch, mc.name, v.digest, None)
        st.board.entry(mc.name, stage="serving", progress=f"{manifest.version} passed its "
                       f"{mc.rollout.watch_s:g} s watch window")
        st.board.history(mc.name, version=manifest.version, digest=v.digest, event="watched")
        log.info("delivery: model %s %s passed its watch window (%s)", mc.name,
                 manifest.version, w.to_json())
