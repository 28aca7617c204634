"""A client reading a reply: the header and each output as a read-only array view.

Checked like a request, because a client may be pointed at the wrong socket: a
malformed reply raises ``ValueError`` naming the frame or field, never a bare
``KeyError`` or a silently short array.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from edged.protocols.native.tensors import DTYPES, frame_buffer


def decode_reply(frames: list[Any]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Client side: header dict + outputs by name (read-only views of the frames).

    A reply that is not OK carries no outputs: its header (status, error) is returned
    with an empty dict."""
    if not frames:
        raise ValueError("empty reply: expected a JSON header frame")
    try:
        header = json.loads(bytes(frame_buffer(frames[0])))
    except ValueError as e:
        raise ValueError(f"reply frame 0 is not a JSON header: {e}") from None
    if not isinstance(header, dict) or "status" not in header:
        raise ValueError("reply frame 0 is not an edged reply header (no 'status')")
    outs: dict[str, np.ndarray] = {}
    if header.get("status") != "OK":
        return header, outs
    metas = header.get("outputs") or []
    if not isinstance(metas, list) or len(frames) < 1 + len(metas):
        raise ValueError(f"reply lists {len(metas) if isinstance(metas, list) else '?'} "
                         f"output(s) but carries {len(frames) - 1} frame(s)")
    for i, (meta, frame) in enumerate(zip(metas, frames[1:], strict=False)):
        outs[str(meta.get("name", i))] = reply_tensor(f"outputs[{i}]", meta, frame)
    return header, outs


def reply_tensor(where: str, meta: Any, frame: Any) -> np.ndarray:
    """One reply frame as the array its ``{dtype, shape}`` entry describes, or a
    ``ValueError`` naming ``where`` when the entry or the frame's length is wrong."""
    if not isinstance(meta, dict):
        raise ValueError(f"reply {where} must be an object with name, dtype, shape")
    dtype = DTYPES.get(meta.get("dtype"))
    shape = meta.get("shape")
    if dtype is None:
        raise ValueError(f"reply {where}.dtype {meta.get('dtype')!r} is not a protocol dtype")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise ValueError(f"reply {where}.shape must be a list of non-negative ints: {shape!r}")
    buf = frame_buffer(frame)
    want = math.prod(shape) * dtype.itemsize
    if buf.nbytes != want:
        raise ValueError(f"reply {where}: frame has {buf.nbytes} bytes but shape {shape} of "
                         f"{dtype.name} needs {want}")
    return np.frombuffer(buf, dtype=dtype).reshape(shape)
