"""Which daemons run on this host, and whether one answers at an address, asked at once.

Why apart from ``discover``: ``ControlClient()`` (no endpoint) must find its daemon by the
same rule as the ``edged`` command (refuse to guess between two), and ``discover`` itself
asks daemons through ``ControlClient``; both import this module, which imports neither.

Why a probe: a ZeroMQ ``connect`` never fails (it retries in the background), so a client
of a daemon that is not running learned so only when its timeout ran out (10 s for
``edged infer``). A socket file that refuses, or a TCP port that refuses, says it at once.
"""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path

from edged.client.errors import EdgedClientError
from edged.host.runtime_dir import CONTROL_SOCKET_NAME, runtime_dir_candidates


class Ambiguous(EdgedClientError):
    """Two or more daemons could be meant; the message names them and the flag to use."""


class NotFound(EdgedClientError):
    """No daemon could be found; the message says where the command looked."""


class Unreachable(EdgedClientError):
    """Nothing answers at the address a command was given; the message says what to do."""


def answers(control: str) -> bool:
    """Whether something accepts connections on an ``ipc://`` socket path: a socket file
    left by a daemon that died refuses, so it is not mistaken for a running one."""
    path = control[len("ipc://"):] if control.startswith("ipc://") else ""
    if not path.startswith("/"):
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        try:
            s.connect(path)
        except OSError:
            return False
    return True


def running_controls() -> list[str]:
    """The control sockets that answer, in the places a daemon puts its runtime
    directory (``edged.host.runtime_dir``), each once."""
    seen: set[str] = set()
    found = []
    for d in runtime_dir_candidates():
        sock = d / CONTROL_SOCKET_NAME
        with contextlib.suppress(OSError):
            key = str(sock.resolve())
            if key in seen or not sock.exists():
                continue
            seen.add(key)
            if answers(f"ipc://{sock}"):
                found.append(f"ipc://{sock}")
    return found


def the_running_control() -> str | None:
    """The one daemon's control socket that answers here; None when none does, and
    ``Ambiguous`` naming them all when several do (never the newest by a guess)."""
    found = running_controls()
    if len(found) > 1:
        raise Ambiguous(f"{len(found)} daemons are running and none was named: "
                        f"{', '.join(found)}. Pick one with --control ipc://PATH (or set "
                        "EDGED_CONTROL)")
    return found[0] if found else None


def probe(address: str, flag: str = "--endpoint", timeout_s: float = 0.5) -> None:
    """Raise ``Unreachable`` at once when nothing listens at ``address`` (an ``ipc://``
    path that is missing or refuses, a TCP port that refuses); anything else passes
    (an abstract socket, a host that does not answer within ``timeout_s``: the request's
    own timeout says the rest)."""
    fix = f"start it (`edged serve --config FILE`) or name another with {flag}"
    if address.startswith("ipc://"):
        path = address[len("ipc://"):]
        if not path.startswith("/"):
            return
        if not Path(path).exists():
            raise Unreachable(f"no daemon at {address}: the socket file does not exist; {fix}")
        if not answers(address):
            raise Unreachable(f"no daemon at {address}: the socket file is left from one "
                              f"that stopped; {fix}")
        return
    if not address.startswith("tcp://"):
        return
    host, _, port = address[len("tcp://"):].rpartition(":")
    host = host.strip("[]").replace("*", "127.0.0.1").replace("0.0.0.0", "127.0.0.1")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return
    except ConnectionRefusedError:
        raise Unreachable(f"no daemon at {address}: nothing listens on port {port}; "
                          f"{fix}") from None
    except (OSError, ValueError):
        return
