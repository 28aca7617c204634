"""What the sync and async clients share for shared-memory frames (``shm=True``).

Why socket frames stay the fallback: a ring may be refused (the daemon is on another
host, shm is off, a limit is reached), every slot may be in flight, or a tensor may not
fit a slot; each of those requests simply goes as frames. A ring the daemon reaped
after idling answers NOT_FOUND naming its segment: the client drops it and asks for a
fresh one once.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np

from edged.client.messages import Reply
from edged.protocols.native.shm_rings import SlotRing, align, available
from edged.protocols.native.tensors import DTYPES

log = logging.getLogger("edged.client")

#: a ring's slots are at least this large, so frames a little larger still fit
MIN_SLOT_BYTES = 1 << 20


class ShmSlots:
    """A client's ring (obtained lazily) and the rewriting of requests into its slots."""

    def __init__(self, slots: int = 8) -> None:
        self.slots = slots
        self.ring: SlotRing | None = None
        #: why shm is off for this client (then every request goes as frames)
        self.disabled: str | None = None if available() else "no /dev/shm on this host"

    @property
    def wanted(self) -> bool:
        return self.ring is None and self.disabled is None

    def ask(self, frames: list[Any]) -> dict[str, Any]:
        """The ``op: shm`` header for a ring whose slots hold the largest of ``frames``."""
        largest = max((memoryview(f).nbytes for f in frames), default=0)
        return {"op": "shm", "slots": self.slots,
                "slot_bytes": align(max(MIN_SLOT_BYTES, largest)), "pid": os.getpid()}

    def adopt(self, reply: Reply) -> None:
        """Map the ring a ``shm`` reply hands out, or remember why there is none."""
        if not reply.ok:
            self.disabled = f"{reply.status}: {reply.error}"
            log.info("shared-memory frames refused, sending frames: %s", self.disabled)
            return
        h = reply.header
        try:
            self.ring = SlotRing(str(h["segment"]), int(h["slots"]), int(h["slot_bytes"]))
        except (KeyError, OSError, ValueError) as e:
            self.disabled = f"cannot map the daemon's ring: {e}"
            log.info("shared-memory frames unusable, sending frames: %s", self.disabled)

    def place(self, header: dict[str, Any],
              frames: list[Any]) -> tuple[dict[str, Any], list[Any], list[dict[str, Any]]]:
        """Move the raw tensors of a request into slots; returns the header and frames to
        send and the slots taken (give them to ``release`` after the reply)."""
        ring = self.ring
        if ring is None:
            return header, frames, []
        metas, sent, taken = [], [], []
        it = iter(frames)
        for meta in header["inputs"]:
            frame = next(it)
            placed = None
            if meta.get("encoding", "raw") == "raw" and meta.get("dtype") in DTYPES:
                arr = np.frombuffer(frame, DTYPES[meta["dtype"]]).reshape(meta["shape"])
                placed = ring.put(arr)
            if placed is None:
                metas.append(meta)
                sent.append(frame)
                continue
            if "name" in meta:
                placed["name"] = meta["name"]
            metas.append(placed)
            taken.append(placed)
        return {**header, "inputs": metas}, sent, taken

    def release(self, taken: list[dict[str, Any]]) -> None:
        if self.ring is not None:
            for meta in taken:
                if meta["segment"] == self.ring.segment:
                    self.ring.release(meta)

    def stale(self, reply: Reply) -> bool:
        """The daemon no longer knows our ring (reaped after idling): drop it."""
        ring = self.ring
        if ring is not None and reply.status == "NOT_FOUND" and ring.segment in (reply.error or ""):
            self.drop()
            return True
        return False

    def drop(self) -> str | None:
        """Forget the ring (after a socket reset the daemon sees a new client); its name."""
        ring, self.ring = self.ring, None
        if ring is None:
            return None
        ring.close()
        return ring.segment
