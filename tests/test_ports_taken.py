"""A port another process holds, for each kind of listener the daemon opens: one line
naming the port, the config key (and the flag) that moves it and the process that holds
it; no traceback; the runtime folder the daemon made is gone again.

One test per class of listener, not per config: ZeroMQ (``[server] endpoints``,
``[[server.frigate]] endpoint``), gRPC and HTTP (``[server.kserve]``), and Prometheus
(``[metrics] listen``); and ``edged bench soak``, which starts a daemon of its own.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.configs import config, model_table, variant
from support.paths import ROOT

DET = ROOT / "models" / "digits-det" / "det-fp32.onnx"


@pytest.fixture
def held() -> Iterator[int]:
    """A port this test process listens on (so psutil can name the holder)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        yield int(s.getsockname()[1])


def _config(tmp: Path, kind: str, port: int) -> Path:
    echo = model_table("echo", [variant("null", backend="null", options={})])
    det = model_table("det", [variant("det-fp32", DET)],
                      preprocess={"color": "rgb", "width": 160, "height": 160},
                      extra='[models.postprocess]\nkind = "detect"\ndecoder = "yolov8"\n')
    server = {
        "native": f'endpoints = ["tcp://127.0.0.1:{port}"]\ninsecure = true\n',
        "frigate": f'[[server.frigate]]\nendpoint = "tcp://127.0.0.1:{port}"\nmodel = "det"\n',
        "kserve-grpc": f'[server.kserve]\ngrpc = "127.0.0.1:{port}"\n',
        "kserve-http": f'[server.kserve]\nhttp = "127.0.0.1:{port}"\n',
    }.get(kind, "")
    metrics = f'listen = "127.0.0.1:{port}"' if kind == "metrics" else 'listen = "off"'
    models = [echo, det] if kind == "frigate" else [echo]
    return config(tmp, models=models, server=server, metrics=metrics)


def _edged(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("EDGED_") and k not in ("RUNTIME_DIRECTORY", "XDG_RUNTIME_DIR")}
    env.update(PYTHONPATH=str(ROOT), TMPDIR=str(tmp))
    return subprocess.run([sys.executable, "-m", "edged", *args], capture_output=True,
                          text=True, env=env, timeout=180, cwd=str(tmp))


@pytest.mark.parametrize(("kind", "key", "flag"), [
    ("native", "[server] endpoints", "--endpoint"),
    ("frigate", "[[server.frigate]] endpoint (table 0)", None),
    ("kserve-grpc", "[server.kserve] grpc", None),
    ("kserve-http", "[server.kserve] http", None),
    ("metrics", "[metrics] listen", "--metrics"),
])
def test_serve_on_a_taken_port_names_the_port_the_key_and_the_holder(
        tmp_path: Path, held: int, kind: str, key: str, flag: str | None) -> None:
    cfg = _config(tmp_path, kind, held)
    r = _edged(tmp_path, "serve", "--config", str(cfg))
    assert r.returncode == 1, r.stderr
    line = next(ln for ln in r.stderr.splitlines() if ln.startswith("edged: cannot start"))
    assert f"port {held} " in line and key in line and str(cfg) in line, line
    assert f"pid {os.getpid()} (" in line, line  # the holder: this test's process
    assert (flag or "change") in line, line
    assert "Traceback" not in r.stderr
    assert not list(tmp_path.glob("edged-*")), "the runtime folder it made is left behind"


def test_bench_soak_on_a_taken_port_says_it_in_a_line(tmp_path: Path, held: int) -> None:
    cfg = _config(tmp_path, "kserve-grpc", held)
    r = _edged(tmp_path, "bench", "soak", "--config", str(cfg), "--model", "echo",
               "--duration", "1")
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("edged: ")]
    assert len(lines) == 1, r.stderr
    assert f"port {held} " in lines[0] and "[server.kserve] grpc" in lines[0], lines[0]
    assert not list(tmp_path.glob("edged-soak-*"))
