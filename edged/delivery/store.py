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
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edged.errors import ResourceExhausted

log = logging.getLogger("edged.delivery")

FORMAT = 1
_DIGEST = re.compile(r"^[0-9a-f]{64}$")
MAX_INDEX_BYTES = 8 << 20
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


def default_state_dir() -> Path:
    """``$STATE_DIRECTORY`` (systemd's StateDirectory=), else ``$XDG_STATE_HOME/edged``,
    else ``~/.local/state/edged``."""
    env = os.environ.get("STATE_DIRECTORY")
    if env:
        return Path(env.split(":")[0])
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "state"
    return base / "edged"


def is_digest(value: object) -> bool:
    return isinstance(value, str) and bool(_DIGEST.match(value))


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


def atomic_write(path: Path, data: bytes) -> None:
    """Write beside ``path``, fsync, rename over it, fsync the folder."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    dir_fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def folder_bytes(path: Path) -> int:
    """Bytes of every file under ``path`` (0 when it is gone)."""
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, f)).st_size
    return total


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


class VersionStore:
    """The state directory's versions. Thread-safe: calls come from worker threads."""

    def __init__(self, root: Path, max_bytes: int = DEFAULT_MAX_BYTES,
                 per_model: int = DEFAULT_PER_MODEL, metrics: Any = None,
                 min_free_bytes: int = MIN_FREE_BYTES) -> None:
        self.root = Path(root)
        self.versions_dir = self.root / "versions"
        self.incoming_dir = self.root / "incoming"
        self.index_path = self.root / "index.json"
        self.max_bytes = max_bytes
        self.per_model = per_model
        self.min_free_bytes = min_free_bytes
        self.metrics = metrics
        self._lock = threading.RLock()
        self._sizes: dict[str, int] = {}
        #: versions being checked (a candidate in its gate or shadow): never evicted
        self._held: set[str] = set()
        #: called with (model, digest, reason) after a version was evicted
        self.on_evict: list[Callable[[str, str, str], None]] = []
        self._index = self._open()
        self._gauges()

    # -- opening: a consistent index whatever happened before ---------------------------
    def _open(self) -> dict[str, Any]:
        """Read the index and make it agree with the folders (the crash cases above)."""
        index = self._read()
        with contextlib.suppress(OSError):
            for p in self.root.glob(".index.json.*.tmp"):
                p.unlink()
        on_disk = {p.name for p in self.versions_dir.iterdir() if p.is_dir()} \
            if self.versions_dir.is_dir() else set()
        named: set[str] = set()
        changed = False
        for model, m in list(index["models"].items()):
            kept = [v for v in m["versions"] if v["digest"] in on_disk]
            if len(kept) != len(m["versions"]):
                gone = [v["digest"][:12] for v in m["versions"] if v not in kept]
                log.warning("store: model %s: version(s) %s named by the index but not on "
                            "disk; dropped from the index", model, ", ".join(gone))
                m["versions"], changed = kept, True
            digests = {v["digest"] for v in kept}
            for key in ("serving", "fallback"):
                if m.get(key) is not None and m[key] not in digests:
                    m[key], changed = None, True
            if m.get("watch") is not None and m["watch"]["digest"] != m.get("serving"):
                m["watch"], changed = None, True
            named |= digests
        for orphan in sorted(on_disk - named):
            # written, but the index never named it (a crash in between): not a whole version
            log.warning("store: removing %s: not in the index (an interrupted write)", orphan)
            self._remove_folder(self.versions_dir / orphan)
        for d in named:
            self._sizes[d] = folder_bytes(self.versions_dir / d)
        if changed:
            self._write(index)
        return index

    def _read(self) -> dict[str, Any]:
        empty: dict[str, Any] = {"format": FORMAT, "models": {}}
        try:
            raw = self.index_path.read_bytes()
        except FileNotFoundError:
            return empty
        except OSError as e:
            log.error("store index %s unreadable, starting empty: %s", self.index_path, e)
            return empty
        try:
            if len(raw) > MAX_INDEX_BYTES:
                raise ValueError(f"over {MAX_INDEX_BYTES} bytes")
            doc = json.loads(raw)
            if not isinstance(doc, dict) or not isinstance(doc.get("models"), dict):
                raise ValueError("not an index")
        except ValueError as e:
            # a damaged index costs the versions it named (a new transfer), never the daemon
            log.error("store index %s unreadable, starting empty: %s", self.index_path, e)
            return empty
        models: dict[str, Any] = {}
        for name, m in doc["models"].items():
            if not isinstance(name, str) or not isinstance(m, dict):
                continue
            versions = [v for v in m.get("versions") or [] if isinstance(v, dict)
                        and is_digest(v.get("digest")) and isinstance(v.get("name"), str)]
            for v in versions:
                v["stored_at"] = float(v.get("stored_at") or 0.0)
                v["meta"] = v["meta"] if isinstance(v.get("meta"), dict) else {}
            never = m.get("never") if isinstance(m.get("never"), dict) else {}
            watch = m.get("watch")
            models[name] = {
                "versions": versions,
                "serving": m.get("serving") if is_digest(m.get("serving")) else None,
                "fallback": m.get("fallback") if is_digest(m.get("fallback")) else None,
                "never": {k: v for k, v in never.items() if is_digest(k)},
                "history": [h for h in m.get("history") or [] if isinstance(h, dict)][-50:],
                "watch": watch if isinstance(watch, dict) and is_digest(watch.get("digest"))
                else None,
            }
        return {"format": FORMAT, "models": models}

    def _write(self, index: dict[str, Any]) -> None:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write(self.index_path, json.dumps(index, indent=1, sort_keys=True).encode())

    # -- reading -----------------------------------------------------------------------
    def _model(self, model: str) -> dict[str, Any]:
        return self._index["models"].setdefault(
            model, {"versions": [], "serving": None, "fallback": None, "never": {},
                    "history": [], "watch": None})

    def _version(self, model: str, v: dict[str, Any]) -> Version:
        return Version(model, v["digest"], v["name"], self.versions_dir / v["digest"],
                       v["stored_at"], dict(v["meta"]))

    def versions(self, model: str) -> list[Version]:
        """``model``'s versions, oldest first."""
        with self._lock:
            m = self._index["models"].get(model)
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
            m = self._index["models"].get(model)
            digest = m.get(key) if m else None
            return self.get(model, digest) if digest else None

    def watch(self, model: str) -> dict[str, Any] | None:
        """The watch window the serving version of ``model`` is in (written with its
        pointer at promotion): ``digest``, ``seconds``, ``baseline``, ``restarts``; None
        when it passed, was rolled back, or had none."""
        with self._lock:
            m = self._index["models"].get(model)
            w = (m or {}).get("watch")
            return dict(w) if w is not None and w["digest"] == m["serving"] else None

    def set_watch(self, model: str, digest: str, watch: dict[str, Any] | None) -> None:
        """The serving version ``digest`` is watched with ``watch`` (None: its window ended,
        it passed)."""
        with self._lock:
            m = self._model(model)
            if watch is None and (m.get("watch") or {}).get("digest") != digest:
                return
            m["watch"] = {**watch, "digest": digest} if watch is not None else None
            self._write(self._index)

    def never_again(self, model: str, digest: str) -> str | None:
        """Why ``digest`` is never to be taken again for ``model`` (None: it may be)."""
        with self._lock:
            m = self._index["models"].get(model)
            entry = (m or {}).get("never", {}).get(digest)
            return str(entry.get("reason")) if isinstance(entry, dict) else None

    def history(self, model: str) -> list[dict[str, Any]]:
        with self._lock:
            m = self._index["models"].get(model)
            return [dict(h) for h in (m or {}).get("history", [])]

    def used_bytes(self) -> int:
        with self._lock:
            return sum(self._sizes.values()) + folder_bytes(self.incoming_dir)

    def describe(self) -> dict[str, Any]:
        """What ``edged status`` shows: use and quota, and each model's versions."""
        with self._lock:
            models = {}
            for name, m in self._index["models"].items():
                if not m["versions"]:
                    continue
                models[name] = {
                    "versions": [{"digest": v["digest"], "name": v["name"],
                                  "bytes": self._sizes.get(v["digest"], 0),
                                  "stored_at": v["stored_at"]} for v in m["versions"]],
                    "serving": m["serving"], "fallback": m["fallback"]}
            used = self.used_bytes()
            return {"root": str(self.root), "used_bytes": used, "quota_bytes": self.max_bytes,
                    "versions": len(self._sizes), "per_model": self.per_model,
                    "models": models}

    # -- bounds ------------------------------------------------------------------------
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
        for name, m in self._index["models"].items():
            if extra is not None and name == extra[0]:
                out |= {d for d in (m["serving"] or m["fallback"], extra[1]) if d}
            else:
                out |= {d for d in (m["serving"], m["fallback"]) if d}
        if extra is not None and extra[0] not in self._index["models"]:
            out.add(extra[1])
        return out

    def admit(self, model: str, digest: str, nbytes: int) -> None:
        """Refuse (``StoreFull``) a version of ``nbytes`` that could not fit the quota even
        with every version that may go gone, or that would leave the disk nearly full."""
        with self._lock:
            if digest in self._sizes:
                return  # stored already (another model's): no new bytes
            keep = self._protected((model, digest)) - {digest}
            floor = sum(self._sizes.get(d, 0) for d in keep) + folder_bytes(self.incoming_dir)
            if floor + nbytes > self.max_bytes:
                raise StoreFull(
                    f"the model store is full: this version needs {human(nbytes)} and the "
                    f"versions that serve or are a fallback already use {human(floor)} of "
                    f"the {human(self.max_bytes)} allowed ([server] max_store_bytes); "
                    "nothing older is left to evict", "quota")
            evictable = sum(s for d, s in self._sizes.items() if d not in keep)
            try:
                free = shutil.disk_usage(self._existing_parent()).free
            except OSError:
                return
            if free + evictable - nbytes < self.min_free_bytes:
                raise StoreFull(
                    f"the disk holding {self.root} has {human(free)} free; this version "
                    f"needs {human(nbytes)} and edged leaves at least "
                    f"{human(self.min_free_bytes)} free", "disk")

    def _existing_parent(self) -> Path:
        p = self.root
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
            protected = self._protected() | ({arriving} if arriving else set())
            for name, m in self._index["models"].items():
                while len(m["versions"]) > self.per_model:
                    old = next((v for v in m["versions"] if v["digest"] not in
                                {m["serving"], m["fallback"], arriving}), None)
                    if old is None:
                        break
                    m["versions"].remove(old)
                    evicted.append((name, old["digest"]))
            if evicted:
                self._forget(evicted)
            while self.used_bytes() > self.max_bytes:
                candidates = [(v["stored_at"], name, v) for name, m in
                              self._index["models"].items() for v in m["versions"]
                              if v["digest"] not in protected]
                if not candidates:
                    break
                _, name, v = min(candidates, key=lambda c: c[0])
                self._index["models"][name]["versions"].remove(v)
                evicted.append((name, v["digest"]))
                self._forget(evicted[-1:])
        for name, digest in evicted:
            log.info("store: evicted version %s of model %s (bounds: %d per model, %s in all)",
                     digest[:12], name, self.per_model, human(self.max_bytes))
            if self.metrics is not None:
                self.metrics.store_evictions.inc()
            for cb in self.on_evict:
                cb(name, digest, "bounds")
        self._gauges()
        return evicted

    def _forget(self, pairs: list[tuple[str, str]]) -> None:
        for name, digest in pairs:
            self._record(name, digest, "evicted")
        self._write(self._index)
        self._drop_unreferenced()

    def _referenced(self, digest: str) -> bool:
        return any(v["digest"] == digest for m in self._index["models"].values()
                   for v in m["versions"])

    def _drop_unreferenced(self) -> None:
        for digest in [d for d in self._sizes if not self._referenced(d)]:
            self._sizes.pop(digest, None)
            self._remove_folder(self.versions_dir / digest)

    def _remove_folder(self, path: Path) -> None:
        """Renamed out of ``versions/`` first (one atomic step), then deleted."""
        if not path.exists():
            return
        trash = self.root / f".trash-{path.name}-{os.getpid()}-{time.monotonic_ns()}"
        try:
            os.replace(path, trash)
        except OSError:
            trash = path
        shutil.rmtree(trash, ignore_errors=True)

    def _gauges(self) -> None:
        if self.metrics is None:
            return
        self.metrics.store_bytes.set(self.used_bytes())
        self.metrics.store_quota.set(self.max_bytes)
        self.metrics.store_versions.set(len(self._sizes))

    def _record(self, model: str, digest: str, event: str, **extra: Any) -> None:
        """One line of the model's history (bounded), kept in the index."""
        m = self._model(model)
        m["history"] = [*m["history"], {"at": round(time.time(), 1), "digest": digest,
                                         "event": event, **extra}][-50:]

    # -- writing -----------------------------------------------------------------------
    def put_file(self, model: str, name: str, data: bytes, digest: str, suffix: str,
                 meta: dict[str, Any] | None = None) -> Version:
        """Store ``data`` (whose sha256 is ``digest``) as a version of ``model`` in one
        file ``<digest><suffix>``; refused (``StoreFull``) before a byte is written when
        it cannot fit. Then the bounds are enforced (it is never the one evicted)."""
        with self._lock:
            self.admit(model, digest, len(data))
            final = self.versions_dir / digest
            if not final.is_dir():
                self.incoming_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
                tmp = Path(tempfile.mkdtemp(dir=self.incoming_dir, prefix=f".{digest[:12]}."))
                try:
                    atomic_write(tmp / f"{digest}{suffix}", data)
                    self._commit_folder(tmp, final)
                except BaseException:
                    shutil.rmtree(tmp, ignore_errors=True)
                    raise
            return self._add(model, name, digest, meta or {})

    def incoming(self, digest: str) -> Path:
        """The folder a version being downloaded is written to (kept across restarts, so
        a download resumes; counted in the quota)."""
        p = self.incoming_dir / digest
        p.mkdir(parents=True, exist_ok=True, mode=0o700)
        return p

    def drop_incoming(self, keep: str | None = None) -> None:
        """Partial downloads given up (all but ``keep``)."""
        if self.incoming_dir.is_dir():
            for p in self.incoming_dir.iterdir():
                if p.name != keep:
                    shutil.rmtree(p, ignore_errors=True)
        self._gauges()

    def commit(self, model: str, name: str, digest: str, folder: Path,
               meta: dict[str, Any] | None = None) -> Version:
        """A complete, verified download in ``folder`` becomes version ``digest`` of
        ``model`` (one rename), then the bounds are enforced."""
        with self._lock:
            final = self.versions_dir / digest
            if final.is_dir():
                shutil.rmtree(folder, ignore_errors=True)
            else:
                self._commit_folder(folder, final)
            return self._add(model, name, digest, meta or {})

    def _commit_folder(self, tmp: Path, final: Path) -> None:
        for dirpath, _, files in os.walk(tmp):
            for f in files:
                with open(os.path.join(dirpath, f), "rb") as fh:
                    os.fsync(fh.fileno())
        self.versions_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.replace(tmp, final)
        fsync_dir(self.versions_dir)

    def _add(self, model: str, name: str, digest: str, meta: dict[str, Any]) -> Version:
        m = self._model(model)
        entry = next((v for v in m["versions"] if v["digest"] == digest), None)
        if entry is None:
            entry = {"digest": digest, "name": name, "stored_at": round(time.time(), 3),
                     "meta": dict(meta)}
            m["versions"].append(entry)
            self._record(model, digest, "stored", name=name)
        else:
            entry.update(name=name, meta={**entry["meta"], **meta})
        self._sizes[digest] = folder_bytes(self.versions_dir / digest)
        self._write(self._index)
        version = self._version(model, entry)
        self.enforce(arriving=digest)
        self._gauges()
        return version

    def set_meta(self, model: str, digest: str, **meta: Any) -> None:
        with self._lock:
            m = self._index["models"].get(model)
            entry = next((v for v in (m or {}).get("versions", []) if v["digest"] == digest),
                         None)
            if entry is not None and any(entry["meta"].get(k) != v for k, v in meta.items()):
                entry["meta"].update(meta)
                self._write(self._index)

    def rename(self, model: str, digest: str, name: str) -> None:
        """The same bytes arrived under another name: the version takes the new one."""
        with self._lock:
            m = self._index["models"].get(model)
            entry = next((v for v in (m or {}).get("versions", []) if v["digest"] == digest),
                         None)
            if entry is not None and entry["name"] != name:
                entry["name"] = name
                self._write(self._index)

    def promote(self, model: str, digest: str, watch: dict[str, Any] | None = None) -> None:
        """``digest`` serves ``model`` now; what served becomes its fallback; ``watch`` is
        its watch window (``set_watch``). One atomic write of the index: a restart serves
        the one or the other, never a mix, and finds the new one still to be watched."""
        with self._lock:
            m = self._model(model)
            if m["serving"] == digest:
                return
            if m["serving"] is not None:
                m["fallback"] = m["serving"]
            m["serving"] = digest
            m["watch"] = {**watch, "digest": digest} if watch is not None else None
            if m["fallback"] == digest:
                m["fallback"] = None
            self._record(model, digest, "serving")
            self._write(self._index)
        self.enforce()

    def demote(self, model: str, digest: str, reason: str, never: bool = False,
               source: str | None = None) -> None:
        """``digest`` stops serving (a rollback): its fallback serves again; with ``never``,
        it is never to be taken again (from ``source``)."""
        with self._lock:
            m = self._model(model)
            if m["serving"] == digest:
                m["serving"], m["fallback"] = m["fallback"], None
            elif m["fallback"] == digest:
                m["fallback"] = None
            if (m.get("watch") or {}).get("digest") == digest:
                m["watch"] = None
            if never:
                m["never"][digest] = {"reason": reason, "source": source,
                                      "at": round(time.time(), 1)}
            self._record(model, digest, "rolled back" if never else "demoted", reason=reason)
            self._write(self._index)
        self.enforce()

    def refresh(self, digest: str) -> None:
        """A version's folder grew (rungs built beside a model): its size counted again,
        and the bounds enforced."""
        with self._lock:
            if digest in self._sizes:
                self._sizes[digest] = folder_bytes(self.versions_dir / digest)
        self.enforce()
        self._gauges()

    def over_quota(self) -> int:
        """Bytes over the quota after eviction (0: within it)."""
        return max(0, self.used_bytes() - self.max_bytes)


def open_store(server: Any, metrics: Any = None) -> VersionStore:
    """The store of a ``[server]`` table (``edged.config.server.ServerConfig``): under
    ``state_dir/store``, bounded by ``max_store_bytes`` and ``max_store_versions``."""
    root = (server.state_dir or default_state_dir()) / "store"
    return VersionStore(root, server.max_store_bytes, server.max_store_versions, metrics)
