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

At start a delivered model serves the version its pointer names (else its fallback, else
the configured variants), without gates: they passed before it was promoted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from edged.config.models import ModelConfig
from edged.delivery.bundle import MANIFEST, BundleRefused, Manifest, read_manifest
from edged.delivery.download import Refused, fetch
from edged.delivery.pipeline import accuracy_gate, check_contract, version_config
from edged.delivery.sources import SourceError, open_source
from edged.delivery.store import Version
from edged.delivery.trust import Trust
from edged.errors import NotFound
from edged.model.model import Model
from edged.server.state import ServerState

log = logging.getLogger("edged.delivery")

#: the first look at a source after start (the daemon is READY first)
FIRST_POLL_S = 1.0


class Deliveries:
    def __init__(self, state: ServerState) -> None:
        self.state = state
        self._locks: dict[str, asyncio.Lock] = {}
        #: per model: what ``edged status`` shows (``delivery``)
        self.entries: dict[str, dict[str, Any]] = {}

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

    def _warn_unsigned(self, m: ModelConfig) -> None:
        assert m.source is not None
        if m.source.allow_unsigned:
            log.warning("UNSIGNED versions: model %s takes versions from %s without a "
                        "signature (allow_unsigned = true); anyone who can write there "
                        "decides what this device runs", m.name, m.source.url)

    def _stored_config(self, m: ModelConfig) -> ModelConfig | None:
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
            self._served(m.name, v, manifest, "restored")
            return mc
        return None

    # -- the loop and the operator's pull ----------------------------------------------
    async def loop(self) -> None:
        """Poll every delivered model's source at its ``poll_s`` (0: never by itself)."""
        due: dict[str, float] = {m.name: time.monotonic() + FIRST_POLL_S
                                 for m in self.delivered() if m.source and m.source.poll_s}
        while True:
            now = time.monotonic()
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
        self._entry(mc.name, stage="gating", candidate=manifest.version,
                    progress=f"{manifest.version} ({v.digest[:12]}): contract, accuracy")
        cand = await self._gate(mc, v, manifest)
        self._entry(mc.name, stage="promoting", progress=f"{manifest.version}")
        old = st.registry.replace({mc.name: cand}, [])
        for m in old:
            st.spawn(_retire(m, st.config.server.drain_timeout_s))
        await asyncio.to_thread(st.store.promote, mc.name, v.digest)
        self._served(mc.name, v, manifest, "promoted")
        st.metrics.model_updates.labels(mc.name, "promoted", by).inc()
        log.info("delivery: model %s now serves %s (%s) from %s", mc.name, manifest.version,
                 v.digest[:12], fetched.ref.where)

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
                                              manifest)
            self._entry(mc.name, gate=report)
            log.info("delivery: model %s %s passed the gate: %s", mc.name, manifest.version,
                     report)
            return cand
        except BaseException:
            await cand.close()
            raise

    # -- what an operator sees ----------------------------------------------------------
    def _entry(self, name: str, **fields: Any) -> None:
        e = self.entries.setdefault(name, {"history": []})
        e.update(fields, at=round(time.time(), 1))

    def _served(self, name: str, v: Version, manifest: Manifest, how: str) -> None:
        st = self.state
        mc = st.config.model(name)
        for labels in list(st.metrics.model_version._metrics):
            if labels[0] == name:
                st.metrics.model_version.remove(*labels)
        st.metrics.model_version.labels(name, manifest.version, v.digest).set(1)
        e = self.entries.setdefault(name, {"history": []})
        e["history"] = [*e["history"], {"at": round(time.time(), 1), "version":
                                        manifest.version, "digest": v.digest, "event": how}][-20:]
        self._entry(name, version=manifest.version, digest=v.digest,
                    source=mc.source.url if mc and mc.source else v.meta.get("source"),
                    stage="serving", candidate=None, progress=None)

    def _refused(self, name: str, e: Refused) -> None:
        st = self.state
        log.error("delivery: model %s: version refused at %s (%s): %s", name, e.stage,
                  e.reason, e)
        st.metrics.model_updates.labels(name, "refused", e.reason).inc()
        entry = self.entries.setdefault(name, {"history": []})
        entry["history"] = [*entry["history"], {"at": round(time.time(), 1), "event":
                                                "refused", "stage": e.stage,
                                                "reason": e.reason}][-20:]
        self._entry(name, stage="serving" if st.registry.find(name) else "waiting",
                    candidate=None, progress=None,
                    last_refusal={"stage": e.stage, "reason": e.reason, "message": str(e),
                                  "at": round(time.time(), 1)})

    def status(self) -> dict[str, Any]:
        return {name: dict(e) for name, e in self.entries.items()}


def _manifest(v: Version) -> Manifest:
    return read_manifest(v.file(MANIFEST).read_bytes())


async def _retire(m: Model, timeout: float) -> None:
    """A replaced version finishes what it took, then closes."""
    with contextlib.suppress(Exception):
        await m.drain(timeout)
        await m.close()
