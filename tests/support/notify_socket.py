"""A fake systemd notify socket for tests: a real AF_UNIX datagram socket.

Use it against :class:`edged.host.systemd.Notifier` in-process or against the real
daemon in a subprocess::

    from support.notify_socket import NotifySocket

    with NotifySocket(watchdog_usec=2_000_000) as ns:
        proc = subprocess.Popen([...], env={**os.environ, **ns.env})
        ready = ns.wait_for("READY", timeout=30)
        assert ready.pid == proc.pid          # what NotifyAccess=main checks
        os.kill(proc.pid, signal.SIGHUP)
        ns.wait_for("RELOADING", timeout=10)
        ns.wait_for("READY", timeout=30)      # the READY *after* RELOADING

or as a pytest fixture (``from support.notify_socket import notify_socket`` in the
test module, or ``pytest_plugins = ["support.notify_socket"]`` in a conftest).

Why a real socket: the thing under test is the datagram format and who sends
it; the kernel attaches the sender's pid (SO_PASSCRED), exactly as systemd
sees it, so tests can also check that pings come from the main process.

Paths: AF_UNIX paths are limited to 107 bytes, and pytest's ``tmp_path`` can be
longer, so the socket lives in a short ``mkdtemp`` directory under /tmp.
"""

from __future__ import annotations

import os
import select
import shutil
import socket
import struct
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

__all__ = ["NotifyMessage", "NotifySocket", "notify_socket"]

_CREDS = struct.Struct("3i")  # struct ucred: pid, uid, gid


@dataclass(frozen=True)
class NotifyMessage:
    """One datagram: its ``KEY=VALUE`` fields, raw bytes, and sender credentials."""

    fields: dict[str, str]
    raw: bytes
    pid: int | None
    uid: int | None
    received: float = field(default_factory=time.monotonic)

    def __getitem__(self, key: str) -> str:
        return self.fields[key]

    def __contains__(self, key: object) -> bool:
        return key in self.fields

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.fields.get(key, default)


def parse_message(data: bytes) -> dict[str, str]:
    """Parse newline-separated ``KEY=VALUE`` lines the way systemd does (empty lines skipped)."""
    out: dict[str, str] = {}
    for line in data.decode("utf-8", "replace").split("\n"):
        if not line:
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise AssertionError(f"sd_notify line without '=': {line!r} in {data!r}")
        out[key] = value
    return out


class NotifySocket:
    """Binds a datagram socket and records every message sent to it.

    ``abstract=True`` binds in Linux's abstract namespace (``NOTIFY_SOCKET=@...``)
    instead of a file. ``watchdog_usec`` adds ``WATCHDOG_USEC`` to :attr:`env`
    (no ``WATCHDOG_PID``: the child's pid is unknown before it starts, and an
    absent WATCHDOG_PID means "whoever got the variable").
    """

    def __init__(self, *, abstract: bool = False, watchdog_usec: int | None = None) -> None:
        self._dir: str | None = None
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        if abstract:
            name = f"edged-test-notify-{os.getpid()}-{uuid.uuid4().hex[:12]}"
            self._sock.bind("\0" + name)
            self.address = "@" + name
        else:
            self._dir = tempfile.mkdtemp(prefix="edged-notify-", dir="/tmp")
            path = os.path.join(self._dir, "notify")
            self._sock.bind(path)
            self.address = path
        self._sock.setblocking(False)
        self.watchdog_usec = watchdog_usec
        self._messages: list[NotifyMessage] = []
        self._cursor = 0
        self._lock = threading.Lock()

    # -- what a child process needs -------------------------------------

    @property
    def env(self) -> dict[str, str]:
        """Environment variables to merge into a subprocess's environment."""
        env = {"NOTIFY_SOCKET": self.address}
        if self.watchdog_usec is not None:
            env["WATCHDOG_USEC"] = str(self.watchdog_usec)
        return env

    # -- reading ---------------------------------------------------------

    @property
    def messages(self) -> list[NotifyMessage]:
        """Every message received so far (drains the socket first), oldest first."""
        self._drain(0.0)
        with self._lock:
            return list(self._messages)

    def fields_seen(self, name: str) -> list[str]:
        """Values of ``name`` across all messages so far, in order."""
        return [m.fields[name] for m in self.messages if name in m.fields]

    def wait_for(
        self, field_name: str, timeout: float = 10.0, value: str | None = None
    ) -> NotifyMessage:
        """Wait for the next message carrying ``field_name`` (and ``value`` if given).

        "Next" means after the message the previous ``wait_for`` returned: a
        second ``wait_for("READY")`` finds the READY that follows a reload, not
        the start-up one. Raises ``TimeoutError`` listing what did arrive.
        """
        deadline = time.monotonic() + timeout
        while True:
            self._drain(0.0)
            with self._lock:
                for index in range(self._cursor, len(self._messages)):
                    msg = self._messages[index]
                    if field_name in msg.fields and (value is None or msg[field_name] == value):
                        self._cursor = index + 1
                        return msg
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                seen = [m.fields for m in self.messages]
                want = field_name if value is None else f"{field_name}={value}"
                raise TimeoutError(f"no sd_notify {want} within {timeout}s; received: {seen}")
            self._drain(min(remaining, 0.2))

    def _drain(self, wait: float) -> None:
        """Read all queued datagrams, waiting up to ``wait`` seconds for the first."""
        ready, _, _ = select.select([self._sock], [], [], wait)
        if not ready:
            return
        while True:
            try:
                data, ancdata, _flags, _addr = self._sock.recvmsg(
                    65536, socket.CMSG_SPACE(_CREDS.size)
                )
            except (BlockingIOError, InterruptedError):
                return
            pid = uid = None
            for level, kind, payload in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid, uid, _gid = _CREDS.unpack(payload[: _CREDS.size])
            msg = NotifyMessage(fields=parse_message(data), raw=data, pid=pid, uid=uid)
            with self._lock:
                self._messages.append(msg)

    # -- lifecycle -------------------------------------------------------

    def close(self) -> None:
        self._sock.close()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> NotifySocket:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@pytest.fixture
def notify_socket() -> Iterator[NotifySocket]:
    """A bound :class:`NotifySocket` (file path, no watchdog), closed after the test."""
    with NotifySocket() as ns:
        yield ns
