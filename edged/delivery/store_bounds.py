"""The store's bounds: which versions may stay, which must go, and which may not come in.

Why a policy of its own: the store (``edged.delivery.store``) exists because of its
bounds (issue 32: one client's 300 distinct models filled 391 MB in seconds), and the rule
that decides what is kept is one idea, apart from how versions are recorded
(``store_index``) and written (``store_folders``):

- at most ``per_model`` versions of one model, oldest others first;
- at most ``max_bytes`` in all, oldest first across models, partial downloads counted;
- what serves, its fallback, and a version being checked (``hold``) are never evicted;
- a version that could not fit even with every evictable version gone, or that would
  leave the disk with less than ``min_free_bytes``, is refused (``StoreFull``) before a
  byte of it is written.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from edged.delivery.store_folders import VersionFolders
from edged.delivery.store_index import StoreIndex
from edged.errors import ResourceExhausted

log = logging.getLogger("edged.delivery")

#: the default total quota: a small SD card shares its space with the OS and the logs
DEFAULT_MAX_BYTES = 2 << 30
#: the default versions kept per model: serving, fallback and the two newest others
DEFAULT_PER_MODEL = 4
#: a write must leave at least this much free on the disk, whatever the quota says
MIN_FREE_BYTES = 64 << 20


class StoreFull(ResourceExhausted):
    """A version that would pass the quota (or fill the disk); the message says so."""

    def __init__(self, message: str, reason: str = "quota") -> None:
        super().__init__(message)
        self.reason = reason


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


class StoreBounds:
    """The bounds of one store, applied to its index and folders under its lock."""

    def __init__(self, lock: threading.RLock, index: StoreIndex, folders: VersionFolders,
                 max_bytes: int, per_model: int, min_free_bytes: int,
                 metrics: Any = None) -> None:
        self._lock = lock
        self._index = index
        self._folders = folders
        self.max_bytes = max_bytes
        self.per_model = per_model
        self.min_free_bytes = min_free_bytes
        self.metrics = metrics
        #: versions being checked (a candidate in its gate or shadow): never evicted
        self._held: set[str] = set()
        #: called with (model, digest, reason) after a version was evicted
        self.on_evict: list[Callable[[str, str, str], None]] = []

    def used_bytes(self) -> int:
        with self._lock:
            return self._folders.used_bytes()

    def configure(self, max_bytes: int, per_model: int) -> list[tuple[str, str]]:
        """New bounds (a reload): applied at once; the versions evicted to meet them."""
        with self._lock:
            self.max_bytes, self.per_model = max_bytes, per_model
            return self.enforce()

    @contextlib.contextmanager
    def hold(self, digest: str) -> Iterator[None]:
        """Keep ``digest`` from eviction while it is checked (a candidate's stages)."""
        with self._lock:
            self._held.add(digest)
        try:
            yield
        finally:
            with self._lock:
                self._held.discard(digest)

    def _protected(self, extra: tuple[str, str] | None = None) -> set[str]:
        """Digests that serve, are a fallback or are held; with ``extra`` = (model, digest)
        arriving, as they will be once it serves (what serves now becomes its fallback)."""
        out: set[str] = set(self._held)
        models = self._index.models
        for name, m in models.items():
            if extra is not None and name == extra[0]:
                out |= {d for d in (m["serving"] or m["fallback"], extra[1]) if d}
            else:
                out |= {d for d in (m["serving"], m["fallback"]) if d}
        if extra is not None and extra[0] not in models:
            out.add(extra[1])
        return out

    def admit(self, model: str, digest: str, nbytes: int) -> None:
        """Refuse (``StoreFull``) a version of ``nbytes`` that could not fit the quota even
        with every version that may go gone, or that would leave the disk nearly full."""
        with self._lock:
            sizes = self._folders.sizes
            if digest in sizes:
                return  # stored already (another model's): no new bytes
            keep = self._protected((model, digest)) - {digest}
            floor = sum(sizes.get(d, 0) for d in keep) + self._folders.incoming_bytes()
            if floor + nbytes > self.max_bytes:
                raise StoreFull(
                    f"the model store is full: this version needs {human(nbytes)} and the "
                    f"versions that serve or are a fallback already use {human(floor)} of "
                    f"the {human(self.max_bytes)} allowed ([server] max_store_bytes); "
                    "nothing older is left to evict", "quota")
            evictable = sum(s for d, s in sizes.items() if d not in keep)
            try:
                free = shutil.disk_usage(self._existing_parent()).free
            except OSError:
                return
            if free + evictable - nbytes < self.min_free_bytes:
                raise StoreFull(
                    f"the disk holding {self._folders.root} has {human(free)} free; this "
                    f"version needs {human(nbytes)} and edged leaves at least "
                    f"{human(self.min_free_bytes)} free", "disk")

    def _existing_parent(self) -> Path:
        p = self._folders.root
        while not p.exists() and p != p.parent:
            p = p.parent
        return p

    def enforce(self, arriving: str | None = None) -> list[tuple[str, str]]:
        """Evict to the bounds: per model beyond ``per_model``, then oldest first until the
        quota is met; never what serves or a fallback, nor ``arriving``. The evicted
        (model, digest) pairs. The index is written before a folder is deleted, so a
        crash between the two leaves an orphan folder (removed at the next open), never
        an index naming a half-deleted version."""
        evicted: list[tuple[str, str]] = []
        with self._lock:
            models = self._index.models
            protected = self._protected() | ({arriving} if arriving else set())
            for name, m in models.items():
                while len(m["versions"]) > self.per_model:
                    old = next((v for v in m["versions"] if v["digest"] not in
                                {m["serving"], m["fallback"], arriving}), None)
                    if old is None:
                        break
                    m["versions"].remove(old)
                    evicted.append((name, old["digest"]))
            if evicted:
                self._forget(evicted)
            while self._folders.used_bytes() > self.max_bytes:
                candidates = [(v["stored_at"], name, v) for name, m in models.items()
                              for v in m["versions"] if v["digest"] not in protected]
                if not candidates:
                    break
                _, name, v = min(candidates, key=lambda c: c[0])
                models[name]["versions"].remove(v)
                evicted.append((name, v["digest"]))
                self._forget(evicted[-1:])
        for name, digest in evicted:
            log.info("store: evicted version %s of model %s (bounds: %d per model, %s in all)",
                     digest[:12], name, self.per_model, human(self.max_bytes))
            if self.metrics is not None:
                self.metrics.store_evictions.inc()
            for cb in self.on_evict:
                cb(name, digest, "bounds")
        self.gauges()
        return evicted

    def _forget(self, pairs: list[tuple[str, str]]) -> None:
        for name, digest in pairs:
            self._index.record(name, digest, "evicted")
        self._index.write()
        self._folders.drop_unreferenced(self._index.referenced())

    def over_quota(self) -> int:
        """Bytes over the quota after eviction (0: within it)."""
        return max(0, self.used_bytes() - self.max_bytes)

    def gauges(self) -> None:
        if self.metrics is None:
            return
        self.metrics.store_bytes.set(self.used_bytes())
        self.metrics.store_quota.set(self.max_bytes)
        self.metrics.store_versions.set(len(self._folders.sizes))
