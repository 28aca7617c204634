"""Opening a client's DEALER socket: what the sync, async and control clients share.

Key files are read once, when a client is made, so a wrong path fails there and a
reconnect after a timeout cannot fail on them later.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq


@dataclass(frozen=True)
class CurveKeys:
    """The server's public key and this client's key pair (ZeroMQ CURVE, docs/security.md)."""

    server_public: bytes
    public: bytes
    secret: bytes


def load_curve_keys(server_public_key: str | Path | None,
                    client_secret_key: str | Path | None) -> CurveKeys | None:
    if server_public_key is None and client_secret_key is None:
        return None
    if server_public_key is None or client_secret_key is None:
        raise ValueError("CURVE needs both the server's public key and a client key pair")
    from zmq.auth import load_certificate

    server_pub, _ = load_certificate(str(server_public_key))
    pub, sec = load_certificate(str(client_secret_key))
    if sec is None:
        raise ValueError(f"{client_secret_key} holds no secret key (use *.key_secret)")
    return CurveKeys(server_pub, pub, sec)


def open_dealer(ctx: zmq.Context[Any], endpoint: str, keys: CurveKeys | None,
                send_timeout_ms: int | None) -> Any:
    """A connected DEALER. ``send_timeout_ms`` bounds a send with no connected peer (daemon
    down, CURVE handshake refused), which would otherwise block; None for asyncio sockets,
    whose callers bound the whole exchange instead."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if send_timeout_ms is not None:
        sock.setsockopt(zmq.SNDTIMEO, send_timeout_ms)
    if keys is not None:
        sock.curve_serverkey = keys.server_public
        sock.curve_publickey = keys.public
        sock.curve_secretkey = keys.secret
    try:
        sock.connect(endpoint)
    except zmq.ZMQError as e:
        sock.close(linger=0)
        raise ValueError(f"cannot connect to {endpoint!r}: {e}") from None
    return sock
