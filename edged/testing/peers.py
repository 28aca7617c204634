"""Real KServe v2 servers as peers: NVIDIA Triton, Seldon MLServer and KServe's ModelServer,
each serving one ONNX model on loopback free ports, run from a venv of its own.

Why real servers: edged's offload and its benchmark are about servers nobody here wrote;
a second edged as the remote tests only what edged already agrees with. Each server
answers refusals, errors and metadata its own way (``docs/kserve.md``, "Offloading to
Triton, MLServer and KServe"), so the suite and ``edged bench --peer`` run the real ones.
Each kind's venv is built and cached by ``peer_venvs`` (:func:`peer_venvs.peer_python`);
anything that stops a peer from being built or started is ``peer_venvs.PeerUnavailable``
with the reason, which a test turns into a skip.

What each needs, and why it is set up as it is:

- **Triton**: ``nvidia-pytriton`` bundles the C++ ``tritonserver`` with only its *python*
  backend (no ONNX Runtime backend is on PyPI), so the model is a python-backend model
  whose ``model.py`` runs the ONNX file with ``onnxruntime``; Triton itself does the
  protocol, dynamic batching and the checks of dtypes, shapes and ``max_batch_size``.
- **MLServer**: a small runtime class (MLServer has no ONNX runtime). No adaptive
  batching (MLServer's default).
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
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edged.testing.harness import free_port
from edged.testing.peer_venvs import (
    PeerUnavailable,
    Progress,
    installed_versions,
    peer_python,
    say,
    spec,
)

#: seconds a server gets from start to ready (a cold start imports a lot)
START_TIMEOUT_S = 120.0


class _PortTaken(RuntimeError):
    """The server could not bind a port chosen free a moment before."""


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
                 progress: Progress = say) -> None:
        spec(kind)  # an unknown kind is refused before anything is read or built
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
        return COMMANDS[self.kind](self)

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
        return installed_versions(self.kind, self.python)

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


# -- each kind's files and command line ----------------------------------------------------
def _env(**extra: str) -> dict[str, str]:
    """This environment without what would point the venv's python at edged's."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(extra)
    return env


def _copy(server_file: str, dest: Path) -> None:
    """A file of ``peer_servers/`` into the peer's work directory."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(SERVERS / server_file, dest)


def _triton(p: Peer) -> tuple[list[str], dict[str, str]]:
    site = next((p.python.parent.parent / "lib").glob("python3.*/site-packages"))
    dist = site / "pytriton" / "tritonserver"
    version = site.parent.name.removeprefix("python")
    stub = dist / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.exists():
        raise PeerUnavailable(f"triton: no python backend stub for Python {version} in "
                              f"{stub.parent.parent}")
    backend = p.workdir / "backends" / "python"
    backend.mkdir(parents=True, exist_ok=True)
    for src in (dist / "backends" / "python" / "libtriton_python.so",
                dist / "backends" / "python" / "triton_python_backend_utils.py", stub):
        link = backend / src.name
        if not link.exists():
            link.symlink_to(src)
    model = p.workdir / "repository" / p.name
    _copy("triton_model.py", model / "1" / "model.py")
    (model / "config.pbtxt").write_text(_pbtxt(p))
    libs = str(site / "nvidia_pytriton.libs")
    env = _env(PATH=f"{p.python.parent}:{os.environ.get('PATH', '')}",
               LD_LIBRARY_PATH=":".join(
                   d for d in (os.environ.get("LD_LIBRARY_PATH"), libs) if d))
    cmd = [str(dist / "bin" / "tritonserver"),
           f"--model-repository={p.workdir / 'repository'}",
           f"--backend-directory={p.workdir / 'backends'}",
           "--grpc-address=127.0.0.1", f"--grpc-port={p.grpc_port}",
           "--http-address=127.0.0.1", f"--http-port={p.http_port}",
           "--allow-metrics=false", "--pinned-memory-pool-byte-size=0",
           "--strict-readiness=true", "--exit-on-error=true", "--log-verbose=0",
           # the stub's shared-memory region starts small and grows (pytriton's sizes)
           "--backend-config=python,shm-default-byte-size=4194304",
           "--backend-config=python,shm-growth-byte-size=1048576"]
    return cmd, env


def _pbtxt(p: Peer) -> str:
    def tensors(ts: list[Tensor]) -> str:
        return ", ".join(f'{{ name: "{t.name}" data_type: TYPE_{t.datatype} dims: '
                         f"{list(t.shape[1:])} }}" for t in ts)

    return (f'name: "{p.name}"\nbackend: "python"\n'
            f"max_batch_size: {p.max_batch_size}\n"
            f"input [ {tensors(p.inputs)} ]\noutput [ {tensors(p.outputs)} ]\n"
            "dynamic_batching { }\ninstance_group [ { kind: KIND_CPU count: 1 } ]\n"
            f'parameters {{ key: "onnx" value: {{ string_value: "{p.onnx}" }} }}\n'
            f'parameters {{ key: "threads" value: {{ string_value: "{p.threads}" }} }}\n')


def _mlserver(p: Peer) -> tuple[list[str], dict[str, str]]:
    root = p.workdir / "mlserver"
    model = root / p.name
    _copy("mlserver_runtime.py", model / "mlserver_runtime.py")
    (root / "settings.json").write_text(json.dumps({
        "host": "127.0.0.1", "http_port": p.http_port, "grpc_port": p.grpc_port,
        "metrics_endpoint": None, "debug": False}))
    (model / "model-settings.json").write_text(json.dumps({
        "name": p.name, "implementation": "mlserver_runtime.OnnxRuntime",
        "parameters": {"uri": str(p.onnx), "extra": {
            "threads": p.threads, "max_rows": p.max_batch_size}},
        "inputs": [t.as_json() for t in p.inputs],
        "outputs": [t.as_json() for t in p.outputs]}))
    return [str(p.python), "-m", "mlserver.cli.main", "start", str(root)], _env()


def _kserve(p: Peer) -> tuple[list[str], dict[str, str]]:
    script = p.workdir / "kserve_server.py"
    _copy("kserve_server.py", script)
    settings = p.workdir / "kserve.json"
    settings.write_text(json.dumps({"name": p.name, "onnx": str(p.onnx),
                                    "threads": p.threads,
                                    "max_rows": p.max_batch_size}))
    return [str(p.python), str(script), str(settings), f"--http_port={p.http_port}",
            f"--grpc_port={p.grpc_port}"], _env()


#: each kind's files and command line, chosen by the peer's kind
COMMANDS: dict[str, Callable[[Peer], tuple[list[str], dict[str, str]]]] = {
    "triton": _triton, "mlserver": _mlserver, "kserve": _kserve}
