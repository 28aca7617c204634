"""Sockets: bind the inference and control endpoints, CURVE, ipc permissions, and the
envelope (ROUTER identity, REQ delimiter) on the way in and out.

Why apart: everything that knows libzmq socket options and addressing lives here, so
the inference and control rooms deal in envelopes and frames only.
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

from edged.config import ServerConfig
from edged.frigate_config import FrigateConfig
from edged.runtime_dir import resolve_endpoints
from edged.server.state import StartupError

log = logging.getLogger("edged.server")

LOOPBACK_PREFIXES = ("tcp://127.", "tcp://localhost:", "tcp://[::1]:")


def is_local(endpoint: str) -> bool:
    """Only processes on this host can connect (ipc, loopback tcp)."""
    return endpoint.startswith(("ipc://", *LOOPBACK_PREFIXES))


class Endpoints:
    """The daemon's ROUTER sockets: inference endpoints and the control endpoint."""

    def __init__(self) -> None:
        self.ctx = zmq.asyncio.Context()
        self.sockets: list[zmq.asyncio.Socket] = []
        self.control: zmq.asyncio.Socket | None = None
        #: [[server.frigate]] endpoints: (its config, its bound address, its socket)
        self.frigate: list[tuple[FrigateConfig, str, zmq.asyncio.Socket]] = []
        self.endpoints: list[str] = []
        self.control_endpoint = ""
        self._auth: Any = None

    def bind(self, cfg: ServerConfig, runtime_dir: Path) -> None:
        self.endpoints = resolve_endpoints(cfg.endpoints, runtime_dir)
        server_keys = self._security(cfg)
        for ep in self.endpoints:
            self.sockets.append(self._bind_router(ep, cfg, server_keys))
        self.control_endpoint = resolve_endpoints((cfg.control,), runtime_dir)[0]
        c = self.ctx.socket(zmq.ROUTER)
        c.setsockopt(zmq.LINGER, 500)
        c.setsockopt(zmq.MAXMSGSIZE, 1 << 20)
        try:
            c.bind(self.control_endpoint)
        except zmq.ZMQError as e:
            c.close(linger=0)
            raise StartupError(f"cannot bind control endpoint {self.control_endpoint}: {e}") \
                from None
        _restrict(self.control_endpoint)
        self.control = c
        for f in cfg.frigate:
            ep = resolve_endpoints((f.endpoint,), runtime_dir)[0]
            if ep.startswith("tcp://") and not ep.startswith(LOOPBACK_PREFIXES):
                # Frigate's zmq detector cannot do CURVE: a network endpoint is plain text.
                if not cfg.insecure:
                    raise StartupError(
                        f"frigate endpoint {ep} is reachable from the network and Frigate's "
                        "zmq detector has no CURVE; use ipc:// or loopback, or set [server] "
                        "insecure = true")
                log.warning("insecure: frigate endpoint %s accepts unauthenticated clients", ep)
            # A model file travels in one frame: read it (and answer) up to twice the limit.
            cap = max(cfg.limits.hard_cap, 2 * f.max_model_bytes) if f.accept_models else None
            self.frigate.append((f, ep, self._bind_router(ep, cfg, None, cap)))

    def _security(self, cfg: ServerConfig) -> tuple[bytes, bytes] | None:
        """Refuse network endpoints without CURVE (unless insecure); start CURVE auth."""
        insecure_tcp = [e for e in self.endpoints
                        if e.startswith("tcp://") and not e.startswith(LOOPBACK_PREFIXES)]
        if insecure_tcp and cfg.curve is None:
            if not cfg.insecure:
                raise StartupError(
                    f"endpoint {insecure_tcp[0]} is reachable from the network but CURVE is "
                    "not configured; set [server.curve] (see docs/security.md) or, to accept "
                    "unauthenticated clients, [server] insecure = true")
            log.warning("insecure: %s accepts unauthenticated, unencrypted clients",
                        ",".join(insecure_tcp))
        if cfg.curve is None:
            return None
        keys = load_server_key(cfg.curve.server_secret_key)
        try:
            check_client_keys(cfg.curve.clients_dir)
        except ValueError as e:
            raise StartupError(str(e)) from None
        from zmq.auth.asyncio import AsyncioAuthenticator

        self._auth = AsyncioAuthenticator(self.ctx, log=logging.getLogger("edged.auth"))
        self._auth.start()
        self._auth.configure_curve(domain="*", location=str(cfg.curve.clients_dir))
        return keys

    def _bind_router(self, ep: str, cfg: ServerConfig,
                     server_keys: tuple[bytes, bytes] | None,
                     max_msg: int | None = None) -> zmq.asyncio.Socket:
        s = self.ctx.socket(zmq.ROUTER)
        try:
            s.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a reply is never dropped silently
            s.setsockopt(zmq.LINGER, 1000)
            # A frame above the hard cap makes libzmq drop the peer before we read it; up
            # to the cap, an oversize message is read and answered RESOURCE_EXHAUSTED.
            s.setsockopt(zmq.MAXMSGSIZE, max_msg or cfg.limits.hard_cap)
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
        _restrict(ep)
        return s

    def reload_client_keys(self, cfg: ServerConfig) -> None:
        """Re-read the allowed client keys: adds and revokes take effect now."""
        if self._auth is not None and cfg.curve is not None:
            self._auth.configure_curve(domain="*", location=str(cfg.curve.clients_dir))
            log.info("CURVE client keys reloaded from %s", cfg.curve.clients_dir)

    def close(self) -> None:
        if self._auth is not None:
            self._auth.stop()
        frigate = [s for _, _, s in self.frigate]
        for s in [*self.sockets, *frigate, *([self.control] if self.control else [])]:
            s.close(linger=500)
        self.ctx.term()
        for e in [*self.endpoints, *(ep for _, ep, _ in self.frigate), self.control_endpoint]:
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


def _restrict(endpoint: str) -> None:
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
