"""Clients for edged: ``Client`` (blocking), ``AsyncClient`` (asyncio, pipelined) and
``ControlClient`` (operator actions), with one exception class per reply status.

    from edged.client import Client, DeadlineExceeded
    with Client("tcp://127.0.0.1:5555") as c:
        r = c.infer("digits", x, timeout_ms=50)   # raises DeadlineExceeded if late
        print(r.variant, r.timing, r.outputs["logits"])

docs/protocol.md describes the wire format these speak, for clients in other languages.
"""

from edged.client.aio import AsyncClient
from edged.client.control import ControlClient, find_control
from edged.client.daemons import Ambiguous
from edged.client.errors import (
    STATUS_ERRORS,
    ClientTimeout,
    DeadlineExceeded,
    Dropped,
    EdgedClientError,
    Internal,
    InvalidArgument,
    NotFound,
    ProtocolViolation,
    ResourceExhausted,
    Unavailable,
    UnsupportedVersion,
    error_for,
)
from edged.client.messages import Reply, build_infer, parse_reply
from edged.client.sync import Client
from edged.protocols.native.detections import Detections

__all__ = [
    "STATUS_ERRORS",
    "Ambiguous",
    "AsyncClient",
    "Client",
    "ClientTimeout",
    "ControlClient",
    "DeadlineExceeded",
    "Detections",
    "Dropped",
    "EdgedClientError",
    "Internal",
    "InvalidArgument",
    "NotFound",
    "ProtocolViolation",
    "Reply",
    "ResourceExhausted",
    "Unavailable",
    "UnsupportedVersion",
    "build_infer",
    "error_for",
    "find_control",
    "parse_reply",
]
