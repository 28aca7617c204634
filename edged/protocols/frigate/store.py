"""The models Frigate sent, as one endpoint sees them in the daemon's one model store.

Why a view and not a store of its own: every version that arrives on a device goes into
``edged.delivery.store`` (one quota, one eviction rule, one index a restart reads), and a
model file Frigate sends is one kind of version. Frigate names a model by its file's
basename and a changed file with the same name is a different model, so a version here is
the file's bytes under their SHA-256 (``<sha256>.onnx`` in the version's folder, its rungs
beside it), named by the basename Frigate sent, of the endpoint's model
``frigate@ENDPOINT``; the same bytes under another name are stored once.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from edged.backends.support.sidecar import sha256_file
from edged.delivery.store import Version, VersionStore

__all__ = ["FrigateModels", "StoredModel", "check_name"]

#: what a stored model's name may look like (a file's basename, as Frigate sends it)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,199}$")
SUFFIX = ".onnx"


def check_name(name: object) -> str | None:
    """Why ``name`` cannot name a stored model (None: it can)."""
    if not isinstance(name, str) or not name:
        return "model_name must be a non-empty string"
    if not _NAME.match(name):
        return (f"model_name {name[:80]!r} must be a file name: letters, digits, '.', '_', "
                "'+', '-', at most 200 characters, no path")
    return None


@dataclass(frozen=True)
class StoredModel:
    name: str
    sha256: str
    path: Path
    model_type: str


def _stored(v: Version) -> StoredModel:
    return StoredModel(v.name, v.digest, v.file(f"{v.digest}{SUFFIX}"),
                       str(v.meta.get("model_type", "")))


class FrigateModels:
    """One ``accept_models`` endpoint's versions (its model is ``frigate@ENDPOINT``)."""

    def __init__(self, store: VersionStore, model: str) -> None:
        self.store = store
        self.model = model

    def get(self, name: str) -> StoredModel | None:
        """The newest version sent as ``name`` whose file is present, else None."""
        v = self.store.find(self.model, name)
        if v is None:
            return None
        s = _stored(v)
        return s if s.path.is_file() else None

    def by_digest(self, sha256: str) -> StoredModel | None:
        v = self.store.get(self.model, sha256)
        return _stored(v) if v is not None and _stored(v).path.is_file() else None

    def verify(self, stored: StoredModel) -> bool:
        """The file still hashes to its name (a disk error or an edit would not)."""
        return sha256_file(stored.path) == stored.sha256

    def last_served(self) -> StoredModel | None:
        """The version the endpoint served last (preloaded at start)."""
        v = self.store.serving(self.model)
        return _stored(v) if v is not None and _stored(v).path.is_file() else None

    def fallback(self) -> StoredModel | None:
        """The version the endpoint served before the one it serves."""
        v = self.store.fallback(self.model)
        return _stored(v) if v is not None and _stored(v).path.is_file() else None

    def never_again(self, sha256: str) -> str | None:
        """Why these bytes are never served again here (they were rolled back), or None."""
        return self.store.never_again(self.model, sha256)

    def rolled_back(self, stored: StoredModel, why: str) -> None:
        self.store.demote(self.model, stored.sha256, why, never=True, source="frigate")

    def admit(self, sha256: str, size: int) -> None:
        """``StoreFull`` when a new file of ``size`` bytes cannot fit the store's bounds."""
        self.store.admit(self.model, sha256, size)

    def put(self, name: str, data: bytes, sha256: str, model_type: str) -> StoredModel:
        """Store ``data`` as a version named ``name`` (``StoreFull`` when it cannot fit)."""
        why = check_name(name)
        if why:
            raise ValueError(why)
        v = self.store.put_file(self.model, name, data, sha256, SUFFIX,
                                {"model_type": model_type, "source": "frigate"})
        return _stored(v)

    def rename(self, stored: StoredModel, name: str) -> StoredModel:
        self.store.rename(self.model, stored.sha256, name)
        return StoredModel(name, stored.sha256, stored.path, stored.model_type)

    def retype(self, stored: StoredModel, model_type: str) -> None:
        """Record that the version is served as ``model_type`` (Frigate's header said so)."""
        self.store.set_meta(self.model, stored.sha256, model_type=model_type)

    def served(self, stored: StoredModel) -> None:
        """The endpoint serves ``stored`` now (for the next start; what served before is
        its fallback, kept by the store's bounds)."""
        self.store.promote(self.model, stored.sha256)

    def adopt_legacy(self, state_dir: Path, address: str) -> StoredModel | None:
        """The model this endpoint served under the store of edged before the one store
        (``STATE_DIR/frigate/index.json`` + ``models/<sha256>.onnx``): moved into this
        store, with the rungs built beside it, so an upgraded device serves it again
        without a transfer. None when there is none (blocking)."""
        old = state_dir / "frigate"
        try:
            index = json.loads((old / "index.json").read_text())
            name = index["endpoints"][address]
            entry = index["names"][name]
            sha, model_type = str(entry["sha256"]), str(entry.get("model_type", ""))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        src = old / "models" / f"{sha}{SUFFIX}"
        if check_name(name) or not re.fullmatch(r"[0-9a-f]{64}", sha) or not src.is_file():
            return None
        data = src.read_bytes()
        if hashlib.sha256(data).hexdigest() != sha:
            return None
        stored = self.put(name, data, sha, model_type)
        for p in (old / "models").glob(f"{sha}.*"):
            if p.name != src.name and p.is_file():
                os.replace(p, stored.path.parent / p.name)
        src.unlink()
        self.served(stored)
        self.grew(stored)
        return stored

    def grew(self, stored: StoredModel) -> None:
        """Rungs were written beside the model: counted, and the bounds enforced."""
        self.store.refresh(stored.sha256)
