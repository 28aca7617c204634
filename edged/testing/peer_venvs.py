"""The peers' throwaway virtualenvs: what each kind of server needs installed, built once
and cached outside the repository (the running servers are ``peers.Peer``).

Why throwaway venvs outside the repository: each server brings hundreds of MB of
dependencies whose pins (protobuf, grpcio, uvloop, fastapi) conflict with edged's own, so
none of them is installed beside edged. A venv is created on first use by
:func:`peer_python` under :func:`cache_root` (``$EDGED_PEERS_CACHE``, else
``$XDG_CACHE_HOME/edged-peers``, else ``~/.cache/edged-peers``), keyed by the pinned
requirements and the base interpreter, from PyPI with pip, so a clean machine builds it
the first time (20-60 s each, pip's progress printed) and reuses it after. Creation
holds a file lock (two test processes never build one venv twice) and the venv counts
only once its marker file is written (an interrupted install is rebuilt, never used).
Anything that stops a venv from being built is :class:`PeerUnavailable` with the reason,
which a test turns into a skip.

Why Triton's venv is made from the system interpreter (``/usr/bin/python3``): its python
backend's stub process links the system ``libpython3``, and a venv of another build of
the same Python version loads that build's standard library on top of it and fails.
MLServer is pinned to ``uvloop<0.22``: with 0.22+ its inference worker finds no event
loop at start and the server exits.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

KINDS = ("triton", "mlserver", "kserve")
#: the interpreter Triton's python backend links (its stub loads this libpython)
SYSTEM_PYTHON = Path("/usr/bin/python3")
#: seconds a venv's pip install may take (downloads included)
INSTALL_TIMEOUT_S = 1800.0

Progress = Callable[[str], None]


class PeerUnavailable(RuntimeError):
    """A peer could not be built or started here; the message says why (a test skips)."""


@dataclass(frozen=True)
class PeerSpec:
    """What one kind of server needs installed, and from which interpreter."""

    kind: str
    requirements: tuple[str, ...]
    #: build the venv from :data:`SYSTEM_PYTHON` (Triton) rather than this interpreter
    system_python: bool = False


def _onnxruntime_pin() -> str:
    """The peers run the ONNX Runtime edged runs, so a comparison compares servers."""
    try:
        import onnxruntime

        return f"onnxruntime=={onnxruntime.__version__}"
    except ImportError:
        return "onnxruntime"


def specs() -> dict[str, PeerSpec]:
    ort = _onnxruntime_pin()
    return {
        "triton": PeerSpec("triton", ("nvidia-pytriton==0.7.0", ort), system_python=True),
        "mlserver": PeerSpec("mlserver", ("mlserver==1.7.1", "uvloop<0.22", ort)),
        "kserve": PeerSpec("kserve", ("kserve==0.21.0", ort)),
    }


def spec(kind: str) -> PeerSpec:
    """``kind``'s spec; an unknown kind is a ValueError naming the known ones."""
    try:
        return specs()[kind]
    except KeyError:
        raise ValueError(f"unknown peer {kind!r}; expected one of {', '.join(KINDS)}") from None


def cache_root() -> Path:
    """Where the peers' venvs live (never inside the repository)."""
    if os.environ.get("EDGED_PEERS_CACHE"):
        return Path(os.environ["EDGED_PEERS_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "edged-peers"


def say(line: str) -> None:
    """The default progress: a line on stderr, now."""
    print(line, file=sys.stderr, flush=True)


def _base_python(spec: PeerSpec) -> Path:
    if spec.system_python:
        if not SYSTEM_PYTHON.exists():
            raise PeerUnavailable(f"{spec.kind}: needs the system Python {SYSTEM_PYTHON} (its "
                                  "server's python backend links the system libpython)")
        return SYSTEM_PYTHON
    return Path(getattr(sys, "_base_executable", sys.executable))


def _interpreter_id(python: Path) -> str:
    r = subprocess.run([str(python), "-c", "import sys; print(sys.version)"],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise PeerUnavailable(f"{python} does not run: {r.stderr.strip()[-300:]}")
    return r.stdout.strip()


def venv_dir(spec: PeerSpec) -> Path:
    """The venv's directory: the kind and a hash of what decides its contents."""
    base = _base_python(spec)
    key = json.dumps([spec.requirements, str(base.resolve()), _interpreter_id(base)])
    return cache_root() / f"{spec.kind}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


@contextlib.contextmanager
def _locked(path: Path, what: str, progress: Progress) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"peers: waiting for another process building {what}")
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def peer_python(kind: str, progress: Progress = say) -> Path:
    """The python of ``kind``'s venv, built first if it is not there yet."""
    s = spec(kind)
    root = venv_dir(s)
    python = root / "bin" / "python"
    marker = root / ".complete"
    if marker.exists():
        return python
    with _locked(root.with_name(root.name + ".lock"), f"the {kind} venv", progress):
        if marker.exists():  # built by the process we waited for
            return python
        _build(s, root, progress)
        return python


def installed_versions(kind: str, python: Path) -> dict[str, str]:
    """``kind``'s pinned packages as installed in the venv of ``python`` (for a report)."""
    wanted = {r.split("=")[0].split("<")[0].lower() for r in spec(kind).requirements}
    got = {}
    freeze = python.parent.parent / ".complete"  # the marker holds the venv's pip freeze
    for line in freeze.read_text().splitlines() if freeze.exists() else ():
        name, sep, version = line.partition("==")
        if sep and name.lower() in wanted:
            got[name] = version
    return got


def _build(spec: PeerSpec, root: Path, progress: Progress) -> None:
    shutil.rmtree(root, ignore_errors=True)  # an interrupted build is never reused
    base = _base_python(spec)
    progress(f"peers: creating the {spec.kind} venv in {root} from {base} "
             f"({' '.join(spec.requirements)}); this takes a minute or so, once")
    t0 = time.monotonic()
    r = subprocess.run([str(base), "-m", "venv", str(root)], capture_output=True, text=True,
                       timeout=300)
    if r.returncode != 0:
        raise PeerUnavailable(f"{spec.kind}: `{base} -m venv` failed (on Debian: apt-get "
                              f"install python3-venv): {r.stderr.strip()[-500:]}")
    cmd = [str(root / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check",
           "--no-input", "--progress-bar", "off", *spec.requirements]
    tail = _run_streaming(cmd, f"peers: {spec.kind}: ", progress, INSTALL_TIMEOUT_S)
    if tail is not None:
        shutil.rmtree(root, ignore_errors=True)
        raise PeerUnavailable(f"{spec.kind}: pip install {' '.join(spec.requirements)} "
                              f"failed: {tail}")
    freeze = subprocess.run([str(root / "bin" / "python"), "-m", "pip", "freeze"],
                            capture_output=True, text=True, timeout=120).stdout
    (root / ".complete").write_text(freeze)
    progress(f"peers: the {spec.kind} venv is ready ({time.monotonic() - t0:.0f} s)")


def _run_streaming(cmd: list[str], prefix: str, progress: Progress,
                   timeout: float) -> str | None:
    """Run ``cmd``, passing each line it prints to ``progress``; None on success, else the
    end of its output."""
    lines: list[str] = []
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except OSError as e:
        return str(e)
    watchdog = threading.Timer(timeout, p.kill)  # pip stuck without a line to read
    watchdog.start()
    try:
        assert p.stdout is not None
        for line in p.stdout:
            line = line.rstrip()
            lines.append(line)
            if line.startswith(("Collecting", "Installing", "Successfully", "ERROR")):
                progress(prefix + line)
        code = p.wait()
    finally:
        timed_out = not watchdog.is_alive()
        watchdog.cancel()
    if code == 0 and not timed_out:
        return None
    if timed_out:
        lines.append(f"(stopped after {timeout:.0f} s)")
    return "\n".join(lines[-15:])
