"""Where ``ipc://`` sockets live, and how a relative ipc endpoint maps into it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from edged.errors import ConfigError


def resolve_runtime_dir(configured: Path | None) -> Path:
    """Config/flag, else $RUNTIME_DIRECTORY (systemd), else $XDG_RUNTIME_DIR/edged, else a
    private temp dir. Created 0750 so only the owner and the group may connect."""
    if configured is not None:
        d = configured
    elif os.environ.get("RUNTIME_DIRECTORY"):
        d = Path(os.environ["RUNTIME_DIRECTORY"].split(":")[0])
    elif os.environ.get("XDG_RUNTIME_DIR"):
        d = Path(os.environ["XDG_RUNTIME_DIR"]) / "edged"
    else:
        d = Path(tempfile.mkdtemp(prefix="edged-"))
    try:
        if not d.exists():
            d.mkdir(mode=0o750, parents=True)
            d.chmod(0o750)  # mkdir's mode is masked by the umask
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
