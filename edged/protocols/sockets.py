"""ZeroMQ for the rooms that speak it: bind a ROUTER, read its envelope, reply without waiting.

Why apart: everything that knows libzmq socket options and addressing lives here, so the
native and Frigate rooms and the control socket deal in envelopes and frames only.

Why ``Router`` and not pyzmq's asyncio sockets for the request sockets: an asyncio socket
creates, resolves and re-polls a future for every receive and every send; profiled under
8 clients on a small model that machinery was a fifth of the event loop's busy time. A
``Router`` lets the loop watch the socket's file descriptor and drains every waiting
message in one callback, and sends each reply at once without blocking.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from edged.errors import StartupError
from edged.host.ports import Where, bind_failed

log = logging.getLogger(__name__)

LOOPBACK_PREFIXES = ("tcp://127.", "tcp://localhost:", "tcp://[::1]:")


def is_local(endpoint: str) -> bool:
    """Only processes on this host can connect (ipc, loopback tcp)."""
    return endpoint.startswith(("ipc://", *LOOPBACK_PREFIXES))


def is_network(endpoint: str) -> bool:
    """A tcp endpoint other hosts can reach."""
    return endpoint.startswith("tcp://") and not endpoint.startswith(LOOPBACK_PREFIXES)


#: messages read in one callback before the loop runs anything else (then it comes back)
BURST = 64
#: a frame smaller than this is copied into its message (cheaper than zero-copy's
#: bookkeeping, pyzmq's own default threshold); a larger one is sent without a copy
COPY_BELOW = 1 << 16
# pyzmq's flags are enum members; arithmetic on them costs microseconds per message,
# on plain ints a fraction of one
_NOBLOCK = int(zmq.NOBLOCK)
_MORE_NOBLOCK = int(zmq.SNDMORE) | _NOBLOCK
_POLLIN = int(zmq.POLLIN)
_POLLOUT = int(zmq.POLLOUT)
_EVENTS = int(zmq.EVENTS)
#: libzmq's send as pyzmq's Cython socket has it (``Router._send`` says why)
_zmq_send = zmq.backend.Socket.send


class Router:
    """One bound ROUTER socket, driven by the event loop: ``on_message(router, frames)``
    for every message; ``send`` for every reply.

    libzmq's descriptor is edge-triggered and any receive or send may consume its edge,
    so a callback reads until ``EVENTS`` says nothing waits (at most ``BURST``, then it
    runs again from the loop), and a burst of sends schedules one more look. A reply the
    socket cannot take now (the peer is past its high-water mark) waits, in order, until
    the socket is writable again; nothing is dropped but for a client that went away.
    """

    def __init__(self, sock: zmq.Socket, endpoint: str,
                 on_message: Callable[[Router, list[Any]], None]) -> None:
        self.sock = sock
        self.endpoint = endpoint
        self.on_message = on_message
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: deque[list[Any]] = deque()
        self._looking = False
        self._reading = False  # ``_ready`` is reading: it looks at EVENTS again itself
        self._raw_send = functools.partial(_zmq_send, sock)

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.sock.FD, self._ready)
        self._look()  # messages that arrived before the reader was added raise no edge

    def waiting(self) -> bool:
        """A message waits to be read (asked by a batcher that may compute inline)."""
        return bool(self.sock.get(_EVENTS) & _POLLIN)

    def send(self, envelope: list[bytes], frames: list[Any]) -> None:
        """Queue a reply without waiting; a failure is logged, never raised.

        A send may take the descriptor's edge for a message that arrived meanwhile: a send
        made while ``_ready`` reads (a reply computed inline) leaves the next look to its
        loop; any other looks at ``EVENTS`` itself and schedules ``_ready`` only when
        something waits (not one more turn of the event loop per reply)."""
        msg = [*envelope, *frames]
        if self._pending or not self._send(msg):
            if not self._pending:
                log.debug("router %s: a client is past its high-water mark; its replies "
                          "wait in order", self.endpoint)
            self._pending.append(msg)
            self._look()
        elif not self._reading and self.sock.get(_EVENTS) & _POLLIN:
            self._look()

    def _send(self, msg: list[Any]) -> bool:
        """Sent (or failed for good, logged); False: the socket cannot take it now.

        Frame by frame, as ``send_multipart`` does, without its per-frame checks: only
        the first frame can meet the high-water mark (libzmq counts whole messages).
        libzmq's own send (pyzmq's Cython method): pyzmq's Python ``send`` around it only
        handles options a reply never uses."""
        send = self._raw_send
        try:
            last = len(msg) - 1
            for i, part in enumerate(msg):
                big = getattr(part, "nbytes", 0) >= COPY_BELOW
                send(part, _NOBLOCK if i == last else _MORE_NOBLOCK, not big)
        except zmq.Again:
            return False
        except zmq.ZMQError as e:
            _send_failed(e)
        return True

    def _look(self) -> None:
        """Run ``_ready`` once more from the loop: a send may have taken the edge."""
        if not self._looking and self._loop is not None:
            self._looking = True
            self._loop.call_soon(self._ready)

    def _ready(self) -> None:
        self._looking = False
        self._reading = True
        try:
            self._read()
        finally:
            self._reading = False

    def _read(self) -> None:
        sock = self.sock
        try:
            for _ in range(BURST):
                events = sock.get(_EVENTS)
                if self._pending and events & _POLLOUT:
                    while self._pending and self._send(self._pending[0]):
                        self._pending.popleft()
                if not events & _POLLIN:
                    return
                frame = sock.recv(_NOBLOCK, copy=False)
                frames = [frame]
                while frame.more:  # the rest of a message has arrived with its first frame
                    frame = sock.recv(0, copy=False)
                    frames.append(frame)
                try:
                    self.on_message(self, frames)
                except Exception:  # nothing a client sends may stop the loop
                    log.exception("unhandled error while handling a message")
            self._look()  # more wait: after what else the loop has to do
        except zmq.Again:
            return
        except zmq.ZMQError as e:  # the socket was closed under us: the room is stopping
            log.debug("router %s: %s", self.endpoint, e)

    def close(self) -> None:
        if self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self.sock.FD)
        close([self.sock], [self.endpoint])


def bind_router(ctx: zmq.Context | zmq.asyncio.Context, ep: str, max_msg: int,
                server_keys: tuple[bytes, bytes] | None = None,
                where: Where | None = None) -> zmq.Socket:
    """A ROUTER bound on ``ep`` (a plain socket, for a ``Router``); ``StartupError``
    naming it, and ``where`` (the config key and flag that set it), when it cannot be
    bound."""
    s = zmq.Context.shadow(ctx.underlying).socket(zmq.ROUTER)
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
        raise StartupError(bind_failed(ep, e, where or Where("the endpoint"))) from None
    restrict(ep)
    return s


def close(sockets: list[zmq.Socket], endpoints: list[str]) -> None:
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
