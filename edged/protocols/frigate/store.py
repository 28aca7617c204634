"""Model files that clients sent, kept content-addressed under the state directory.

Why content-addressed: Frigate names a model by its file's basename, and a changed file
with the same name is a different model; storing bytes under their SHA-256 and keeping
a small ``name -> hash`` index means a re-sent name replaces what it points at, the same
bytes are stored once, and a half-written file can never be served (each file and the
index are written to a temporary file, fsynced and renamed into place).

Layout under ``root``::

    models/<sha256>.onnx     the bytes as sent
    index.json               {"names": {NAME: {"sha256", "model_type", "stored_at"}},
                              "endpoints": {ENDPOINT: NAME}}
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("edged.model_store")

#: what a stored model's name may look like (a file's basename, as Frigate sends it)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,199}$")
_HASH = re.compile(r"^[0-9a-f]{64}$")
MAX_INDEX_BYTES = 4 << 20


def check_name(name: object) -> str | None:
    """Why ``name`` cannot name a stored model (None: it can)."""
    if not isinstance(name, str) or not name:
        return "model_name must be a non-empty string"
    if not _NAME.match(name):
        return (f"model_name {name[:80]!r} must be a file name: letters, digits, '.', '_', "
                "'+', '-', at most 200 characters, no path")
    return None


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
class StoredModel:
    name: str
    sha256: str
    path: Path
    model_type: str


class ModelStore:
    """One state directory's stored models; used from one thread at a time per call."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.models_dir = self.root / "models"
        self.index_path = self.root / "index.json"

    def _index(self) -> dict[str, Any]:
        try:
            raw = self.index_path.read_bytes()
        except FileNotFoundError:
            return {"names": {}, "endpoints": {}}
        if len(raw) > MAX_INDEX_BYTES:
            raise ValueError(f"{self.index_path}: over {MAX_INDEX_BYTES} bytes")
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError(f"{self.index_path}: not a JSON object")
        names = data.get("names") if isinstance(data.get("names"), dict) else {}
        endpoints = data.get("endpoints") if isinstance(data.get("endpoints"), dict) else {}
        return {"names": names, "endpoints": endpoints}

    def _read_index(self) -> dict[str, Any]:
        """The index, or an empty one (logged) when it is unreadable: a damaged index
        costs a new transfer, never the daemon."""
        try:
            return self._index()
        except (OSError, ValueError) as e:
            log.error("model store index unreadable, starting empty: %s", e)
            return {"names": {}, "endpoints": {}}

    def get(self, name: str) -> StoredModel | None:
        """The model stored under ``name`` whose file is present and intact, else None."""
        entry = self._read_index()["names"].get(name)
        if not isinstance(entry, dict) or not _HASH.match(str(entry.get("sha256", ""))):
            return None
        path = self.models_dir / f"{entry['sha256']}.onnx"
        if not path.is_file():
            return None
        return StoredModel(name, entry["sha256"], path, str(entry.get("model_type", "")))

    def verify(self, stored: StoredModel) -> bool:
        """The file still hashes to its name (a disk error or an edit would not)."""
        h = hashlib.sha256()
        with stored.path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest() == stored.sha256

    def last_for(self, endpoint: str) -> StoredModel | None:
        """The model an endpoint served last (preloaded at start)."""
        name = self._read_index()["endpoints"].get(endpoint)
        return self.get(name) if isinstance(name, str) else None

    def put(self, name: str, data: bytes, model_type: str) -> StoredModel:
        """Store ``data`` under its hash and point ``name`` at it (atomic)."""
        why = check_name(name)
        if why:
            raise ValueError(why)
        sha = hashlib.sha256(data).hexdigest()
        self.models_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = self.models_dir / f"{sha}.onnx"
        if not path.is_file():
            atomic_write(path, data)
        index = self._read_index()
        index["names"][name] = {"sha256": sha, "model_type": model_type,
                                "stored_at": round(time.time(), 3)}
        self._write_index(index)
        return StoredModel(name, sha, path, model_type)

    def retype(self, name: str, model_type: str) -> None:
        """Record that ``name`` is served as ``model_type`` (Frigate's header said so)."""
        index = self._read_index()
        entry = index["names"].get(name)
        if isinstance(entry, dict) and entry.get("model_type") != model_type:
            entry["model_type"] = model_type
            self._write_index(index)

    def served_by(self, endpoint: str, name: str) -> None:
        """Remember which stored model an endpoint serves (for the next start)."""
        index = self._read_index()
        if index["endpoints"].get(endpoint) == name:
            return
        index["endpoints"][endpoint] = name
        self._write_index(index)

    def _write_index(self, index: dict[str, Any]) -> None:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write(self.index_path, json.dumps(index, indent=1, sort_keys=True).encode())


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
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
