"""Shared fixtures: a real daemon in a subprocess on free ports and a temp ipc dir."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models" / "digits"
sys.path.insert(0, str(Path(__file__).resolve().parent))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def digits_config(tmp: Path, *, extra_models: str = "", governor: str = "", server: str = "",
                  model_extra: str = "", variants: tuple[str, ...] = ("cnn-fp32", "cnn-int8",
                                                                       "small-fp32")) -> Path:
    """A config serving the shipped digits model from ``tmp`` (paths are absolute)."""
    v = "\n".join(
        f'[[models.variants]]\nname = "{n}"\nbackend = "onnxruntime"\n'
        f'path = "{MODELS / (n + ".onnx")}"\n[models.variants.options]\nthreads = 1\n'
        for n in variants)
    drain = "" if "drain_timeout_s" in server else "drain_timeout_s = 5.0"
    text = f"""
[server]
{drain}
{server}
[metrics]
listen = "off"

[[models]]
name = "digits"
required = true
max_batch_size = 8
max_queue = 512
{model_extra}
[models.preprocess]
color = "gray"
width = 28
height = 28
layout = "NCHW"

{v}
{extra_models}
{governor}
"""
    p = tmp / "edged.toml"
    p.write_text(text)
    return p


class Daemon:
    """`edged serve` as a subprocess; talks to it only over its sockets."""

    def __init__(self, config: Path, tmp: Path, env: dict[str, str] | None = None,
                 metrics: bool = False, wait: bool = True) -> None:
        self.tmp = tmp
        self.runtime_dir = tmp / "run"
        self.port = free_port()
        self.tcp = f"tcp://127.0.0.1:{self.port}"
        self.ipc = f"ipc://{self.runtime_dir}/edged.sock"
        self.control = f"ipc://{self.runtime_dir}/control.sock"
        self.metrics_port = free_port() if metrics else None
        self.log_path = tmp / "daemon.log"
        self.config = config
        args = [sys.executable, "-m", "edged", "serve", "--config", str(config),
                "--endpoint", self.ipc, "--endpoint", self.tcp,
                "--runtime-dir", str(self.runtime_dir),
                "--metrics", f"127.0.0.1:{self.metrics_port}" if metrics else "off"]
        e = dict(os.environ)
        e.pop("NOTIFY_SOCKET", None)
        e.update(env or {})
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, env=e,
                                     cwd=str(ROOT))
        if wait:
            self.wait_ready()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 60.0, endpoint: str | None = None) -> None:
        """Poll ``health`` until OK (on tcp unless told: a CURVE daemon needs ipc)."""
        from edged.client import Client, ClientTimeout

        end = time.monotonic() + timeout
        with Client(endpoint or self.tcp, timeout_s=1.0) as c:
            while time.monotonic() < end:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"daemon exited {self.proc.returncode}:\n{self.log()}")
                try:
                    if c.health().ok:
                        return
                except ClientTimeout:
                    pass
                time.sleep(0.1)
        raise RuntimeError(f"daemon not ready after {timeout} s:\n{self.log()}")

    def client(self, endpoint: str | None = None, timeout_s: float = 10.0) -> Any:
        from edged.client import Client

        return Client(endpoint or self.tcp, timeout_s=timeout_s)

    def ctl(self, msg: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
        from edged.cli import control_call

        return control_call(self.control, msg, timeout)

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


@pytest.fixture
def make_daemon(tmp_path: Path) -> Iterator[Any]:
    started: list[Daemon] = []

    def make(config: Path | None = None, **kw: Any) -> Daemon:
        d = Daemon(config or digits_config(tmp_path), tmp_path, **kw)
        started.append(d)
        return d

    yield make
    for d in started:
        d.stop()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """One shared daemon on the shipped digits model for read-only tests."""
    tmp = tmp_path_factory.mktemp("daemon")
    d = Daemon(digits_config(tmp), tmp, metrics=True)
    yield d
    d.stop()
    shutil.rmtree(tmp, ignore_errors=True)
