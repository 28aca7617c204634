"""Which process on this host is the daemon ``edged bench --threads`` measures.

Why apart: the daemon's PID comes from its control socket (``status`` has ``pid``), and
a control socket found by default may belong to another daemon (a test's, a second
instance) or to one in another PID namespace; what proves it is the daemon behind the
bench's endpoint is checked here, so ``threads`` only reads ``/proc``.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from urllib.parse import urlparse

from edged.bench.threads import PROC, TICK_MS


def started_at(pid: int) -> float:
    """When process ``pid`` started (seconds since the epoch), from ``/proc``."""
    rest = (PROC / str(pid) / "stat").read_text().rpartition(")")[2].split()
    btime = next(int(line.split()[1]) for line in (PROC / "stat").read_text().splitlines()
                 if line.startswith("btime "))
    return btime + int(rest[19]) * TICK_MS / 1000.0  # field 22: starttime


def same_endpoint(client: str, bound: str) -> bool:
    """Whether ``client`` reaches the daemon's ``bound`` endpoint: the same ipc path, or
    the same tcp port on an address of this host that the daemon bound (a wildcard bind
    is reached through any of them)."""
    if client == bound:
        return True
    if client.startswith("ipc://") and bound.startswith("ipc://"):
        return os.path.realpath(client[6:]) == os.path.realpath(bound[6:])
    if not (client.startswith("tcp://") and bound.startswith("tcp://")):
        return False
    c, b = urlparse(client), urlparse(bound.replace("//*:", "//0.0.0.0:"))
    if c.port != b.port:
        return False
    here = [a for a in _addresses(c.hostname) if _is_local(a)]
    if b.hostname in ("0.0.0.0", "::"):
        return bool(here)
    return bool(set(here) & set(_addresses(b.hostname)))


def _addresses(host: str | None) -> list[str]:
    try:
        return [str(sa[0]) for *_, sa in socket.getaddrinfo(host, None)] if host else []
    except (socket.gaierror, UnicodeError):
        return []


def _is_local(address: str) -> bool:
    """An address of this host: one a socket here can bind."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.bind((address, 0))
        return True
    except OSError:
        return False


#: how long before the daemon's state was created its process may have started (imports)
START_SLACK_S = 300.0


def daemon_pid(endpoint: str, control: str | None) -> tuple[int, str | None]:
    """The PID of the daemon behind ``endpoint``, from its control socket's ``status``
    (``control``, else ``control.sock`` next to an ipc endpoint, else the one a client
    finds by default), and a warning or None. Raises RuntimeError when the PID is no
    process of this host, or when a control socket found by default belongs to a daemon
    not bound to ``endpoint`` (given with ``control``, that is the warning: a proxy or a
    forwarded port may stand between)."""
    from edged.client.control import ControlClient, find_control
    from edged.client.errors import EdgedClientError
    from edged.errors import EdgedError

    if not (PROC / "self" / "task").is_dir():
        raise RuntimeError("it reads the daemon's threads in /proc (Linux only)")
    explicit = control is not None
    if control is None and endpoint.startswith("ipc://"):
        beside = Path(endpoint[6:]).parent / "control.sock"
        control = f"ipc://{beside}" if beside.exists() else None
    where = find_control(control)
    if where is None:
        raise RuntimeError("the daemon's PID is read from its control socket: none found; "
                           "pass --control ipc://PATH")
    if where.startswith("ipc:///") and not Path(where[6:]).exists():
        raise RuntimeError(f"no control socket at {where[6:]}")
    try:
        with ControlClient(where, timeout_s=10.0) as c:
            st = c.call("status")
    except (EdgedError, EdgedClientError) as e:
        raise RuntimeError(f"no status from the control socket {where}: {e}") from None
    pid, uptime = int(st["pid"]), float(st["uptime_s"])
    note = None
    if not any(same_endpoint(endpoint, b) for b in st.get("endpoints", [])):
        note = (f"the daemon on {where} is bound to {', '.join(st['endpoints'])}, not "
                f"{endpoint}")
        if not explicit:
            raise RuntimeError(f"{note}; pass the --control of the daemon you bench")
    try:
        begun = started_at(pid)
    except (FileNotFoundError, ProcessLookupError):
        raise RuntimeError(f"the daemon's PID {pid} is no process here: --threads needs the "
                           "daemon on this host, in this PID namespace") from None
    lag = time.time() - uptime - begun  # uptime counts from the process's start (10 ms)
    if not -2.0 <= lag <= START_SLACK_S:
        raise RuntimeError(f"process {pid} here started {lag:+.0f} s from the daemon's "
                           "start: it is another process (a daemon in another PID "
                           "namespace?); --threads needs the daemon on this host")
    return pid, note
