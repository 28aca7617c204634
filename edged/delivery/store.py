"""The one store of model versions: content-addressed, bounded, crash-consistent.

Why one store with bounds: before it, every model Frigate sent was kept for ever, and one
client sending 300 distinct models filled 391 MB in seconds (issue 32); on a Raspberry Pi's
SD card the daemon, its logs and the OS share that disk. So every version that arrives, by
whatever road, is written here and nowhere else, under three bounds:

- at most ``per_model`` versions of one model (an endpoint's model, a ``[[models]]`` name):
  the one serving, the one it would fall back to, and the newest others;
- at most ``max_bytes`` in all (``[server] max_store_bytes``), counting everything in a
  version's folder (rungs built later too) and partial downloads;
- what serves and its fallback are never evicted; other versions go oldest first.

A version that cannot fit, even after every version that may go has gone, is refused
*before* a byte of it is written (``StoreFull``, whose message says how full the store is).

Layout under ``root`` (``STATE_DIR/store``)::

    versions/<digest>/...     one folder per version: a model file Frigate sent
                              (``<digest>.onnx``, its rungs beside it) or a bundle's files
    incoming/<digest>/...     a download in progress (resumable; counted in the quota)
    index.json                which model has which versions, which serves, which is its
                              fallback, which versions are never to be taken again, and
                              which one is in its watch window (with the baseline it is
                              judged against)

Crash consistency: a version's folder is complete before the index names it (files are
written under temporary names, fsynced and renamed); the index is replaced atomically (a
temporary file, fsync, rename, fsync of the folder), so "which version serves" is always
one whole pointer; a folder the index does not name (a crash between the two) is removed
when the store opens, and an index entry whose folder is gone is dropped.

This module is the store's one interface, and its lock; the parts it is made of each keep
one idea: ``store_index`` (the records and pointers in ``index.json``), ``store_folders``
(the version folders and downloads, content-addressed) and ``store_bounds`` (what may stay,
what must go, what may not come in).
"""

from __future__ import annotations

import logging
import os
import threading
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edged.delivery.store_bounds import (
    DEFAULT_MAX_BYTES,
    DEFAULT_PER_MODEL,
    MIN_FREE_BYTES,
    StoreBounds,
)
from edged.delivery.store_folders import VersionFolders
from edged.delivery.store_index import StoreIndex

log = logging.getLogger("edged.delivery")


def default_state_dir() -> Path:
    """``$STATE_DIRECTORY`` (systemd's StateDirectory=), else ``$XDG_STATE_HOME/edged``,
    else ``~/.local/state/edged``."""
    env = os.environ.get("STATE_DIRECTORY")
    if env:
        return Path(env.split(":")[0])
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "state"
    return base / "edged"


@dataclass(frozen=True)
class Version:
    """One stored version of one model."""

    model: str
    digest: str
    #: what its sender calls it: the file name Frigate sent, a bundle's version label
    name: str
    #: the version's folder
    path: Path
    stored_at: float
    meta: dict[str, Any] = field(default_factory=dict)

    def file(self, relative: str) -> Path:
        return self.path / relative


class VersionStore:
    """The state directory's versions. Thread-safe: calls come from worker threads."""

    def __init__(self, root: Path, max_bytes: int = DEFAULT_MAX_BYTES,
                 per_model: int = DEFAULT_PER_MODEL, metrics: Any = None,
                 min_free_bytes: int = MIN_FREE_BYTES) -> None:
        self.root = Path(root)
        self._lock = threading.RLock()
        self._folders = VersionFolders(self.root)
        self._index = StoreIndex(self.root)
        self._bounds = StoreBounds(self._lock, self._index, self._folders, max_bytes,
                                   per_model, min_free_bytes, metrics)
        #: called with (model, digest, reason) after a version was evicted
        self.on_evict = self._bounds.on_evict
        self._open()
        self._bounds.gauges()

    @property
    def max_bytes(self) -> int:
        return self._bounds.max_bytes

    @property
    def per_model(self) -> int:
        return self._bounds.per_model

    # -- opening: a consistent index whatever happened before ---------------------------
    def _open(self) -> None:
        """Make the index agree with the folders (the crash cases above)."""
        on_disk = self._folders.on_disk()
        named, changed = self._index.agree(on_disk)
        for orphan in sorted(on_disk - named):
            # written, but the index never named it (a crash in between): not a whole version
            log.warning("store: removing %s: not in the index (an interrupted write)", orphan)
            self._folders.remove(orphan)
        for d in named:
            self._folders.measure(d)
        if changed:
            self._index.write()

    # -- reading -----------------------------------------------------------------------
    def _version(self, model: str, v: dict[str, Any]) -> Version:
        return Version(model, v["digest"], v["name"], self._folders.path(v["digest"]),
                       v["stored_at"], dict(v["meta"]))

    def versions(self, model: str) -> list[Version]:
        """``model``'s versions, oldest first."""
        with self._lock:
            m = self._index.models.get(model)
            return [self._version(model, v) for v in m["versions"]] if m else []

    def find(self, model: str, name: str) -> Version | None:
        """The newest version of ``model`` called ``name``."""
        return next((v for v in reversed(self.versions(model)) if v.name == name), None)

    def get(self, model: str, digest: str) -> Version | None:
        return next((v for v in self.versions(model) if v.digest == digest), None)

    def serving(self, model: str) -> Version | None:
        """The version ``model`` serves (the pointer written at its last promotion)."""
        return self._pointer(model, "serving")

    def fallback(self, model: str) -> Version | None:
        return self._pointer(model, "fallback")

    def _pointer(self, model: str, key: str) -> Version | None:
        with self._lock:
            m = self._index.models.get(model)
            digest = m.get(key) if m else None
            return self.get(model, digest) if digest else None

    def watch(self, model: str) -> dict[str, Any] | None:
        """The watch window the serving version of ``model`` is in (written with its
        pointer at promotion): ``digest``, ``seconds``, ``baseline``, ``restarts``; None
        when it passed, was rolled back, or had none."""
        with self._lock:
            return self._index.watch(model)

    def set_watch(self, model: str, digest: str, watch: dict[str, Any] | None) -> None:
        """The serving version ``digest`` is watched with ``watch`` (None: its window ended,
        it passed)."""
        with self._lock:
            self._index.set_watch(model, digest, watch)

    def never_again(self, model: str, digest: str) -> str | None:
        """Why ``digest`` is never to be taken again for ``model`` (None: it may be)."""
        with self._lock:
            return self._index.never_again(model, digest)

    def history(self, model: str) -> list[dict[str, Any]]:
        with self._lock:
            return self._index.history(model)

    def used_bytes(self) -> int:
        return self._bounds.used_bytes()

    def describe(self) -> dict[str, Any]:
        """What ``edged status`` shows: use and quota, and each model's versions."""
        with self._lock:
            sizes = self._folders.sizes
            models = {}
            for name, m in self._index.models.items():
                if not m["versions"]:
                    continue
                models[name] = {
                    "versions": [{"digest": v["digest"], "name": v["name"],
                                  "bytes": sizes.get(v["digest"], 0),
                                  "stored_at": v["stored_at"]} for v in m["versions"]],
                    "serving": m["serving"], "fallback": m["fallback"]}
            used = self.used_bytes()
            return {"root": str(self.root), "used_bytes": used, "quota_bytes": self.max_bytes,
                    "versions": len(sizes), "per_model": self.per_model,
                    "models": models}

    # -- bounds (``store_bounds``) -----------------------------------------------------
    def configure(self, max_bytes: int, per_model: int) -> list[tuple[str, str]]:
        """New bounds (a reload): applied at once; the versions evicted to meet them."""
        return self._bounds.configure(max_bytes, per_model)

    def hold(self, digest: str) -> AbstractContextManager[None]:
        """Keep ``digest`` from eviction while it is checked (a candidate's stages)."""
        return self._bounds.hold(digest)

    def admit(self, model: str, digest: str, nbytes: int) -> None:
        """Refuse (``StoreFull``) a version of ``nbytes`` that could not fit the quota even
        with every version that may go gone, or that would leave the disk nearly full."""
        self._bounds.admit(model, digest, nbytes)

    def enforce(self, arriving: str | None = None) -> list[tuple[str, str]]:
        """Evict to the bounds (``StoreBounds.enforce``); the evicted (model, digest)."""
        return self._bounds.enforce(arriving)

    def over_quota(self) -> int:
        """Bytes over the quota after eviction (0: within it)."""
        return self._bounds.over_quota()

    # -- writing -----------------------------------------------------------------------
    def put_file(self, model: str, name: str, data: bytes, digest: str, suffix: str,
                 meta: dict[str, Any] | None = None) -> Version:
        """Store ``data`` (whose sha256 is ``digest``) as a version of ``model`` in one
        file ``<digest><suffix>``; refused (``StoreFull``) before a byte is written when
        it cannot fit. Then the bounds are enforced (it is never the one evicted)."""
        with self._lock:
            self._bounds.admit(model, digest, len(data))
            self._folders.write_file(digest, f"{digest}{suffix}", data)
            return self._add(model, name, digest, meta or {})

    def incoming(self, digest: str) -> Path:
        """The folder a version being downloaded is written to (kept across restarts, so
        a download resumes; counted in the quota)."""
        return self._folders.incoming(digest)

    def drop_incoming(self, keep: str | None = None) -> None:
        """Partial downloads given up (all but ``keep``)."""
        self._folders.drop_incoming(keep)
        self._bounds.gauges()

    def commit(self, model: str, name: str, digest: str, folder: Path,
               meta: dict[str, Any] | None = None) -> Version:
        """A complete, verified download in ``folder`` becomes version ``digest`` of
        ``model`` (one rename), then the bounds are enforced."""
        with self._lock:
            self._folders.commit(folder, digest)
            return self._add(model, name, digest, meta or {})

    def _add(self, model: str, name: str, digest: str, meta: dict[str, Any]) -> Version:
        entry = self._index.add(model, name, digest, meta)
        self._folders.measure(digest)
        self._index.write()
        version = self._version(model, entry)
        self._bounds.enforce(arriving=digest)
        self._bounds.gauges()
        return version

    def set_meta(self, model: str, digest: str, **meta: Any) -> None:
        with self._lock:
            self._index.set_meta(model, digest, **meta)

    def rename(self, model: str, digest: str, name: str) -> None:
        """The same bytes arrived under another name: the version takes the new one."""
        with self._lock:
            self._index.rename(model, digest, name)

    def promote(self, model: str, digest: str, watch: dict[str, Any] | None = None) -> None:
        """``digest`` serves ``model`` now; what served becomes its fallback; ``watch`` is
        its watch window (``set_watch``). One atomic write of the index: a restart serves
        the one or the other, never a mix, and finds the new one still to be watched."""
        with self._lock:
            if not self._index.promote(model, digest, watch):
                return
        self._bounds.enforce()

    def demote(self, model: str, digest: str, reason: str, never: bool = False,
               source: str | None = None, keep: bool = False) -> None:
        """``digest`` stops serving (a rollback): its fallback serves again; with ``never``,
        it is never to be taken again (from ``source``); with ``keep``, it is the
        fallback now (the rollback target, never evicted) until a newer one is promoted.

        Why ``keep`` for an operator's rollback: the operator may have rolled back for a
        reason outside the version (a test, a doubt) and want it back; without it, the
        version stays stored with no pointer to it, and the next arrival may evict it."""
        with self._lock:
            self._index.demote(model, digest, reason, never, source, keep)
        self._bounds.enforce()

    def refresh(self, digest: str) -> None:
        """A version's folder grew (rungs built beside a model): its size counted again,
        and the bounds enforced."""
        with self._lock:
            if digest in self._folders.sizes:
                self._folders.measure(digest)
        self._bounds.enforce()
        self._bounds.gauges()


def open_store(server: Any, metrics: Any = None) -> VersionStore:
    """The store of a ``[server]`` table (``edged.config.server.ServerConfig``): under
    ``state_dir/store``, bounded by ``max_store_bytes`` and ``max_store_versions``."""
    root = (server.state_dir or default_state_dir()) / "store"
    return VersionStore(root, server.max_store_bytes, server.max_store_versions, metrics)
