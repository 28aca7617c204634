"""How a tensor travels in a frame, for both directions: which dtypes may be named and
how a received frame is viewed without a copy.

Dtypes come from this fixed allow-list (never ``np.dtype(user_string)`` on text off a
socket), all little-endian, no object/void/string dtypes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: numpy names a client may use; all little-endian, no object/void/string dtypes.
DTYPES: dict[str, np.dtype] = {
    name: np.dtype(name).newbyteorder("<")
    for name in (
        "bool", "uint8", "int8", "uint16", "int16", "uint32", "int32",
        "uint64", "int64", "float16", "float32", "float64",
    )
}


def frame_buffer(frame: Any) -> memoryview:
    """A memoryview of a received frame: zero-copy for a ``zmq.Frame``, else of the bytes."""
    buf = getattr(frame, "buffer", None)
    if buf is not None:
        return buf  # zmq.Frame: zero-copy view of the received message
    return memoryview(frame)
