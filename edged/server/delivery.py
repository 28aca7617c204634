"""New model versions while the daemon serves: poll, pull, check, switch, and say so.

Why in the server: this is the one writer of "which version of a delivered model serves".
For every model with a ``[models.source]`` it looks at the source every ``poll_s`` (and on
``edged ctl pull MODEL [VERSION]``), and takes a version through the stages of
docs/delivery.md, each the library's (``edged.delivery``): *downloading* and *verifying*
(signature first, each file against it, into the store), *gating* (the version's model
loaded beside the serving one, its contract against what clients send, its accuracy on its
own validation set on this device), *promoting* (the registry switches to it: requests
taken by the old version finish there, new ones go to the new; none fails), and the store's
serving pointer is written (atomically: a restart serves one whole version). Every stage,
refusal and reason is in ``edged status`` (``delivery``), the log and the metrics
(``edged_model_updates_total{model,outcome,reason}``, ``edged_model_version_info``).

Why promotion fails no request and makes none wait: it is the standby switch
(``edged.model.standby``) one level up. The new version is a model of its own, opened,
warmed at its batch sizes and checked on this device (the gate, the shadow) beside the
serving one before anything points at it; the switch is one pointer
(``Registry.replace``): requests the old version admitted (queued, computing, or a frame
still being decoded off the event loop) finish there (``Model.drain`` waits for them), new
ones go to the new version, which computes at once, with no load in their path. The
governor's rung follows right after (``adopt``) by a swap that is itself a switch.
(tests/test_delivery.py: four promotions under eight clients' tensors and frames.)

At start a delivered model serves the version its pointer names (else its fallback, else
the configured variants), without gates: they passed before it was promoted.

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
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from edged.config.models import ModelConfig
from edged.delivery.bundle import MANIFEST, BundleRefused, Manifest, read_manifest
from edged.delivery.download import Refused, fetch
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
from edged.delivery.sources import SourceError, open_source
from edged.delivery.store import Version
from edged.delivery.trust import Trust
from edged.delivery.watch import Readings, Window, judge, read, window
from edged.errors import NotFound, Unavailable
from edged.model.model import Model
from edged.preprocess.preprocessor import Preprocessor
from edged.server.state import ServerState

log = logging.getLogger("edged.server.delivery")

#: the first look at a source after start (the daemon is READY first)
FIRST_POLL_S = 1.0


class Deliveries:
    def __init__(self, state: ServerState) -> None:
        self.state = state
        self._locks: dict[str, asyncio.Lock] = {}
        #: one reading a second of each delivered model (the watch's baselines)
        self.readings = Readings()
        #: versions' rung builds (the same build as a model Frigate sent)
        self.rungs = RungLauncher()
        self._watching: dict[str, asyncio.Task[Any]] = {}
        #: a model switched in takes the governor's throttle and rung at once
        #: (``Governing.adopt``, set by the lifecycle)
        self.adopt: Callable[[Model, str], None] = lambda m, reason: None

    # -- which models, and what they serve at start --------------------------------------
    def delivered(self) -> list[ModelConfig]:
        return [m for m in self.state.config.models if m.source is not None]

    def startup_models(self, models: list[ModelConfig]) -> list[ModelConfig]:
        """The models to load at start: a delivered model as the version its pointer names
        (else its fallback, else its configured variants; with none, it waits for one)."""
        out = []
        for m in models:
            if m.source is None:
                out.append(m)
                continue
            self._warn_unsigned(m)
            stored = self._stored_config(m)
            if stored is not None:
                out.append(stored)
            elif m.variants:
                self._entry(m.name, version=None, source=m.source.url,
                            stage="serving its configured variants")
                out.append(m)
            else:
                self._entry(m.name, version=None, source=m.source.url,
                            stage=f"waiting for a first version from {m.source.url}")
        return out

    def current_config(self, m: ModelConfig) -> ModelConfig | None:
        """The config model ``m`` loads with now (a reload): a delivered model's serving
        version, else its configured variants, else None (it waits for a version)."""
        if m.source is None:
            return m
        stored = self._stored_config(m, quiet=True)
        return stored if stored is not None else (m if m.variants else None)

    def _warn_unsigned(self, m: ModelConfig) -> None:
        assert m.source is not None
        if m.source.allow_unsigned:
            log.warning("UNSIGNED versions: model %s takes versions from %s without a "
                        "signature (allow_unsigned = true); anyone who can write there "
                        "decides what this device runs", m.name, m.source.url)

    def _stored_config(self, m: ModelConfig, quiet: bool = False) -> ModelConfig | None:
        store = self.state.store
        if store is None:
            return None
        for v in (store.serving(m.name), store.fallback(m.name)):
            if v is None:
                continue
            try:
                manifest = _manifest(v)
                mc = version_config(m, v, manifest)
            except (Refused, BundleRefused, OSError) as e:
                log.error("delivery: model %s: stored version %s cannot serve: %s", m.name,
                          v.digest[:12], e)
                continue
            if v.digest != (store.serving(m.name) or v).digest:
                log.warning("delivery: model %s serves its fallback %s", m.name, v.name)
            if not quiet:
                self._served(m.name, v, manifest, "restored")
            return mc
        return None

    # -- the loop and the operator's pull ----------------------------------------------
    async def loop(self) -> None:
        """Poll every delivered model's source at its ``poll_s`` (0: never by itself)."""
        due: dict[str, float] = {m.name: time.monotonic() + FIRST_POLL_S
                                 for m in self.delivered() if m.source and m.source.poll_s}
        next_reading = 0.0
        while True:
            now = time.monotonic()
            if now >= next_reading:
                next_reading = now + 1.0
                for m in self.delivered():
                    self.readings.add(m.name, read(self.state.metrics, m.name))
            for m in self.delivered():
                if m.source is None or not m.source.poll_s:
                    continue
                when = due.setdefault(m.name, now + FIRST_POLL_S)
                if now >= when:
                    due[m.name] = now + m.source.poll_s
                    self.state.spawn(self._quiet(self.update(m.name, None, "poll")))
            await asyncio.sleep(0.5)

    async def _quiet(self, coro: Any) -> None:
        with contextlib.suppress(Exception):
            await coro

    async def update(self, name: str, version: str | None, by: str) -> dict[str, Any]:
        """Take ``version`` (None: the source's current one) of model ``name`` through the
        stages; the model's status entry afterwards."""
        mc = self.state.config.model(name)
        if mc is None or mc.source is None:
            raise NotFound(f"model {name!r} has no [models.source] in "
                           f"{self.state.config.file}")
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            try:
                await self._update(mc, version, by)
            except Refused as e:
                self._refused(name, e)
            except Exception as e:  # a bug is a refusal too, never the daemon
                log.exception("delivery: model %s: update failed", name)
                self._refused(name, Refused("failed", "internal", f"{type(e).__name__}: {e}"))
        return self.entries.get(name, {})

    async def _update(self, mc: ModelConfig, version: str | None, by: str) -> None:
        st = self.state
        assert mc.source is not None and st.store is not None
        src = mc.source
        try:
            source = open_source(src.url, insecure=src.insecure)
        except SourceError as e:
            raise Refused("downloading", "source", str(e)) from None
        trust = Trust(src.public_key, src.certificate_chain, src.allow_unsigned)

        def say(stage: str, msg: str) -> None:
            self._entry(mc.name, stage=stage, progress=msg[:200])

        self._entry(mc.name, stage="downloading", progress=f"{src.url} ({by})",
                    candidate=version)
        fetched = await asyncio.to_thread(fetch, source, trust, st.store, mc.name, version,
                                          src.max_bytes, say)
        v, manifest = fetched.version, fetched.manifest
        serving = st.store.serving(mc.name)
        if serving is not None and serving.digest == v.digest:
            self._entry(mc.name, stage="serving", progress=f"{manifest.version} is the "
                        "version serving", candidate=None)
            return
        await self._take(mc, v, manifest, by, fetched.ref.where)

    async def _take(self, mc: ModelConfig, v: Version, manifest: Manifest, by: str,
                    where: str) -> None:
        """A stored version through the gate, the switch and into the watch window (never
        evicted meanwhile)."""
        assert self.state.store is not None
        with self.state.store.hold(v.digest):
            await self._stages(mc, v, manifest, by, where)

    async def _stages(self, mc: ModelConfig, v: Version, manifest: Manifest, by: str,
                      where: str) -> None:
        st = self.state
        assert st.store is not None
        if mc.rollout.build_rungs and needs_rungs(version_config(mc, v, manifest)):
            await self._build_rungs(mc, v, manifest)
        self._entry(mc.name, stage="gating", candidate=manifest.version,
                    progress=f"{manifest.version} ({v.digest[:12]}): contract, accuracy")
        cand = await self._gate(mc, v, manifest)
        try:
            await self._shadow(mc, cand, manifest)
        except BaseException:
            await cand.close()
            raise
        self._entry(mc.name, stage="promoting", progress=f"{manifest.version}")
        now = read(st.metrics, mc.name)
        before = self.readings.since(mc.name, mc.rollout.watch_s)
        baseline = window(before, now) if before is not None else None
        self._stop_watch(mc.name)  # the version it watched is replaced now
        old = st.registry.replace({mc.name: cand}, [])
        for m in old:
            st.spawn(_retire(m, st.config.server.drain_timeout_s))
        self.adopt(cand, f"delivery: {manifest.version} promoted")
        watch = ({"seconds": mc.rollout.watch_s, "restarts": 0,
                  "baseline": baseline.to_json() if baseline else None}
                 if mc.rollout.watch_s > 0 else None)
        await asyncio.to_thread(st.store.promote, mc.name, v.digest, watch)
        self._served(mc.name, v, manifest, "promoted")
        st.board.promoted(mc.name, by)
        log.info("delivery: model %s now serves %s (%s) from %s", mc.name, manifest.version,
                 v.digest[:12], where)
        if watch is not None:
            self._start_watch(mc, v, manifest, baseline, 0)

    def _start_watch(self, mc: ModelConfig, v: Version, manifest: Manifest,
                     baseline: Window | None, restarts: int) -> None:
        self._entry(mc.name, stage="watching", watch={
            "version": manifest.version, "seconds": mc.rollout.watch_s, "restarts": restarts,
            "baseline": baseline.to_json() if baseline else None})
        self._watching[mc.name] = asyncio.get_running_loop().create_task(
            self._watch(mc, v, manifest, baseline))

    async def resume_watches(self) -> None:
        """At start, once the models loaded and before the daemon is READY (so its first
        status says so): each delivered model serving a version its store still has in a
        watch window is watched again, for a whole window (the module's docstring says
        why), against the baseline kept with the pointer."""
        store = self.state.store
        if store is None:
            return
        for mc in self.delivered():
            pending = store.watch(mc.name)
            v = store.serving(mc.name)
            if pending is None or v is None:
                continue
            if (self.entries.get(mc.name) or {}).get("digest") != v.digest \
                    or mc.rollout.watch_s <= 0:
                # it does not serve (its fallback does), or the config no longer watches
                await asyncio.to_thread(store.set_watch, mc.name, v.digest, None)
                continue
            restarts = int(pending.get("restarts") or 0) + 1
            baseline = Window.from_json(pending.get("baseline"))
            await asyncio.to_thread(store.set_watch, mc.name, v.digest,
                                    {**pending, "restarts": restarts})
            try:
                manifest = _manifest(v)
            except (BundleRefused, OSError) as e:
                log.error("delivery: model %s: cannot watch %s again: %s", mc.name, v.name, e)
                continue
            log.warning("delivery: model %s %s was in its watch window when the daemon "
                        "stopped; watching it again for %g s (restart %d of its window)",
                        mc.name, manifest.version, mc.rollout.watch_s, restarts)
            self._history(mc.name, version=manifest.version, digest=v.digest,
                          event="watched again after a restart")
            self._start_watch(mc, v, manifest, baseline, restarts)

    async def _build_rungs(self, mc: ModelConfig, v: Version, manifest: Manifest) -> None:
        """The version's rungs, built here from its validation rows by the same build as a
        model Frigate sent (``edged.delivery.rung_child``, nice 19, one core); a build
        that finds none leaves the version with its one variant."""
        st = self.state
        assert st.store is not None
        top = version_config(mc, v, manifest).variants[0]
        self._entry(mc.name, stage="building rungs", progress=f"{manifest.version}: INT8 "
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
        self._entry(mc.name, rungs={k: entry.get(k) for k in ("state", "ladder", "progress",
                                                              "build_s")})

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
        self._entry(mc.name, stage="shadowing", progress=f"{manifest.version}: "
                    f"{ro.shadow_share:.0%} of live requests, up to {ro.shadow_requests} "
                    f"or {ro.shadow_s:g} s")
        shadow = await shadow_live(cur, loaded, ro.shadow_share, ro.shadow_requests,
                                   ro.shadow_s)
        report = shadow.report()
        self._entry(mc.name, shadow=report)
        log.info("delivery: model %s %s shadow: %s", mc.name, manifest.version, report)
        why = refusal(shadow, ro.min_agreement)
        if why is not None:
            raise Refused("shadowing", *why)

    def _stop_watch(self, name: str) -> None:
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
            self._entry(mc.name, watch={**(self.entries[mc.name].get("watch") or {}),
                                        "watched": w.to_json()})
            why = judge(w, baseline, mc.rollout)
            if why is not None:
                log.error("delivery: model %s %s regressed in its watch window: %s; rolling "
                          "back", mc.name, manifest.version, why)
                await self.rollback(mc.name, why, automatic=True)
                return
            if time.monotonic() >= end:
                break
        await asyncio.to_thread(st.store.set_watch, mc.name, v.digest, None)
        self._entry(mc.name, stage="serving", progress=f"{manifest.version} passed its "
                    f"{mc.rollout.watch_s:g} s watch window")
        self._history(mc.name, version=manifest.version, digest=v.digest, event="watched")
        log.info("delivery: model %s %s passed its watch window (%s)", mc.name,
                 manifest.version, w.to_json())

    async def rollback(self, name: str, reason: str, automatic: bool = False
                       ) -> dict[str, Any]:
        """Serve the version before this one again; this one is never taken again from
        its source. ``edged ctl rollback MODEL`` and the watch window call it."""
        mc = self.state.config.model(name)
        if mc is None or mc.source is None:
            raise NotFound(f"model {name!r} has no [models.source] in "
                           f"{self.state.config.file}")
        if not automatic:
            self._stop_watch(name)
        async with self._locks.setdefault(name, asyncio.Lock()):
            return await self._rollback(mc, reason, automatic)

    async def _rollback(self, mc: ModelConfig, reason: str, automatic: bool
                        ) -> dict[str, Any]:
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
                fb_manifest = _manifest(fb)
                target = version_config(mc, fb, fb_manifest)
                label = fb_manifest.version
            except (Refused, BundleRefused, OSError) as e:
                log.error("delivery: model %s: fallback %s unusable: %s", mc.name,
                          fb.digest[:12], e)
        elif mc.variants:
            target = mc
        if target is None:
            raise Unavailable(f"model {mc.name!r} has no version to roll back to")
        self._entry(mc.name, stage="rolling back", progress=f"to {label}: {reason}"[:200])
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
        await asyncio.to_thread(st.store.demote, mc.name, cur.digest, reason, True,
                                mc.source.url)
        kind = "automatic" if automatic else "operator"
        log.warning("delivery: model %s rolled back from %s to %s (%s): %s; %s is never "
                    "taken again from %s", mc.name, cur.name, label, kind, reason,
                    cur.name, mc.source.url)
        st.board.rolled_back(mc.name, cur.name, cur.digest, reason, kind, automatic)
        if fb is not None and target is not mc:
            self._served(mc.name, fb, _manifest(fb), "restored")
        else:
            st.board.unserved(mc.name, "serving its configured variants")
        return self.entries[mc.name]

    async def promote(self, name: str, version: str) -> dict[str, Any]:
        """``edged ctl promote MODEL VERSION``: a stored version (else pulled) through
        the gate and the switch, by hand."""
        mc = self.state.config.model(name)
        if mc is None or mc.source is None:
            raise NotFound(f"model {name!r} has no [models.source] in "
                           f"{self.state.config.file}")
        st = self.state
        assert st.store is not None
        v = st.store.find(name, version)
        if v is None:
            return await self.update(name, version, "operator")
        async with self._locks.setdefault(name, asyncio.Lock()):
            try:
                why = st.store.never_again(name, v.digest)
                if why:
                    raise Refused("verifying", "rolled_back", f"{name} {version} was rolled "
                                  f"back here before ({why})")
                await self._take(mc, v, _manifest(v), "operator", str(v.path))
            except Refused as e:
                self._refused(name, e)
        return self.entries.get(name, {})

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
            self._entry(mc.name, gate=report)
            log.info("delivery: model %s %s passed the gate: %s", mc.name, manifest.version,
                     report)
            return cand
        except BaseException:
            await cand.close()
            raise

    # -- what an operator sees (``edged.delivery.board``, shared with Frigate's road) ------
    @property
    def entries(self) -> dict[str, dict[str, Any]]:
        return self.state.board.entries

    def _entry(self, name: str, **fields: Any) -> None:
        self.state.board.entry(name, **fields)

    def _history(self, name: str, **event: Any) -> None:
        self.state.board.history(name, **event)

    def _served(self, name: str, v: Version, manifest: Manifest, how: str) -> None:
        mc = self.state.config.model(name)
        self.state.board.served(name, manifest.version, v.digest,
                                mc.source.url if mc and mc.source else v.meta.get("source"),
                                how)

    def _refused(self, name: str, e: Refused) -> None:
        log.error("delivery: model %s: version refused at %s (%s): %s", name, e.stage,
                  e.reason, e)
        self.state.board.refused(name, e.stage, e.reason, str(e),
                                 self.state.registry.find(name) is not None)


def _manifest(v: Version) -> Manifest:
    return read_manifest(v.file(MANIFEST).read_bytes())


async def _retire(m: Model, timeout: float) -> None:
    """A replaced version finishes what it took, then closes."""
    with contextlib.suppress(Exception):
        await m.drain(timeout)
        await m.close()
