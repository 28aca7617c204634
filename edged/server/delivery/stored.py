"""What the server's delivery reads of a version in the store, and says of one that serves.

Why a module of its own: the start, the switch and the watch window each read a stored
version's manifest and tell the board (``edged.delivery.board``) which version serves, the
same way; here they share it without importing each other.
"""

from __future__ import annotations

from typing import Any

from edged.delivery.bundle import MANIFEST, Manifest, read_manifest
from edged.delivery.store import Version
from edged.server.state import ServerState


def stored_manifest(v: Version) -> Manifest:
    """The manifest in version ``v``'s folder."""
    return read_manifest(v.file(MANIFEST).read_bytes())


def served(state: ServerState, name: str, v: Version, manifest: Manifest, how: str) -> None:
    """Model ``name`` serves ``v`` now (``how``: promoted, restored)."""
    mc = state.config.model(name)
    state.board.served(name, manifest.version, v.digest,
                       mc.source.url if mc and mc.source else v.meta.get("source"), how)
    state.board.entry(name, rollback_target=rollback_target(state, name))


def rollback_target(state: ServerState, name: str) -> dict[str, Any] | None:
    """The stored version ``edged ctl rollback`` would serve (the store's fallback, never
    evicted), for ``edged status``; None when there is none."""
    fb = state.store.fallback(name) if state.store is not None else None
    return {"version": fb.name, "digest": fb.digest} if fb is not None else None
