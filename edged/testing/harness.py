"""One harness for tests, benchmarks and ``edged bench``: a daemon in a subprocess on
private endpoints, free ports, percentiles and a description of the machine.

Why in the package: the test suite, ``scripts/`` and ``edged bench`` all start daemons
and report latencies; one copy means one definition of "ready" and of "p99".
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from edged.errors import StartupError

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def pinned(cores: set[int] | None) -> Iterator[None]:
    """This process on ``cores`` for the block (None: as it is): what it starts meanwhile
    (a daemon, client processes, a measuring child) inherits them and keeps them after."""
    if cores is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile_ms(seconds: Any, q: float) -> float:
    """The q-th percentile of durations in seconds, in milliseconds (nan when empty)."""
    a = np.asarray(seconds, dtype=np.float64)
    return float(np.percentile(a, q) * 1000.0) if a.size else float("nan")


def percentiles_ms(seconds: Any, qs: tuple[float, ...] = (50, 90, 99)) -> dict[str, float]:
    return {f"p{q:g}_ms": percentile_ms(seconds, q) for q in qs}


def wait_until(predicate: Callable[[], object], timeout: float = 10.0, what: str = "",
               interval: float = 0.05) -> None:
    """Return as soon as ``predicate()`` is true; fail naming ``what`` after ``timeout`` s
    (an AssertionError: in a test it is the test's failure)."""
    end = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if time.monotonic() >= end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(interval)


#: the 1-minute load average above which a benchmark's figures are not to be quoted
QUIET_LOAD = 0.3


def say_machine(info: dict[str, Any], cores: int | None = None) -> None:
    """The machine line every benchmark prints first, and a warning when it is busy."""
    load = info["load_avg"][0]
    print(f"machine: {info['cpu']}, {cores or info['logical_cpus']} usable core(s), load "
          f"average {' '.join(map(str, info['load_avg']))}")
    if load > QUIET_LOAD:
        print(f"WARNING: load average {load} > {QUIET_LOAD}: the machine is not quiet; "
              "these figures are not ones to quote or to decide a default from")


def machine_info(repo: Path = ROOT) -> dict[str, Any]:
    """CPU, cores, kernel and the versions that decide the figures (for every report)."""
    import onnxruntime as ort
    import psutil
    import zmq

    from edged import __version__
    from edged.backends.support.isa import cpu_name

    cpu = cpu_name()
    rev = ""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, cwd=str(repo)).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "edged"],
                               capture_output=True, text=True, cwd=str(repo)).stdout.strip()
        if dirty:
            rev += f" (+{len(dirty.splitlines())} uncommitted file(s) in edged/)"
    return {"cpu": cpu, "logical_cpus": os.cpu_count(),
            "physical_cores": psutil.cpu_count(logical=False), "kernel": platform.release(),
            "python": platform.python_version(), "onnxruntime": ort.__version__,
            "numpy": np.__version__, "pyzmq": zmq.__version__, "libzmq": zmq.zmq_version(),
            "edged": __version__, "git": rev,
            "load_avg": [round(x, 2) for x in os.getloadavg()]}


class DaemonFailed(StartupError, RuntimeError):
    """The daemon a harness started exited or never became ready. The first line is its
    own reason (``edged: cannot start: port 8001 ... is already in use``), so a command
    that started it (``edged bench soak``) says that line and no traceback; the rest is
    its log, for a test's failure report."""


class Daemon:
    """``edged serve`` as a subprocess on private endpoints; talked to only over sockets."""

    def __init__(self, config: Path, workdir: Path, env: dict[str, str] | None = None,
                 metrics: bool = False, wait: bool = True, cwd: Path = ROOT,
                 args: tuple[str, ...] = (),
                 launcher: tuple[str, ...] = ("-m", "edged")) -> None:
        self.workdir = self.tmp = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.runtime_dir = workdir / "run"
        self.ipc = f"ipc://{self.runtime_dir}/edged.sock"
        self.control = f"ipc://{self.runtime_dir}/control.sock"
        self.log_path = workdir / "daemon.log"
        self.config = config
        self._metrics, self._extra, self._cwd = metrics, args, cwd
        #: what runs ``edged serve``: the CLI, or a wrapper such as ``edged.testing.callcount``
        self._launcher = launcher
        self._env = dict(os.environ)
        self._env.pop("NOTIFY_SOCKET", None)
        self._env.pop("JOURNAL_STREAM", None)
        self._env.update(env or {})
        self.ready_s: float | None = None
        self._spawn()
        if wait:
            for _ in range(3):
                try:
                    self.wait_ready()
                    break
                except RuntimeError:
                    # free_port() races other processes for the port: take another one.
                    if "already in use" not in self.log():
                        raise
                    self._spawn()
            else:
                self.wait_ready()

    def _spawn(self) -> None:
        self.port = free_port()
        self.tcp = f"tcp://127.0.0.1:{self.port}"
        self.metrics_port = free_port() if self._metrics else None
        args = [sys.executable, *self._launcher, "serve", "--config", str(self.config),
                "--endpoint", self.ipc, "--endpoint", self.tcp,
                "--runtime-dir", str(self.runtime_dir),
                "--metrics", f"127.0.0.1:{self.metrics_port}" if self._metrics else "off",
                *self._extra]
        self._log = self.log_path.open("wb")
        self.t_popen = time.monotonic()
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=self._env, cwd=str(self._cwd))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_tail(self, n: int = 30) -> str:
        return "\n".join(self.log().splitlines()[-n:])

    def startup_ms(self) -> float | None:
        """The daemon's own start-up figure from its ``ready`` log line."""
        m = re.search(r"\bready\b.*startup_ms=(\d+(?:\.\d+)?)", self.log())
        return float(m.group(1)) if m else None

    def wait_ready(self, timeout: float = 60.0, endpoint: str | None = None) -> float:
        """Poll ``health`` every ~5 ms until OK; seconds from Popen to ready.

        On tcp unless told (a CURVE daemon needs ipc)."""
        import zmq

        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RECONNECT_IVL, 5)  # the default 100 ms would blur start-up time
        sock.connect(endpoint or self.tcp)
        end = time.monotonic() + timeout
        n = 0
        try:
            while time.monotonic() < end:
                if self.proc.poll() is not None:
                    raise DaemonFailed(f"the daemon it started could not start: "
                                       f"{self._reason()} (its log: {self.log_path})\n"
                                       f"{self.log()}")
                n += 1
                with contextlib.suppress(zmq.Again):
                    sock.send(json.dumps({"v": 1, "op": "health", "id": n}).encode(),
                              zmq.NOBLOCK)
                deadline = time.monotonic() + 0.25
                while time.monotonic() < deadline:
                    if not sock.poll(5):
                        continue
                    if json.loads(sock.recv()).get("status") == "OK":
                        self.ready_s = time.monotonic() - self.t_popen
                        return self.ready_s
                    break  # UNAVAILABLE while loading: ask again
                time.sleep(0.005)
        finally:
            sock.close(0)
            ctx.term()
        raise DaemonFailed(f"the daemon it started was not ready after {timeout:g} s (its "
                           f"log: {self.log_path})\n{self.log()}")

    def _reason(self) -> str:
        """The daemon's own last ``edged: ...`` line (with the indented lines under it,
        as ``invalid config:`` lists its problems), else its exit status."""
        lines = self.log().splitlines()
        starts = [i for i, ln in enumerate(lines) if ln.startswith("edged: ")]
        if not starts:
            return f"it exited {self.proc.returncode}"
        first = starts[-1]
        rest = []
        for ln in lines[first + 1:]:
            if not ln.startswith("  "):
                break
            rest.append(ln.strip())
        return " ".join([lines[first][len("edged: "):], "; ".join(rest)]).strip()

    def client(self, endpoint: str | None = None, timeout_s: float = 10.0) -> Any:
        from edged.client import Client

        return Client(endpoint or self.tcp, timeout_s=timeout_s)

    def ctl(self, msg: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
        from edged.client import ControlClient

        with ControlClient(self.control, timeout) as c:
            return c.send_message(msg)

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return int(self.proc.returncode)
