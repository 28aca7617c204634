"""Shared-memory frames for the native room: hand out slot rings, read the slots requests
name, reap rings.

Why a module of its own: rings belong to clients (one ROUTER identity each), live beyond any
one request, and must go away when their client does, which ZeroMQ does not tell a ROUTER.
So a ring is dropped when its process is gone (the client says its pid) or nobody has used
it for ``idle_s``; ``loop`` checks every ``check_s``, and ``close`` unlinks whatever is left
when the daemon stops. The bytes a request names are copied with one ``preadv`` into a
landing buffer per slot (see ``edged.protocols.native.shm_rings`` for why not a mapping), so
a model sees an ordinary array. ``plan`` checks a request's slots on the loop; ``read``
copies them, on the loop for small inputs and on the decode pool for those of
``OFF_LOOP_BYTES`` or more (a copy of a 1280x720 frame is milliseconds the loop would
otherwise spend not receiving: over ZeroMQ that copy happens on its I/O thread).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edged.config.server import ShmConfig
from edged.errors import InvalidArgument, NotFound, ResourceExhausted, Unavailable
from edged.model.request import Request
from edged.protocols.native.request import ShmRef
from edged.protocols.native.shm_rings import (
    NAME_RE,
    PREFIX,
    SHM_DIR,
    ShmSegment,
    align,
    available,
    segment_mode,
)
from edged.protocols.serving import Serving

log = logging.getLogger("edged.protocols.native")

#: a request naming at least this many slot bytes is read on the decode pool
OFF_LOOP_BYTES = 1 << 20


@dataclass(frozen=True)
class Read:
    """One shm input of a request, checked: where its bytes are and where they land."""

    index: int
    meta: Any  # the request's input (edged.model.request), rewritten by ``read``
    segment: ShmSegment
    ref: ShmRef
    out: np.ndarray

    @staticmethod
    def off_loop(reads: list[Read]) -> bool:
        return sum(r.ref.length for r in reads) >= OFF_LOOP_BYTES


@dataclass(eq=False)
class _Ring:
    segment: ShmSegment
    owner: bytes
    pid: int | None
    slots: int
    slot_bytes: int
    last_used: float
    #: one reusable buffer per slot the client has used (a slot is busy until its reply)
    landing: dict[int, np.ndarray] = field(default_factory=dict)


class ShmFrames:
    """Every ring the daemon has handed out, by segment name."""

    def __init__(self, state: Serving) -> None:
        self.state = state
        self._rings: dict[str, _Ring] = {}
        self._mode = 0o600

    @property
    def cfg(self) -> ShmConfig:
        return self.state.config.server.shm

    def configure(self, runtime_dir: Path) -> None:
        self._mode = segment_mode(runtime_dir)
        self._remove_orphans()

    @staticmethod
    def _remove_orphans() -> None:
        """Segments of an edged daemon that died without stopping (SIGKILL, power loss on a
        persistent /dev/shm) are this user's to remove: nobody else will."""
        if not available():
            return
        for path in SHM_DIR.glob(PREFIX + "*"):
            m = NAME_RE.match(path.name)
            try:
                if m is None or path.stat().st_uid != os.getuid():
                    continue
                pid = int(path.name.split("-")[1])
                if pid != os.getpid() and not _alive(pid):
                    path.unlink()
                    log.info("removed shared-memory segment %s of a daemon that is gone",
                             path.name)
            except (OSError, ValueError):
                continue

    def describe(self) -> dict[str, Any]:
        return {"rings": len(self._rings),
                "bytes": sum(r.segment.size for r in self._rings.values())}

    # -- the shm op -----------------------------------------------------------------------
    def op(self, ident: bytes, req: Request, local: bool) -> dict[str, Any]:
        """Reply body for ``op: shm``: a new ring, or a released one."""
        if "release" in req.shm:
            ring = self._owned(ident, req.shm["release"], "release")
            self._drop(req.shm["release"], "released")
            return {"v": 1, "id": req.id, "status": "OK", "released": ring.segment.name}
        cfg = self.cfg
        if not cfg.enabled or not available():
            raise Unavailable("shared-memory frames are off on this daemon ([server.shm] "
                              "enabled = false, or no /dev/shm); send tensors as frames")
        if not local:
            raise InvalidArgument("shared-memory frames are for clients on the daemon's host "
                                  "(ipc:// or loopback tcp endpoints); send tensors as frames")
        slots, slot_bytes = req.shm["slots"], align(req.shm["slot_bytes"])
        if slots > cfg.max_slots:
            raise InvalidArgument(f"slots {slots} exceeds the limit {cfg.max_slots}")
        size = slots * slot_bytes
        if size > cfg.max_bytes_per_client:
            raise InvalidArgument(f"a ring of {slots} x {slot_bytes} bytes = {size} exceeds the "
                                  f"per-client limit {cfg.max_bytes_per_client}")
        mine = [r for r in self._rings.values() if r.owner == ident]
        if len(mine) >= cfg.max_segments_per_client:
            raise ResourceExhausted(f"this client holds {len(mine)} rings; the limit is "
                                    f"{cfg.max_segments_per_client} (release one)")
        held = sum(r.segment.size for r in mine)
        if held + size > cfg.max_bytes_per_client:
            raise ResourceExhausted(f"this client holds {held} bytes of rings; {size} more "
                                    f"would exceed {cfg.max_bytes_per_client} (release one)")
        total = sum(r.segment.size for r in self._rings.values())
        if total + size > cfg.max_bytes:
            raise ResourceExhausted(f"the daemon holds {total} bytes of rings; {size} more "
                                    f"would exceed [server.shm] max_bytes {cfg.max_bytes}")
        try:
            seg = ShmSegment(size, self._mode)
        except OSError as e:
            raise ResourceExhausted(f"cannot create a shared-memory segment: {e}") from None
        self._rings[seg.name] = _Ring(seg, ident, req.shm.get("pid"), slots, slot_bytes,
                                      time.monotonic())
        log.debug("shm ring %s slots=%d slot_bytes=%d pid=%s", seg.name, slots, slot_bytes,
                  req.shm.get("pid"))
        return {"v": 1, "id": req.id, "status": "OK", "segment": seg.name, "size": size,
                "slots": slots, "slot_bytes": slot_bytes, "idle_s": cfg.idle_s}

    # -- requests that name slots ---------------------------------------------------------
    def plan(self, ident: bytes, req: Request) -> list[Read]:
        """Check every shm input of ``req`` (owner, bounds) and say where each lands;
        on the loop (raises the request's error)."""
        now = time.monotonic()
        reads = []
        for i, meta in enumerate(req.inputs):
            if meta.encoding != "shm":
                continue
            ref: ShmRef = meta.data
            ring = self._owned(ident, ref.segment, f"inputs[{i}]")
            ring.last_used = now
            if ref.offset + ref.length > ring.segment.size:
                raise InvalidArgument(f"inputs[{i}]: offset {ref.offset} + length {ref.length} "
                                      f"runs past the end of segment {ref.segment} "
                                      f"({ring.segment.size} bytes)")
            assert meta.dtype is not None and meta.shape is not None
            out = self._landing(ring, ref).view(meta.dtype).reshape(meta.shape)
            reads.append(Read(i, meta, ring.segment, ref, out))
        return reads

    @staticmethod
    def read(reads: list[Read]) -> None:
        """Copy the planned slots into their landing buffers and make each input an
        ordinary raw tensor; any thread (raises the request's error)."""
        for r in reads:
            got = r.segment.read_into(r.out, r.ref.offset)
            if got < 0:
                raise InvalidArgument(f"inputs[{r.index}]: segment {r.ref.segment} was "
                                      "released before its slot was read")
            if got != r.ref.length:
                raise InvalidArgument(f"inputs[{r.index}]: read {got} of {r.ref.length} bytes "
                                      f"from segment {r.ref.segment}: it was truncated")
            r.meta.encoding, r.meta.data = "raw", r.out

    def _landing(self, ring: _Ring, ref: ShmRef) -> np.ndarray:
        if ref.offset % ring.slot_bytes or ref.length > ring.slot_bytes:
            return np.empty(ref.length, np.uint8)  # not one slot: a buffer of its own
        buf = ring.landing.get(ref.offset)
        if buf is None:
            buf = ring.landing[ref.offset] = np.empty(ring.slot_bytes, np.uint8)
        return buf[:ref.length]

    def _owned(self, ident: bytes, name: str, where: str) -> _Ring:
        ring = self._rings.get(name)
        if ring is None:
            raise NotFound(f"{where}: unknown shared-memory segment {name!r} (never handed "
                           "out, released, or reaped after idling; ask for a ring with op "
                           "'shm')")
        if ring.owner != ident:
            raise InvalidArgument(f"{where}: segment {name!r} belongs to another client; use "
                                  "a ring this connection obtained with op 'shm'")
        return ring

    # -- reaping --------------------------------------------------------------------------
    async def loop(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.check_s)
            self.reap(time.monotonic())

    def reap(self, now: float) -> int:
        """Drop the rings of clients that are gone or idle; how many went."""
        gone = []
        for name, r in self._rings.items():
            if r.pid is not None and not _alive(r.pid):
                gone.append((name, f"process {r.pid} is gone"))
            elif now - r.last_used > self.cfg.idle_s:
                gone.append((name, f"unused for {self.cfg.idle_s:g} s"))
        for name, why in gone:
            self._drop(name, why)
        return len(gone)

    def _drop(self, name: str, why: str) -> None:
        ring = self._rings.pop(name, None)
        if ring is not None:
            ring.segment.close()
            log.debug("shm ring %s dropped: %s", name, why)

    def close(self) -> None:
        for name in list(self._rings):
            self._drop(name, "daemon stopping")


def _alive(pid: int) -> bool:
    """Is ``pid`` a live process? (A zombie is not: its mappings are already gone.)"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs: trust kill()
    return stat.rpartition(")")[2].split()[:1] != ["Z"]
