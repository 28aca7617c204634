"""What the clients send and get back, independent of any socket.

``build_infer`` turns arrays, image files and encoded bytes into a request; ``Reply``
wraps a decoded reply so both clients (sync and async) hand out the same object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edged.client.errors import ProtocolViolation, error_for
from edged.protocols.native import VERSION
from edged.protocols.native.client_decode import decode_reply
from edged.protocols.native.detections import Detections, decode_detections
from edged.protocols.native.tensors import DTYPES


@dataclass
class Reply:
    """One reply: the header as sent, outputs by name, detections when the model is a
    detector. Non-OK replies carry no outputs; ``raise_for_status`` turns them into the
    status's exception."""

    header: dict[str, Any]
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    detections: Detections | None = None

    @property
    def status(self) -> str:
        return str(self.header.get("status"))

    @property
    def ok(self) -> bool:
        return self.status == "OK"

    @property
    def id(self) -> str | int | None:
        rid: str | int | None = self.header.get("id")
        return rid

    @property
    def variant(self) -> str | None:
        """The variant that computed this reply (changes when the governor swaps)."""
        v: str | None = self.header.get("variant")
        return v

    @property
    def timing(self) -> dict[str, int]:
        """``queue_us``, ``compute_us``, ``batch`` (rows in the batch) and ``total_us``."""
        t: dict[str, int] = self.header.get("timing") or {}
        return t

    @property
    def error(self) -> str | None:
        e: str | None = self.header.get("error")
        return e

    def raise_for_status(self) -> Reply:
        """This reply if OK, else raise the exception for its status."""
        if not self.ok:
            raise error_for(self.header)
        return self


def parse_reply(frames: list[Any]) -> Reply:
    """Frames off the socket (after any envelope) -> Reply; ProtocolViolation if malformed."""
    try:
        header, outputs = decode_reply(frames)
        detections = decode_detections(header, frames)
    except ValueError as e:
        raise ProtocolViolation(str(e)) from None
    return Reply(header, outputs, detections)


def build_infer(model: str, inputs: Any, **opts: Any) -> tuple[dict[str, Any], list[Any]]:
    """Header and frames for an infer request.

    ``inputs``: one array, a dict name -> array, an image path, or (encoding, bytes).
    ``opts`` become header keys (``id``, ``timeout_ms``, ``priority``, ``stream``,
    ``outputs``, ...); the daemon rejects unknown keys by name."""
    metas: list[dict[str, Any]] = []
    frames: list[Any] = []
    items: list[tuple[str | None, Any]]
    items = list(inputs.items()) if isinstance(inputs, dict) else [(None, inputs)]
    for i, (name, val) in enumerate(items):
        where = f"input {name!r}" if name is not None else f"input {i}"
        meta: dict[str, Any] = {}
        if name is not None:
            meta["name"] = name
        if isinstance(val, (str, Path)):
            p = Path(val)
            enc = {".jpg": "jpeg", ".jpeg": "jpeg", ".png": "png"}.get(p.suffix.lower())
            if enc is None:
                raise ValueError(f"{where}: {p}: only .jpg/.jpeg/.png images can be sent as files")
            meta["encoding"] = enc
            frames.append(p.read_bytes())
        elif isinstance(val, tuple) and len(val) == 2 and isinstance(val[0], str):
            meta["encoding"] = val[0]
            frames.append(bytes(val[1]))
        else:
            a = np.require(val, requirements="C")  # keeps rank 0 (ascontiguousarray does not)
            if a.dtype.name not in DTYPES:
                raise ValueError(f"{where}: dtype {a.dtype} is not one the protocol carries "
                                 f"({', '.join(DTYPES)})")
            if a.dtype.byteorder == ">":
                a = a.astype(a.dtype.newbyteorder("<"))
            meta.update(dtype=a.dtype.name, shape=list(a.shape))
            frames.append(a.data if a.nbytes else b"")
        metas.append(meta)
    header = {"op": "infer", "model": model, "inputs": metas, **opts}
    return header, frames


def with_version(header: dict[str, Any], request_id: str | int) -> dict[str, Any]:
    """The header as sent: ``v`` first (a caller's own ``v`` wins, to test other versions)
    and the id the client allocated unless the caller chose one."""
    h = {"v": VERSION, **header}
    h.setdefault("id", request_id)
    return h
