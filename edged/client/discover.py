"""Which daemon a command talks to, found the same way by every command.

Why one rule: with two daemons running, ``edged status`` used to read the newest runtime
directory's control socket while ``edged health`` and ``edged models`` went to
``tcp://127.0.0.1:5555``, two different daemons, without a word. Here every command
resolves its daemon in one order:

1. what the command line names (``--endpoint``, ``--control``);
2. the environment (``EDGED_ENDPOINT``, ``EDGED_CONTROL``);
3. the config (``--config``): a control socket it pins down (an absolute ``ipc://`` path
   or ``[server] runtime_dir``), else the running daemon that serves that file;
4. a guess: the one daemon whose control socket answers in the places a daemon puts its
   runtime directory. The guess is said aloud; two or more running daemons are never
   guessed between (``Ambiguous`` names them and the flag that picks one).

An inference endpoint is asked of the daemon found through its control socket (the
``status`` reply lists its endpoints), so ``edged health`` and ``edged status`` without
flags always reach the same daemon.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edged.client.daemons import (
    Ambiguous,
    NotFound,
    Unreachable,
    answers,
    probe,
    running_controls,
)
from edged.host.runtime_dir import CONTROL_SOCKET_NAME, ipc_path, runtime_dir_candidates

__all__ = ["Ambiguous", "Found", "NotFound", "Running", "Unreachable", "answers",
           "find_daemon", "find_endpoint", "probe", "running_controls"]

#: used when nothing names a daemon and no control socket answers (the shipped config's)
DEFAULT_ENDPOINT = "tcp://127.0.0.1:5555"


@dataclass(frozen=True)
class Found:
    """The address a command uses, and how it came to it."""

    address: str
    #: how it was chosen, for the line a guess prints ("the only running daemon ...")
    how: str
    #: True when nothing named the daemon: the command says which one it talked to
    guessed: bool


@dataclass(frozen=True)
class Running:
    """A daemon whose control socket answered, and what its ``status`` says of it."""

    control: str
    pid: int | None
    config: str | None
    endpoints: tuple[str, ...]

    def label(self) -> str:
        return f"{self.control} (pid {self.pid}, config {self.config})"


def describe(control: str, timeout_s: float = 3.0) -> Running:
    """Ask the daemon at ``control`` for its pid, config and inference endpoints."""
    from edged.client.control import ControlClient

    try:
        with ControlClient(control, timeout_s) as c:
            r = c.call("status", raise_on_error=False)
    except Exception:  # a daemon that does not answer is still listed, without details
        return Running(control, None, None, ())
    return Running(control, r.get("pid"), r.get("config"), tuple(r.get("endpoints") or ()))


def inference_endpoint(d: Running, prefer_tcp: bool = False) -> str | None:
    """The endpoint a client on this host should use: an ``ipc://`` socket (no network,
    no CURVE), else a TCP one; TCP first when the client brings CURVE keys."""
    ipc = [e for e in d.endpoints if e.startswith("ipc://")]
    tcp = [e for e in d.endpoints if e.startswith("tcp://")]
    order = [*tcp, *ipc] if prefer_tcp else [*ipc, *tcp]
    return order[0] if order else None


def _config_control(config: Any) -> str | None:
    """The control socket a config pins down, or None when it depends on where the daemon
    was started (a relative ``ipc://`` path and no ``runtime_dir``)."""
    control = config.server.control
    if control.startswith(("ipc:///", "ipc://@")):
        return str(control)
    if config.server.runtime_dir is not None:
        return ipc_path(control, Path(config.server.runtime_dir))
    return None


def _pick(candidates: list[Running], flag: str, env: str, config: Any) -> Running:
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        where = ", ".join(str(d / CONTROL_SOCKET_NAME) for d in runtime_dir_candidates()[:4])
        serving = f" serving {config.file}" if config is not None else ""
        raise NotFound(f"no running daemon{serving} found (looked for a control socket that "
                       f"answers in {where or 'the runtime directories'}); start one with "
                       f"`edged serve --config FILE`, or name it with {flag}")
    names = "; ".join(d.label() for d in candidates)
    raise Ambiguous(f"{len(candidates)} daemons are running and none was named: {names}. "
                    f"Pick one with {flag} (or set {env})")


def find_daemon(*, control: str | None = None, config_path: str | Path | None = None,
                environ: Mapping[str, str] | None = None,
                ) -> tuple[Found, Running | None]:
    """The control endpoint of the daemon a command means (see the module docstring), and
    what it said of itself when it had to be asked."""
    env = os.environ if environ is None else environ
    if control:
        return Found(control, "--control", False), None
    if env.get("EDGED_CONTROL"):
        return Found(env["EDGED_CONTROL"], "$EDGED_CONTROL", False), None
    config = _load(config_path)
    if config is not None:
        pinned = _config_control(config)
        if pinned is not None:
            return Found(pinned, f"{config.file}'s [server] control", False), None
    candidates = [describe(c) for c in running_controls()]
    if config is not None:
        candidates = [d for d in candidates if d.config == str(config.file)]
    d = _pick(candidates, "--control ipc://PATH", "EDGED_CONTROL", config)
    how = (f"the daemon serving {config.file}" if config is not None
           else "the only running daemon")
    return Found(d.control, how, True), d


def find_endpoint(*, endpoint: str | None = None, control: str | None = None,
                  config_path: str | Path | None = None, prefer_tcp: bool = False,
                  environ: Mapping[str, str] | None = None) -> Found:
    """The inference endpoint a command means: ``--endpoint``, ``$EDGED_ENDPOINT``, else
    one of the endpoints of the daemon ``find_daemon`` finds; with no daemon to ask, the
    config's first endpoint a client can reach, else ``DEFAULT_ENDPOINT``."""
    env = os.environ if environ is None else environ
    if endpoint:
        return Found(endpoint, "--endpoint", False)
    if env.get("EDGED_ENDPOINT"):
        return Found(env["EDGED_ENDPOINT"], "$EDGED_ENDPOINT", False)
    try:
        found, running = find_daemon(control=control, config_path=config_path, environ=env)
    except NotFound:
        config = _load(config_path)
        fixed = _reachable(config.server.endpoints) if config is not None else None
        if fixed is not None:
            return Found(fixed, f"{config.file}'s [server] endpoints (no control socket "
                                "answered)", True)
        return Found(DEFAULT_ENDPOINT, "the default endpoint (no control socket answered)",
                     True)
    if running is None:
        running = describe(found.address)
    address = inference_endpoint(running, prefer_tcp)
    if address is None:
        raise NotFound(f"the daemon at {found.address} lists no inference endpoint; pass "
                       "--endpoint")
    return Found(address, f"{found.how} (pid {running.pid}, control {found.address})",
                 found.guessed)


def _reachable(endpoints: tuple[str, ...]) -> str | None:
    """A config endpoint a client can use without the daemon's runtime directory."""
    for e in endpoints:
        if e.startswith("tcp://") or e.startswith("ipc:///"):
            return e.replace("tcp://0.0.0.0:", "tcp://127.0.0.1:")
    return None


def _load(config_path: str | Path | None) -> Any:
    if config_path is None:
        return None
    from edged.config.file import load_config

    return load_config(config_path)
