"""Where ``ipc://`` sockets live, and how a relative ipc endpoint maps into it."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from edged.errors import ConfigError

#: A private runtime directory made when the environment names none: ``/tmp/edged-XXXX``.
TEMP_PREFIX = "edged-"
#: Where systemd's ``RuntimeDirectory=edged`` puts it (systemd/edged.service).
SYSTEM_RUNTIME_DIR = Path("/run/edged")
#: The control socket's file name for the default ``[server] control = "ipc://control.sock"``.
CONTROL_SOCKET_NAME = "control.sock"


def environment_runtime_dir() -> Path | None:
    """$RUNTIME_DIRECTORY (set by systemd; its first entry), else $XDG_RUNTIME_DIR/edged."""
    if os.environ.get("RUNTIME_DIRECTORY"):
        return Path(os.environ["RUNTIME_DIRECTORY"].split(":")[0])
    if os.environ.get("XDG_RUNTIME_DIR"):
        return Path(os.environ["XDG_RUNTIME_DIR"]) / "edged"
    return None


def runtime_dir_candidates() -> list[Path]:
    """Where a running daemon's runtime directory may be, for a client that was not told:
    the one this environment would choose (as ``resolve_runtime_dir``), systemd's, the
    user's, then private temp dirs newest first. Only lists; creates nothing."""
    found: list[Path] = []
    env = environment_runtime_dir()
    for d in (env, SYSTEM_RUNTIME_DIR):
        if d is not None and d not in found:
            found.append(d)
    if os.environ.get("XDG_RUNTIME_DIR"):
        user = Path(os.environ["XDG_RUNTIME_DIR"]) / "edged"
        if user not in found:
            found.append(user)
    temps = Path(tempfile.gettempdir()).glob(TEMP_PREFIX + "*")
    found.extend(sorted((d for d in temps if d.is_dir()), key=_mtime, reverse=True))
    return found


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:  # removed while listing
        return 0.0


def resolve_runtime_dir(configured: Path | None, made: list[Path] | None = None) -> Path:
    """Config/flag, else $RUNTIME_DIRECTORY (systemd), else $XDG_RUNTIME_DIR/edged, else a
    private temp dir. Created 0750 so only the owner and the group may connect; a folder
    this call created is appended to ``made`` (``remove_made`` takes it away at stop)."""
    d = configured or environment_runtime_dir()
    if d is None:
        d = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX))
        if made is not None:
            made.append(d)
    try:
        if not d.exists():
            d.mkdir(mode=0o750, parents=True)
            d.chmod(0o750)  # mkdir's mode is masked by the umask
            if made is not None:
                made.append(d)
    except OSError as e:
        raise ConfigError([f"runtime directory {d}: cannot create it: {e.strerror or e}"]) from None
    if d.stat().st_mode & 0o022:
        # Never chmod an existing directory (it could be /tmp itself): refuse it instead.
        raise ConfigError([f"runtime directory {d} is writable by group or others "
                           f"(mode {d.stat().st_mode & 0o7777:04o}): anyone could replace the "
                           "sockets; use a private directory (0750) or let edged create one"])
    if not os.access(d, os.W_OK | os.X_OK):
        raise ConfigError([f"runtime directory {d} is not writable by this user "
                           f"(uid {os.getuid()}); set [server] runtime_dir or --runtime-dir"])
    return d


def ipc_path(endpoint: str, runtime_dir: Path) -> str:
    """``ipc://name.sock`` -> ``ipc://<runtime_dir>/name.sock``; absolute paths stay."""
    rest = endpoint[len("ipc://"):]
    if rest.startswith(("/", "@")):
        return endpoint
    return f"ipc://{runtime_dir / rest}"


def resolve_endpoints(endpoints: tuple[str, ...], runtime_dir: Path) -> list[str]:
    return [ipc_path(e, runtime_dir) if e.startswith("ipc://") else e for e in endpoints]


def remove_made(made: list[Path]) -> None:
    """Remove the runtime folders ``resolve_runtime_dir`` created, once the daemon has
    closed (and so unlinked) its sockets: a clean stop leaves no empty ``/tmp/edged-*``
    behind. A folder something else put a file in stays."""
    for d in reversed(made):
        with contextlib.suppress(OSError):
            d.rmdir()
    made.clear()
