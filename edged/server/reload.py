"""Reload (SIGHUP, ``systemctl reload``, ``edged ctl reload``): plan, stage, switch.

``plan_reload`` is pure: it compares two configs and says what changes and what a
reload cannot apply (sockets and listeners are bound at start). ``Reloader`` applies a
plan: new or changed models are loaded beside the old ones and switched in atomically;
unchanged models keep serving untouched; anything invalid keeps the old config whole.

A model whose config is unchanged but whose live artifact's bytes changed under the same
path (``changed_on_disk``: its sha256 differs from the one it was opened from) is changed
too: without that, a new export copied over the old file was never served and the reload
said ``"changed": []``. Its new file goes through the pre-swap check (the contract the
served model promised, and the check against the reference for a variant that is not
the reference itself) before it is switched in; ``why`` in the reply says what changed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from edged.config.file import Config, load_config
from edged.config.models import ModelConfig
from edged.errors import ConfigError
from edged.model.artifact import artifact_digest
from edged.model.model import Model
from edged.model.registry import Registry
from edged.protocols.sockets import check_client_keys
from edged.server.governing import Governing
from edged.server.state import ServerState

log = logging.getLogger("edged.server")


@dataclass(frozen=True)
class ReloadPlan:
    added: list[ModelConfig]
    changed: list[ModelConfig]
    removed: list[str]
    #: config keys whose change needs a restart; a plan with any is refused whole
    needs_restart: list[str]


def plan_reload(old: Config, new: Config) -> ReloadPlan:
    old_by = {m.name: m for m in old.models}
    new_by = {m.name: m for m in new.models}
    return ReloadPlan(
        added=[m for n, m in new_by.items() if n not in old_by],
        changed=[m for n, m in new_by.items() if n in old_by and old_by[n] != m],
        removed=[n for n in old_by if n not in new_by],
        needs_restart=needs_restart(old, new),
    )


def needs_restart(old: Config, new: Config) -> list[str]:
    """Settings a reload cannot apply: what was bound or secured at start."""
    a, b = old.server, new.server
    keys = []
    if a.endpoints != b.endpoints:
        keys.append("server.endpoints")
    if a.control != b.control:
        keys.append("server.control")
    if a.frigate != b.frigate:
        keys.append("server.frigate")
    if a.runtime_dir != b.runtime_dir:
        keys.append("server.runtime_dir")
    if a.insecure != b.insecure:
        keys.append("server.insecure")
    if (a.curve is None) != (b.curve is None) or (
            a.curve is not None and b.curve is not None
            and a.curve.server_secret_key != b.curve.server_secret_key):
        keys.append("server.curve")
    if a.limits.hard_cap != b.limits.hard_cap:
        keys.append("server.limits.max_message_bytes/hard_message_bytes")
    if old.metrics != new.metrics:
        keys.append("metrics.listen")
    return keys


def changed_on_disk(registry: Registry, skip: set[str]) -> dict[str, str]:
    """Models (not in ``skip``) whose live artifact's bytes are no longer those it was
    opened from: ``{model: why}``. Blocking (reads and hashes the files)."""
    out = {}
    for m in registry:
        loaded = m.live.loaded
        if m.name in skip or loaded is None or loaded.digest is None:
            continue
        now = artifact_digest(loaded.config.path)
        if now is not None and now != loaded.digest:
            out[m.name] = (f"{loaded.config.name}: {loaded.config.path} changed on disk "
                           f"(sha256 {loaded.digest[:12]} -> {now[:12]})")
    return out


def check_in_place(old: Model, new: Model, why: str) -> tuple[str | None, str]:
    """A model staged because its file changed, against the one serving: ``(problem,
    why)``, ``problem`` None when the new file may serve. It must serve the same variant
    (one the pre-swap check refused falls back to the reference at load) with the same
    inputs and outputs the served model promised its clients."""
    if new.active_variant != old.active_variant:
        refusal = new.live.record.last_check_refused or "see the log"
        return (f"{why}: the new file was refused by the pre-swap check ({refusal}); the "
                "old one serves on"), why
    if new.inputs != old.inputs or new.outputs != old.outputs:
        def specs(m: Model) -> str:
            return ", ".join(f"{s.name} {s.dtype} {list(s.shape)}" for s in [*m.inputs,
                                                                             *m.outputs])
        return (f"{why}: its inputs and outputs ({specs(new)}) are not the served ones "
                f"({specs(old)}); the old file's session serves on"), why
    index = new.active_index
    checked = "same inputs and outputs"
    if index is not None and not new.verifier.trusted(index):
        checked += f", checked against the reference {new.verifier.reference_name}"
    return None, f"{why}; pre-swap check: {checked}"


class Reloader:
    def __init__(self, state: ServerState, governing: Governing) -> None:
        self.state = state
        self.governing = governing
        self._lock = asyncio.Lock()
        #: the config a model is loaded with: a delivered model's is the version its store
        #: pointer names (``edged.server.delivery``), not its configured variants; None:
        #: nothing to load yet
        self.resolve: Callable[[ModelConfig], ModelConfig | None] = lambda mc: mc

    async def reload(self) -> dict[str, Any]:
        """Re-read the config; keep serving on the old one if the new one is invalid."""
        async with self._lock:
            st = self.state
            st.notifier.reloading()
            t0 = time.perf_counter()
            try:
                new = await asyncio.to_thread(load_config, st.config.file)
            except ConfigError as e:
                return self._failed(e.problems)
            if new.server.curve is not None:
                try:
                    # configure_curve() would log a malformed key and keep the OLD allow-list:
                    # a revocation would silently not apply. Check first, reject the reload.
                    await asyncio.to_thread(check_client_keys, new.server.curve.clients_dir)
                except ValueError as e:
                    return self._failed([str(e)])
            # The flags given on the command line still win over the file.
            new = new.with_overrides(**st.overrides)
            plan = plan_reload(st.config, new)
            if plan.needs_restart:
                return self._failed([
                    f"{', '.join(plan.needs_restart)} changed: sockets and listeners are bound "
                    "at start, so this needs a restart (systemctl restart edged); nothing was "
                    "changed"])
            why = {m.name: "config changed" for m in plan.changed}
            on_disk = await asyncio.to_thread(
                changed_on_disk, st.registry,
                {m.name for m in [*plan.added, *plan.changed]} | set(plan.removed))
            in_place = [mc for mc in new.models if mc.name in on_disk]
            changed = [*plan.changed, *in_place]
            async with st.loading():
                staged, errors = await self._stage(new, [*plan.added, *changed])
            for name, reason in on_disk.items():
                if errors or name not in staged:
                    break
                problem, why[name] = check_in_place(st.registry.get(name), staged[name],
                                                    reason)
                if problem:
                    errors.append(f"{name}: {problem}")
            if errors:
                for m in staged.values():
                    await m.close()
                self._show_live([mc.name for mc in [*plan.added, *changed]])
                return self._failed(errors)
            let_go = st.registry.replace(staged, plan.removed)  # atomic switch
            st.registry.set_pipelines(new.pipelines, new.models)
            st.config = new
            self.governing.configure(new)
            for m in let_go:
                await m.drain(new.server.drain_timeout_s)
                await m.close()
            ms = (time.perf_counter() - t0) * 1000
            st.metrics.reloads.labels("ok").inc()
            st.last_reload = {"ok": True, "added": [m.name for m in plan.added],
                              "changed": [m.name for m in changed], "why": why,
                              "removed": plan.removed,
                              "pipelines": [p.name for p in new.pipelines],
                              "ms": round(ms, 1), "at": time.time()}
            log.info("reload done added=%s changed=%s removed=%s reload_ms=%.0f%s",
                     ",".join(st.last_reload["added"]) or "-",
                     ",".join(st.last_reload["changed"]) or "-",
                     ",".join(plan.removed) or "-", ms,
                     "".join(f" ({n}: {w})" for n, w in why.items() if n in on_disk))
            return st.last_reload

    async def _stage(self, new: Config,
                     models: list[ModelConfig]) -> tuple[dict[str, Model], list[str]]:
        """Load new/changed models beside the running ones; all or nothing."""
        st = self.state
        staged: dict[str, Model] = {}
        errors = []
        for mc in [r for r in map(self.resolve, models) if r is not None]:
            m = st.registry.create(mc, new.server)
            try:
                await m.load(self.governing.index_for(m))
                staged[mc.name] = m
            except Exception:
                errors.append(f"{mc.name}: {m.error}")
                await m.close()
        if errors:
            for m in staged.values():
                await m.close()
            staged = {}
        return staged, errors

    def _show_live(self, names: Any) -> None:
        """The metrics say the serving variants again: a staged model that was then
        refused had set its own as active."""
        for name in names:
            m = self.state.registry.find(name)
            a = m.live.loaded if m is not None else None
            if a is not None:
                self.state.metrics.set_active(name, a.config.name, a.config.backend, a.digest)

    def _failed(self, problems: list[str]) -> dict[str, Any]:
        st = self.state
        st.metrics.reloads.labels("error").inc()
        st.last_reload = {"ok": False, "error": problems, "at": time.time()}
        log.error("reload rejected; still serving the previous config: %s", "; ".join(problems))
        st.notifier.ready(f"reload FAILED (old config kept): {problems[0]}")
        return st.last_reload
