"""Real KServe v2 servers as peers: NVIDIA Triton, Seldon MLServer and KServe's ModelServer,
each serving one ONNX model on loopback free ports, in a throwaway virtualenv of its own.

Why real servers: edged's offload and its benchmark are about servers nobody here wrote;
a second edged as the remote tests only what edged already agrees with. Each server
answers refusals, errors and metadata its own way (``docs/kserve.md``, "Offloading to
Triton, MLServer and KServe"), so the suite and ``edged bench --peer`` run the real ones.

Why throwaway venvs outside the repository: each server brings hundreds of MB of
dependencies whose pins (protobuf, grpcio, uvloop, fastapi) conflict with edged's own, so
none of them is installed beside edged. A venv is created on first use by
:func:`peer_python` under :func:`cache_root` (``$EDGED_PEERS_CACHE``, else
``$XDG_CACHE_HOME/edged-peers``, else ``~/.cache/edged-peers``), keyed by the pinned
requirements and the base interpreter, from PyPI with pip, so a clean machine builds it
the first time (20-60 s each, pip's progress printed) and reuses it after. Creation
holds a file lock (two test processes never build one venv twice) and the venv counts
only once its marker file is written (an interrupted install is rebuilt, never used).
Anything that stops a peer from being built or started is :class:`PeerUnavailable` with
the reason, which a test turns into a skip.

What each needs, and why it is set up as it is:

- **Triton**: ``nvidia-pytriton`` bundles the C++ ``tritonserver`` with only its *python*
  backend (no ONNX Runtime backend is on PyPI), so the model is a python-backend model
  whose ``model.py`` runs the ONNX file with ``onnxruntime``; Triton itself does the
  protocol, dynamic batching and the checks of dtypes, shapes and ``max_batch_size``.
  The venv is made from the system interpreter (``/usr/bin/python3``): the backend's stub
  process links the system ``libpython3``, and a venv of another build of the same
  Python version loads that build's standard library on top of it and fails.
- **MLServer**: a small runtime class (MLServer has no ONNX runtime) and ``uvloop<0.22``
  (with 0.22+ its inference worker finds no event loop at start and the server exits).
  No adaptive batching (MLServer's default).
- **KServe**: a ``kserve.Model`` subclass run by ``ModelServer``, which binds every
  interface with no option to change it: the start script binds it to loopback (a test
  machine is shared). No batching (ModelServer has none).

The server-side files (Triton's ``model.py``, MLServer's runtime, KServe's start script)
are in ``peer_servers/``; each runs in its peer's venv, copied into the peer's work
directory (nothing is written beside them). Every peer runs its ONNX Runtime session with
``threads`` intra-op threads (the default, 0, lets ORT take the usable cores as it does
out of the box) and states the model's tensors in its metadata. Triton refuses a request
of more than ``max_batch_size`` rows itself; MLServer's and KServe's model classes refuse
it the way those servers refuse any request they cannot run (HTTP 500 / INTERNAL).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edged.testing.harness import free_port

KINDS = ("triton", "mlserver", "kserve")
#: the interpreter Triton's python backend links (its stub loads this libpython)
SYSTEM_PYTHON = Path("/usr/bin/python3")
#: seconds a server gets from start to ready (a cold start imports a lot)
START_TIMEOUT_S = 120.0
#: seconds a venv's pip install may take (downloads included)
INSTALL_TIMEOUT_S = 1800.0

Progress = Callable[[str], None]


class PeerUnavailable(RuntimeError):
    """A peer could not be built or started here; the message says why (a test skips)."""


class _PortTaken(RuntimeError):
    """The server could not bind a port chosen free a moment before."""


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


def cache_root() -> Path:
    """Where the peers' venvs live (never inside the repository)."""
    if os.environ.get("EDGED_PEERS_CACHE"):
        return Path(os.environ["EDGED_PEERS_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "edged-peers"


def _say(line: str) -> None:
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


def peer_python(kind: str, progress: Progress = _say) -> Path:
    """The python of ``kind``'s venv, built first if it is not there yet."""
    spec = _spec(kind)
    root = venv_dir(spec)
    python = root / "bin" / "python"
    marker = root / ".complete"
    if marker.exists():
        return python
    with _locked(root.with_name(root.name + ".lock"), f"the {kind} venv", progress):
        if marker.exists():  # built by the process we waited for
            return python
        _build(spec, root, progress)
        return python


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


# -- the model a peer serves ------------------------------------------------------------------

#: ONNX Runtime's tensor types -> KServe v2 datatypes
_DATATYPES = {
    "tensor(float)": "FP32", "tensor(float16)": "FP16", "tensor(double)": "FP64",
    "tensor(uint8)": "UINT8", "tensor(int8)": "INT8", "tensor(uint16)": "UINT16",
    "tensor(int16)": "INT16", "tensor(int32)": "INT32", "tensor(uint32)": "UINT32",
    "tensor(int64)": "INT64", "tensor(uint64)": "UINT64", "tensor(bool)": "BOOL",
}


@dataclass(frozen=True)
class Tensor:
    """One input or output as the KServe v2 metadata states it (``-1``: any size)."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def as_json(self) -> dict[str, object]:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


def model_tensors(onnx: Path) -> tuple[list[Tensor], list[Tensor]]:
    """The inputs and outputs of an ONNX file, batch dimension first; a model whose first
    dimension is not dynamic cannot be served batched and is refused here."""
    import onnxruntime as ort

    if not onnx.is_file():
        raise ValueError(f"{onnx}: no such file")
    sess = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])

    def tensor(arg: Any) -> Tensor:
        name, typ, shape = arg.name, arg.type, arg.shape
        if typ not in _DATATYPES:
            raise ValueError(f"{onnx.name}: {name!r} is a {typ}; the peers serve "
                             f"{', '.join(_DATATYPES)}")
        dims = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in shape)
        if not dims or dims[0] != -1:
            raise ValueError(f"{onnx.name}: {name!r} has shape {list(shape)}; the peers serve "
                             "models whose first dimension is a dynamic batch dimension")
        return Tensor(name, _DATATYPES[typ], dims)

    return [tensor(a) for a in sess.get_inputs()], [tensor(a) for a in sess.get_outputs()]


# -- a running peer ------------------------------------------------------------------------

SERVERS = Path(__file__).with_name("peer_servers")
#: loopback is asked directly, whatever proxy the environment names
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Peer:
    """One real server of ``kind`` serving ``onnx`` as ``name`` over gRPC and HTTP on
    loopback, its files in ``workdir``; started with :meth:`start`.

    The ports are chosen once, so a restarted peer is found where it was (a remote in an
    offload config keeps its URL). The server runs in a session of its own, so ``kill``,
    ``freeze`` and ``thaw`` reach every process it spawned (Triton's python stub,
    MLServer's inference worker)."""

    def __init__(self, kind: str, onnx: Path, workdir: Path, *, name: str = "model",
                 max_batch_size: int = 8, threads: int = 0,
                 progress: Progress = _say) -> None:
        _spec(kind)  # an unknown kind is refused before anything is read or built
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1; got {max_batch_size}")
        if threads < 0:
            raise ValueError(f"threads must be >= 0 (0: ONNX Runtime's default); got {threads}")
        self.kind, self.onnx, self.name = kind, Path(onnx).resolve(), name
        self.max_batch_size, self.threads = max_batch_size, threads
        self.inputs, self.outputs = model_tensors(self.onnx)
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.python = peer_python(kind, progress)
        self.grpc_port, self.http_port = free_port(), free_port()
        self.log_path = workdir / f"{kind}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._first_start = True
        self._cmd = self._command()

    def _command(self) -> tuple[list[str], dict[str, str]]:
        """The server's command line and environment, its files written to ``workdir``."""
        return {"triton": self._triton, "mlserver": self._mlserver,
                "kserve": self._kserve}[self.kind]()

    # -- where it listens
    @property
    def grpc(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def http(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    def url(self, scheme: str) -> str:
        """``grpc://...`` or ``http://...``: an ``[offload] url``."""
        if scheme not in ("grpc", "http"):
            raise ValueError(f"scheme must be 'grpc' or 'http'; got {scheme!r}")
        return f"{scheme}://{self.grpc if scheme == 'grpc' else self.http}"

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError(f"the {self.kind} peer is not running")
        return self.proc.pid

    @property
    def versions(self) -> dict[str, str]:
        """The pinned packages as installed in the peer's venv (for a report)."""
        wanted = {r.split("=")[0].split("<")[0].lower() for r in specs()[self.kind].requirements}
        got = {}
        freeze = self.python.parent.parent / ".complete"
        for line in freeze.read_text().splitlines() if freeze.exists() else ():
            name, sep, version = line.partition("==")
            if sep and name.lower() in wanted:
                got[name] = version
        return got

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    # -- its life
    def start(self, timeout: float = START_TIMEOUT_S) -> float:
        """Start the server and wait until it and the model are ready over both
        protocols; seconds it took. :class:`PeerUnavailable` (with its log) if it exits
        or is not ready in ``timeout``.

        The first start takes other ports when one was taken between choosing and binding
        it (another process on a shared machine); a restart keeps its ports."""
        if self.running:
            raise RuntimeError(f"the {self.kind} peer is already running (pid {self.pid})")
        attempts = 3 if self._first_start else 1
        self._first_start = False
        for k in range(attempts):
            try:
                return self._start(timeout)
            except _PortTaken as e:
                if k == attempts - 1:
                    raise PeerUnavailable(str(e)) from None
                self.grpc_port, self.http_port = free_port(), free_port()
                self._cmd = self._command()
        raise AssertionError("unreachable")

    def _start(self, timeout: float) -> float:
        cmd, env = self._cmd
        t0 = time.monotonic()
        logged = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         cwd=str(self.workdir), start_new_session=True)
        while not self._ready():
            said = self.log_path.read_bytes()[logged:].decode(errors="replace").lower()
            if "already in use" in said or "failed to bind" in said:
                # MLServer's REST side keeps running when its gRPC port cannot be bound.
                self.kill()
                raise _PortTaken(f"the {self.kind} server could not bind its ports:\n"
                                 f"{self.log_tail()}")
            if self.proc.poll() is not None:
                self._reap()
                raise PeerUnavailable(f"the {self.kind} server exited ({self.proc.returncode})"
                                      f" before it was ready:\n{self.log_tail()}")
            if time.monotonic() - t0 > timeout:
                self.kill()
                raise PeerUnavailable(f"the {self.kind} server was not ready after "
                                      f"{timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(0.1)
        return time.monotonic() - t0

    def _ready(self) -> bool:
        for path in ("/v2/health/ready", f"/v2/models/{self.name}/ready"):
            try:
                with _DIRECT.open(f"http://{self.http}{path}", timeout=2) as r:
                    if r.status != 200:
                        return False
            except (urllib.error.URLError, OSError):
                return False
        try:
            socket.create_connection(("127.0.0.1", self.grpc_port), timeout=2).close()
        except OSError:
            return False
        return True

    def _signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def freeze(self) -> None:
        """SIGSTOP the server's processes: it takes no CPU while another is measured."""
        self._signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self._signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL every process of the server (a crash, as a test wants it)."""
        self._signal(signal.SIGCONT)
        self._signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()
            self._reap()

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` s; every process of the server gone."""
        if self.proc is None:
            return
        self._signal(signal.SIGCONT)
        self._signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self.proc.wait()
        self._reap()

    def _reap(self) -> None:
        """Children the server left behind in its session (a stub, a worker) go too."""
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def __enter__(self) -> Peer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- each kind's command and files
    def _env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        env.update(extra)
        return env

    def _copy(self, server_file: str, dest: Path) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(SERVERS / server_file, dest)

    def _triton(self) -> tuple[list[str], dict[str, str]]:
        site = next((self.python.parent.parent / "lib").glob("python3.*/site-packages"))
        dist = site / "pytriton" / "tritonserver"
        version = site.parent.name.removeprefix("python")
        stub = dist / "python_backend_stubs" / version / "triton_python_backend_stub"
        if not stub.exists():
            raise PeerUnavailable(f"triton: no python backend stub for Python {version} in "
                                  f"{stub.parent.parent}")
        backend = self.workdir / "backends" / "python"
        backend.mkdir(parents=True, exist_ok=True)
        for src in (dist / "backends" / "python" / "libtriton_python.so",
                    dist / "backends" / "python" / "triton_python_backend_utils.py", stub):
            link = backend / src.name
            if not link.exists():
                link.symlink_to(src)
        model = self.workdir / "repository" / self.name
        self._copy("triton_model.py", model / "1" / "model.py")
        (model / "config.pbtxt").write_text(self._pbtxt())
        libs = str(site / "nvidia_pytriton.libs")
        env = self._env(PATH=f"{self.python.parent}:{os.environ.get('PATH', '')}",
                        LD_LIBRARY_PATH=":".join(
                            p for p in (os.environ.get("LD_LIBRARY_PATH"), libs) if p))
        cmd = [str(dist / "bin" / "tritonserver"),
               f"--model-repository={self.workdir / 'repository'}",
               f"--backend-directory={self.workdir / 'backends'}",
               "--grpc-address=127.0.0.1", f"--grpc-port={self.grpc_port}",
               "--http-address=127.0.0.1", f"--http-port={self.http_port}",
               "--allow-metrics=false", "--pinned-memory-pool-byte-size=0",
               "--strict-readiness=true", "--exit-on-error=true", "--log-verbose=0",
               # the stub's shared-memory region starts small and grows (pytriton's sizes)
               "--backend-config=python,shm-default-byte-size=4194304",
               "--backend-config=python,shm-growth-byte-size=1048576"]
        return cmd, env

    def _pbtxt(self) -> str:
        def tensors(ts: list[Tensor]) -> str:
            return ", ".join(f'{{ name: "{t.name}" data_type: TYPE_{t.datatype} dims: '
                             f"{list(t.shape[1:])} }}" for t in ts)

        return (f'name: "{self.name}"\nbackend: "python"\n'
                f"max_batch_size: {self.max_batch_size}\n"
                f"input [ {tensors(self.inputs)} ]\noutput [ {tensors(self.outputs)} ]\n"
                "dynamic_batching { }\ninstance_group [ { kind: KIND_CPU count: 1 } ]\n"
                f'parameters {{ key: "onnx" value: {{ string_value: "{self.onnx}" }} }}\n'
                f'parameters {{ key: "threads" value: {{ string_value: "{self.threads}" }} }}\n')

    def _mlserver(self) -> tuple[list[str], dict[str, str]]:
        root = self.workdir / "mlserver"
        model = root / self.name
        self._copy("mlserver_runtime.py", model / "mlserver_runtime.py")
        (root / "settings.json").write_text(json.dumps({
            "host": "127.0.0.1", "http_port": self.http_port, "grpc_port": self.grpc_port,
            "metrics_endpoint": None, "debug": False}))
        (model / "model-settings.json").write_text(json.dumps({
            "name": self.name, "implementation": "mlserver_runtime.OnnxRuntime",
            "parameters": {"uri": str(self.onnx), "extra": {
                "threads": self.threads, "max_rows": self.max_batch_size}},
            "inputs": [t.as_json() for t in self.inputs],
            "outputs": [t.as_json() for t in self.outputs]}))
        return [str(self.python), "-m", "mlserver.cli.main", "start", str(root)], self._env()

    def _kserve(self) -> tuple[list[str], dict[str, str]]:
        script = self.workdir / "kserve_server.py"
        self._copy("kserve_server.py", script)
        settings = self.workdir / "kserve.json"
        settings.write_text(json.dumps({"name": self.name, "onnx": str(self.onnx),
                                        "threads": self.threads,
                                        "max_rows": self.max_batch_size}))
        return [str(self.python), str(script), str(settings), f"--http_port={self.http_port}",
                f"--grpc_port={self.grpc_port}"], self._env()


def _spec(kind: str) -> PeerSpec:
    try:
        return specs()[kind]
    except KeyError:
        raise ValueError(f"unknown peer {kind!r}; expected one of {', '.join(KINDS)}") from None
