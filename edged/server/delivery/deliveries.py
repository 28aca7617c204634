"""``Deliveries``: the one writer of which version a delivered model serves.

Why this part holds the rest together: every road to a new version (the poll loop, the
operator's ``edged ctl pull``, ``promote`` and ``rollback``, a watch window's regression)
goes through here, one at a time per model (its lock), and a failure on any of them is a
refusal on the board, never the daemon's. The stages, the switch and the watch windows are
parts of their own (the package's docstring lists them).

At start a delivered model serves the version its pointer names (else its fallback, else
the configured variants), without gates: they passed before it was promoted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from edged.config.models import ModelConfig
from edged.delivery.bundle import BundleRefused, Manifest
from edged.delivery.download import Refused, fetch
from edged.delivery.gate import version_config
from edged.delivery.sources import open_source
from edged.delivery.sources.base import SourceError
from edged.delivery.store import Version
from edged.delivery.trust import Trust
from edged.delivery.watch import Readings, read
from edged.errors import NotFound
from edged.model.model import Model
from edged.server.delivery.stages import Stages
from edged.server.delivery.stored import served, stored_manifest
from edged.server.delivery.switch import Switch
from edged.server.delivery.watches import Watches
from edged.server.state import ServerState

log = logging.getLogger("edged.server.delivery")

#: the first look at a source after start (the daemon is READY first)
FIRST_POLL_S = 1.0


class Deliveries:
    """Which models are delivered, what they serve at start, and every road to a new
    version of one of them."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self._locks: dict[str, asyncio.Lock] = {}
        #: one reading a second of each delivered model (the watch's baselines)
        self.readings = Readings()
        #: a model switched in takes the governor's throttle and rung at once
        #: (``Governing.adopt``, set by the lifecycle)
        self.adopt: Callable[[Model, str], None] = lambda m, reason: None
        self.stages = Stages(state)
        self.watches = Watches(state, self.rollback)
        self.switch = Switch(state, self.readings, self.watches,
                             lambda m, reason: self.adopt(m, reason))

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
                manifest = stored_manifest(v)
                mc = version_config(m, v, manifest)
            except (Refused, BundleRefused, OSError) as e:
                log.error("delivery: model %s: stored version %s cannot serve: %s", m.name,
                          v.digest[:12], e)
                continue
            if v.digest != (store.serving(m.name) or v).digest:
                log.warning("delivery: model %s serves its fallback %s", m.name, v.name)
            if not quiet:
                served(self.state, m.name, v, manifest, "restored")
            return mc
        return None

    async def resume_watches(self) -> None:
        """At start, before the daemon is READY: the watch windows a stop interrupted are
        watched again (``Watches.resume``)."""
        await self.watches.resume(self.delivered())

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
        """A stored version through the stages, the switch and into the watch window
        (never evicted meanwhile)."""
        assert self.state.store is not None
        with self.state.store.hold(v.digest):
            cand = await self.stages.candidate(mc, v, manifest)
            await self.switch.promote(mc, v, manifest, cand, by, where)

    # -- the operator's promote and rollback, and the watch window's --------------------
    async def rollback(self, name: str, reason: str, automatic: bool = False
                       ) -> dict[str, Any]:
        """Serve the version before this one again; this one is never taken again from
        its source. ``edged ctl rollback MODEL`` and the watch window call it."""
        mc = self.state.config.model(name)
        if mc is None or mc.source is None:
            raise NotFound(f"model {name!r} has no [models.source] in "
                           f"{self.state.config.file}")
        if not automatic:
            self.watches.stop(name)
        async with self._locks.setdefault(name, asyncio.Lock()):
            return await self.switch.roll_back(mc, reason, automatic)

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
                await self._take(mc, v, stored_manifest(v), "operator", str(v.path))
            except Refused as e:
                self._refused(name, e)
        return self.entries.get(name, {})

    # -- what an operator sees (``edged.delivery.board``, shared with Frigate's road) ------
    @property
    def entries(self) -> dict[str, dict[str, Any]]:
        return self.state.board.entries

    def _entry(self, name: str, **fields: Any) -> None:
        self.state.board.entry(name, **fields)

    def _refused(self, name: str, e: Refused) -> None:
        log.error("delivery: model %s: version refused at %s (%s): %s", name, e.stage,
                  e.reason, e)
        self.state.board.refused(name, e.stage, e.reason, str(e),
                                 self.state.registry.find(name) is not None)
