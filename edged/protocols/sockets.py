"""ZeroMQ for the rooms that speak it: bind a ROUTER, read its envelope, reply without waiting.

Why apart: everything that knows libzmq socket options and addressing lives here, so the
native, Frigate and control rooms deal in envelopes and frames only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from edged.errors import StartupError

log = logging.getLogger("edged.server")

LOOPBACK_PREFIXES = ("tcp://127.", "tcp://localhost:", "tcp://[::1]:")


def is_local(endpoint: str) -> bool:
    """Only processes on this host can connect (ipc, loopback tcp)."""
    return endpoint.startswith(("ipc://", *LOOPBACK_PREFIXES))


def is_network(endpoint: str) -> bool:
    """A tcp endpoint other hosts can reach."""
    return endpoint.startswith("tcp://") and not endpoint.startswith(LOOPBACK_PREFIXES)


def bind_router(ctx: zmq.asyncio.Context, ep: str, max_msg: int,
                server_keys: tuple[bytes, bytes] | None = None) -> zmq.asyncio.Socket:
    """A ROUTER bound on ``ep``; ``StartupError`` naming it when it cannot be bound."""
    s = ctx.socket(zmq.ROUTER)
    try:
        s.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a reply is never dropped silently
        s.setsockopt(zmq.LINGER, 1000)
        # A frame above the hard cap makes libzmq drop the peer before we read it; up
        # to the cap, an oversize message is read and answered RESOURCE_EXHAUSTED.
        s.setsockopt(zmq.MAXMSGSIZE, max_msg)
        # Per peer: unread messages libzmq may buffer (each up to max_message_bytes).
        s.setsockopt(zmq.RCVHWM, 1000)
        s.setsockopt(zmq.SNDHWM, 1000)
        if server_keys is not None and ep.startswith("tcp://"):
            s.curve_publickey, s.curve_secretkey = server_keys
            s.curve_server = True
        s.bind(ep)
    except zmq.ZMQError as e:
        s.close(linger=0)
        raise StartupError(f"cannot bind {ep}: {e}") from None
    restrict(ep)
    return s


def close(sockets: list[zmq.asyncio.Socket], endpoints: list[str]) -> None:
    """Close ``sockets`` and remove the ``ipc://`` files of ``endpoints``."""
    for s in sockets:
        s.close(linger=500)
    for e in endpoints:
        if e.startswith("ipc:///"):
            with contextlib.suppress(OSError):
                os.unlink(e[len("ipc://"):])


def split_envelope(frames: list[Any]) -> tuple[list[bytes], list[Any]]:
    """ROUTER frames -> (reply envelope, message body). A REQ client's empty delimiter
    frame is kept in the envelope so its reply carries it back."""
    first = frames[0]
    envelope: list[bytes] = [first.bytes if isinstance(first, zmq.Frame) else first]
    body = frames[1:]
    if body and len(body[0]) == 0:
        envelope.append(b"")
        body = body[1:]
    return envelope, body


def send(sock: zmq.asyncio.Socket, envelope: list[bytes], frames: list[Any]) -> None:
    """Queue a reply without waiting; a failure is logged, never raised."""
    try:
        fut = sock.send_multipart([*envelope, *frames], copy=False)
    except zmq.ZMQError as e:
        _send_failed(e)
        return
    if fut.done():
        _check_send(fut)
    else:
        fut.add_done_callback(_check_send)


def _check_send(fut: asyncio.Future[Any]) -> None:
    if fut.cancelled():
        return
    e = fut.exception()
    if e is not None:
        _send_failed(e)


def _send_failed(e: BaseException) -> None:
    if isinstance(e, zmq.ZMQError) and e.errno == zmq.EHOSTUNREACH:
        log.debug("client went away before its reply")  # costs nothing else
    else:
        log.warning("reply not sent: %s", e)


def restrict(endpoint: str) -> None:
    """An ``ipc://`` socket file is for the daemon's group only (0660)."""
    if endpoint.startswith("ipc:///"):
        os.chmod(endpoint[len("ipc://"):], 0o660)


def load_server_key(path: Path) -> tuple[bytes, bytes]:
    """The server's CURVE key pair, or a one-line StartupError naming the file."""
    from zmq.auth import load_certificate

    try:
        public, secret = load_certificate(str(path))
    except (OSError, ValueError) as e:
        raise StartupError(f"{path}: not a CURVE certificate: {e}") from None
    if secret is None:
        raise StartupError(f"{path}: holds no secret key (use the *.key_secret file written "
                           "by `edged keys generate`)")
    return public, secret


def check_client_keys(clients_dir: Path) -> None:
    """Raise ValueError naming the file if any allowed-client certificate is malformed."""
    from zmq.auth import load_certificates

    try:
        load_certificates(str(clients_dir))
    except (OSError, ValueError) as e:
        raise ValueError(f"{clients_dir}: cannot read the allowed client keys: {e}") from None
