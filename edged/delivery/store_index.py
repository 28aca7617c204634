"""The store's records (``index.json``): each model's versions and the pointers between them.

Why apart from the folders (``store_folders``) and the bounds (``store_bounds``): the
index is the one record of which model has which versions, which one serves, which is its
fallback, which one is in its watch window (with the baseline it is judged against), which
versions are never to be taken again, and what happened to them (a bounded history). Every
move of a pointer is a change to this one document and one atomic write of it, so "which
version serves" is always one whole pointer whatever a crash interrupts. Reading it is
defensive: a damaged index costs the versions it named (a new transfer), never the daemon.

Not thread-safe by itself: the store (``edged.delivery.store``) calls it under its lock.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
from pathlib import Path
from typing import Any

from edged.delivery.atomic import atomic_write

log = logging.getLogger("edged.delivery")

FORMAT = 1
_DIGEST = re.compile(r"^[0-9a-f]{64}$")
MAX_INDEX_BYTES = 8 << 20


def is_digest(value: object) -> bool:
    return isinstance(value, str) and bool(_DIGEST.match(value))


class StoreIndex:
    """``index.json`` under the store's root, as read at open and written at each change."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / "index.json"
        self._doc = self._read()

    @property
    def models(self) -> dict[str, Any]:
        """Each model's record: ``versions`` (oldest first), ``serving``, ``fallback``,
        ``never``, ``history``, ``watch``."""
        return self._doc["models"]

    # -- reading and writing the file --------------------------------------------------
    def _read(self) -> dict[str, Any]:
        empty: dict[str, Any] = {"format": FORMAT, "models": {}}
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return empty
        except OSError as e:
            log.error("store index %s unreadable, starting empty: %s", self.path, e)
            return empty
        try:
            if len(raw) > MAX_INDEX_BYTES:
                raise ValueError(f"over {MAX_INDEX_BYTES} bytes")
            doc = json.loads(raw)
            if not isinstance(doc, dict) or not isinstance(doc.get("models"), dict):
                raise ValueError("not an index")
        except ValueError as e:
            # a damaged index costs the versions it named (a new transfer), never the daemon
            log.error("store index %s unreadable, starting empty: %s", self.path, e)
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

    def agree(self, on_disk: set[str]) -> tuple[set[str], bool]:
        """Make the index agree with the version folders ``on_disk`` (the store's crash
        cases): a version whose folder is gone is dropped, and a pointer or a watch
        window to it with it; a temporary index left by a crash is removed. The digests
        the index names, and whether it changed (the caller writes it then)."""
        with contextlib.suppress(OSError):
            for p in self.root.glob(".index.json.*.tmp"):
                p.unlink()
        named: set[str] = set()
        changed = False
        for model, m in list(self.models.items()):
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
        return named, changed

    def write(self) -> None:
        """The whole index, replaced atomically (a temporary file, fsync, rename, fsync
        of the folder)."""
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write(self.path, json.dumps(self._doc, indent=1, sort_keys=True).encode())

    # -- one model's record ------------------------------------------------------------
    def model(self, model: str) -> dict[str, Any]:
        """``model``'s record, made empty when it has none yet."""
        return self.models.setdefault(
            model, {"versions": [], "serving": None, "fallback": None, "never": {},
                    "history": [], "watch": None})

    def entry(self, model: str, digest: str) -> dict[str, Any] | None:
        """The record of version ``digest`` of ``model`` (None: the index names none)."""
        m = self.models.get(model)
        return next((v for v in (m or {}).get("versions", []) if v["digest"] == digest),
                    None)

    def referenced(self) -> set[str]:
        """Every digest some model names."""
        return {v["digest"] for m in self.models.values() for v in m["versions"]}

    def record(self, model: str, digest: str, event: str, **extra: Any) -> None:
        """One line of the model's history (bounded), kept in the index."""
        m = self.model(model)
        m["history"] = [*m["history"], {"at": round(time.time(), 1), "digest": digest,
                                         "event": event, **extra}][-50:]

    def add(self, model: str, name: str, digest: str, meta: dict[str, Any]
            ) -> dict[str, Any]:
        """``digest`` is a version of ``model`` called ``name`` (newest; its history says
        so); one it had already takes the new name and ``meta``. Its record (not written
        yet: the caller writes once its size is counted)."""
        m = self.model(model)
        entry = next((v for v in m["versions"] if v["digest"] == digest), None)
        if entry is None:
            entry = {"digest": digest, "name": name, "stored_at": round(time.time(), 3),
                     "meta": dict(meta)}
            m["versions"].append(entry)
            self.record(model, digest, "stored", name=name)
        else:
            entry.update(name=name, meta={**entry["meta"], **meta})
        return entry

    def set_meta(self, model: str, digest: str, **meta: Any) -> None:
        entry = self.entry(model, digest)
        if entry is not None and any(entry["meta"].get(k) != v for k, v in meta.items()):
            entry["meta"].update(meta)
            self.write()

    def rename(self, model: str, digest: str, name: str) -> None:
        entry = self.entry(model, digest)
        if entry is not None and entry["name"] != name:
            entry["name"] = name
            self.write()

    # -- the pointers ------------------------------------------------------------------
    def watch(self, model: str) -> dict[str, Any] | None:
        m = self.models.get(model)
        w = (m or {}).get("watch")
        return dict(w) if w is not None and w["digest"] == m["serving"] else None

    def set_watch(self, model: str, digest: str, watch: dict[str, Any] | None) -> None:
        m = self.model(model)
        if watch is None and (m.get("watch") or {}).get("digest") != digest:
            return
        m["watch"] = {**watch, "digest": digest} if watch is not None else None
        self.write()

    def never_again(self, model: str, digest: str) -> str | None:
        m = self.models.get(model)
        entry = (m or {}).get("never", {}).get(digest)
        return str(entry.get("reason")) if isinstance(entry, dict) else None

    def history(self, model: str) -> list[dict[str, Any]]:
        m = self.models.get(model)
        return [dict(h) for h in (m or {}).get("history", [])]

    def promote(self, model: str, digest: str, watch: dict[str, Any] | None) -> bool:
        """``digest`` serves, what served is its fallback, ``watch`` its window; written
        in one write. False: it served already (nothing changed)."""
        m = self.model(model)
        if m["serving"] == digest:
            return False
        if m["serving"] is not None:
            m["fallback"] = m["serving"]
        m["serving"] = digest
        m["watch"] = {**watch, "digest": digest} if watch is not None else None
        if m["fallback"] == digest:
            m["fallback"] = None
        self.record(model, digest, "serving")
        self.write()
        return True

    def demote(self, model: str, digest: str, reason: str, never: bool,
               source: str | None, keep: bool = False) -> None:
        """``digest`` stops serving (its fallback serves) or being a fallback; with
        ``never``, it is never to be taken again (from ``source``); with ``keep`` (an
        operator's rollback), it becomes the fallback of what serves now, until a newer
        version is promoted; written in one write."""
        m = self.model(model)
        if m["serving"] == digest:
            m["serving"], m["fallback"] = m["fallback"], digest if keep else None
        elif m["fallback"] == digest:
            m["fallback"] = None
        if (m.get("watch") or {}).get("digest") == digest:
            m["watch"] = None
        if never:
            m["never"][digest] = {"reason": reason, "source": source,
                                  "at": round(time.time(), 1)}
        self.record(model, digest, "rolled back" if never else "demoted", reason=reason)
        self.write()
