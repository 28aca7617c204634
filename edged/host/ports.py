"""Why a listener could not be bound, said so a person can fix it.

Why here: every listener the daemon opens (``[server] endpoints``, ``[[server.frigate]]
endpoint``, ``[server.kserve] grpc``/``http``, ``[metrics] listen``) fails the same way
when its port is taken, and each used to say it differently (a gRPC ``RuntimeError``, a
ZeroMQ "Address already in use", an ``OSError`` with the port but no key). One function
turns any of them into one sentence: the port, which process holds it (psutil, when this
user may see it), and the config key or command-line flag that moves it.
"""

from __future__ import annotations

import contextlib
import errno
import re
import socket
from dataclasses import dataclass

#: a TCP address as the config writes it: ``tcp://HOST:PORT``, ``HOST:PORT``, ``[::1]:PORT``
_ADDRESS = re.compile(r"^(?:tcp://)?\[?(?P<host>[^\]]*?)\]?:(?P<port>\d+)$")


@dataclass(frozen=True)
class Where:
    """What asked for a listener: the config key and, when there is one, the flag that
    replaces it (``--metrics HOST:PORT``)."""

    key: str
    flag: str | None = None
    file: str | None = None

    def fix(self) -> str:
        where = f"{self.key} in {self.file}" if self.file else self.key
        return f"change {where}" + (f" or pass {self.flag}" if self.flag else "")


def port_of(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a TCP address, None for anything else (``ipc://``...)."""
    m = _ADDRESS.match(address.strip())
    if m is None:
        return None
    return (m.group("host") or "0.0.0.0").replace("*", "0.0.0.0"), int(m.group("port"))


def holder(port: int) -> str | None:
    """``pid 1234 (edged serve --config config.toml)`` for the process listening on
    ``port``; None when nothing listens or its owner is hidden from this user."""
    try:
        import psutil

        conns = psutil.net_connections(kind="inet")
    except Exception:  # no permission on this platform, or psutil missing: say less
        return None
    for c in conns:
        if c.status == "LISTEN" and c.laddr and c.laddr.port == port and c.pid:
            with contextlib.suppress(Exception):
                cmd = " ".join(psutil.Process(c.pid).cmdline()) or "?"
                return f"pid {c.pid} ({_short(cmd)})"
            return f"pid {c.pid}"
    return None


def _short(cmd: str, limit: int = 80) -> str:
    return cmd if len(cmd) <= limit else cmd[: limit - 3] + "..."


def in_use(host: str, port: int) -> bool:
    """Whether binding ``host:port`` fails because the port is taken now."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            return e.errno == errno.EADDRINUSE
    return False


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, to suggest in a message."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host if ":" not in host else "127.0.0.1", 0))
        return int(s.getsockname()[1])


def bind_failed(address: str, error: BaseException | str, where: Where) -> str:
    """One sentence for a listener that could not be bound on ``address``: when its
    port is taken, which port, who holds it and what to change; else the error as is."""
    hp = port_of(address)
    text = getattr(error, "strerror", None) or str(error)
    if hp is None:
        return f"{where.key} = {address}: cannot bind: {text}; {where.fix()}"
    host, port = hp
    taken = (getattr(error, "errno", None) == errno.EADDRINUSE or "in use" in str(error)
             or in_use(host, port))
    if not taken:
        return f"{where.key} = {address}: cannot bind: {text}; {where.fix()}"
    who = holder(port)
    by = f" by {who}" if who else ""
    return (f"port {port} ({where.key} = {address}) is already in use{by}; "
            f"{where.fix()} (port {free_port(host)} is free now)")
