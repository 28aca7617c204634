"""Shared-memory frames: slot rings in POSIX shared memory (``/dev/shm``) for clients on
the daemon's host (docs/protocol.md, "Shared memory").

Why this shape: the daemon creates every segment (so it alone unlinks them, at expiry,
when the client's process is gone, and at stop), hands its name to one client, and
*reads* a slot with ``os.preadv`` on its own file descriptor rather than through a
mapping. A read past the end of a file a client has truncated is a short read the
daemon can answer INVALID_ARGUMENT; a mapping would take SIGBUS and the daemon with
it. The client maps the segment and writes frames into slots; a slot is its own again
once the reply to the request that named it has arrived.

Nothing here touches sockets: ``ShmSegment`` is the daemon side of one segment,
``SlotRing`` the client side.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import secrets
import stat
import threading
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

#: where POSIX shm_open puts segments on Linux; None of this exists elsewhere
SHM_DIR = Path("/dev/shm")
PREFIX = "edged-"
#: names the daemon makes: prefix, its pid, 16 random hex digits (never guessable)
NAME_RE = re.compile(r"^edged-[0-9]{1,10}-[0-9a-f]{16}$")
#: slots start on this boundary, so every dtype is aligned for the runtimes
ALIGN = 64


def available() -> bool:
    """Shared-memory frames need a tmpfs ``/dev/shm`` (Linux)."""
    return SHM_DIR.is_dir() and os.access(SHM_DIR, os.W_OK | os.X_OK)


def align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def segment_mode(runtime_dir: Path) -> int:
    """The runtime directory's permissions, as a file: read-write for the owner, and for
    the group when the group may enter the directory (and so reach the ipc socket)."""
    d = runtime_dir.stat().st_mode
    return stat.S_IRUSR | stat.S_IWUSR | (
        stat.S_IRGRP | stat.S_IWGRP if d & stat.S_IXGRP else 0)


class ShmSegment:
    """The daemon's side of one segment: created, read with preadv, unlinked."""

    def __init__(self, size: int, mode: int) -> None:
        self.name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(8)}"
        self.path = SHM_DIR / self.name
        self.size = size
        #: held by a read and by close: a large slot is read on the decode pool while the
        #: loop may drop the ring, and a closed descriptor number can be reused at once
        self._lock = threading.Lock()
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
        try:
            os.fchmod(self.fd, mode)  # open's mode is masked by the umask
            os.ftruncate(self.fd, size)  # sparse: pages cost memory once written
        except OSError:
            self.close()
            raise

    def read_into(self, out: np.ndarray, offset: int) -> int:
        """Copy ``out.nbytes`` bytes from ``offset`` into ``out``; the bytes actually read
        (fewer if the file was truncated under us, -1 if the segment is closed). Any
        thread."""
        view = memoryview(out).cast("B")
        got = 0
        with self._lock:
            if self.fd < 0:
                return -1
            while got < view.nbytes:
                n = os.preadv(self.fd, [view[got:]], offset + got)
                if n <= 0:
                    break
                got += n
        return got

    def close(self) -> None:
        """Unlink the name and close the descriptor (idempotent)."""
        try:
            self.path.unlink(missing_ok=True)
        finally:
            with self._lock:
                if self.fd >= 0:
                    os.close(self.fd)
                    self.fd = -1


class SlotRing:
    """The client's side: a mapped segment cut into equal slots, handed out in turn.

    A slot is taken by ``put`` and given back with ``release`` once the reply to the
    request that named it has arrived (the daemon has read it by then)."""

    def __init__(self, segment: str, slots: int, slot_bytes: int) -> None:
        if not NAME_RE.match(segment):
            raise ValueError(f"not an edged segment name: {segment!r}")
        self.segment = segment
        self.slots = slots
        self.slot_bytes = slot_bytes
        fd = os.open(SHM_DIR / segment, os.O_RDWR | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            if size < slots * slot_bytes:
                raise ValueError(f"segment {segment} holds {size} bytes, not {slots} slots of "
                                 f"{slot_bytes}")
            self._map: mmap.mmap | None = mmap.mmap(fd, slots * slot_bytes)
        finally:
            os.close(fd)
        self._free: deque[int] = deque(range(slots))

    @property
    def free(self) -> int:
        return len(self._free)

    def fits(self, nbytes: int) -> bool:
        return nbytes <= self.slot_bytes

    def put(self, arr: np.ndarray) -> dict[str, Any] | None:
        """Copy ``arr`` into a free slot; the input description naming it, or None when
        every slot is in flight (send this one as a socket frame instead)."""
        if not self._free or arr.nbytes > self.slot_bytes or self._map is None:
            return None
        slot = self._free.popleft()
        offset = slot * self.slot_bytes
        dst = np.frombuffer(self._map, dtype=arr.dtype, count=arr.size, offset=offset)
        np.copyto(dst.reshape(arr.shape), arr, casting="no")
        return {"encoding": "shm", "segment": self.segment, "offset": offset,
                "length": int(arr.nbytes), "dtype": arr.dtype.name, "shape": list(arr.shape)}

    def release(self, meta: dict[str, Any]) -> None:
        slot = meta["offset"] // self.slot_bytes
        if slot not in self._free:
            self._free.append(slot)

    def close(self) -> None:
        if self._map is not None:
            with contextlib.suppress(BufferError):  # a view is still held: the GC frees it
                self._map.close()
            self._map = None
