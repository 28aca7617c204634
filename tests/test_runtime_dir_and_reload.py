"""A daemon started as a user starts it (no ``--runtime-dir``): ``edged ctl reload`` that
opens a KServe listener says so (it used to answer "nothing changed"), and a clean stop
removes the runtime folder the daemon made (it used to leave an empty ``/tmp/edged-*``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from support.configs import config, model_table, variant
from support.daemons import free_port
from support.paths import ROOT

from edged.testing.harness import wait_until


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("EDGED_") and k not in ("RUNTIME_DIRECTORY", "XDG_RUNTIME_DIR",
                                                        "NOTIFY_SOCKET")}
    env.update(PYTHONPATH=str(ROOT), TMPDIR=str(tmp))
    return env


def _write(tmp: Path, server: str) -> Path:
    echo = model_table("echo", [variant("null", backend="null", options={})])
    return config(tmp, models=[echo], server='endpoints = ["ipc://edged.sock"]\n' + server)


def test_reload_names_the_listener_it_opened_and_stop_removes_the_runtime_dir(
        tmp_path: Path) -> None:
    cfg = _write(tmp_path, "")
    env = _env(tmp_path)
    log = (tmp_path / "daemon.log").open("wb")
    p = subprocess.Popen([sys.executable, "-m", "edged", "serve", "--config", str(cfg),
                          "--metrics", "off"], stdout=log, stderr=subprocess.STDOUT, env=env,
                         cwd=str(tmp_path))
    try:
        def made() -> list[Path]:
            return [d for d in tmp_path.glob("edged-*") if (d / "control.sock").exists()]

        wait_until(made, 60, "the control socket")
        control = f"ipc://{made()[0] / 'control.sock'}"

        def edged(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "edged", *args, "--control", control],
                                  capture_output=True, text=True, env=env, timeout=60)

        wait_until(lambda: edged("ctl", "models").returncode == 0, 60, "the daemon")
        r = edged("ctl", "reload")
        assert r.returncode == 0 and r.stdout.startswith("reload: nothing changed"), r.stdout
        port = free_port()
        _write(tmp_path, f'[server.kserve]\ngrpc = "127.0.0.1:{port}"\n')
        r = edged("ctl", "reload")
        assert r.returncode == 0, r.stderr
        assert f"opened kserve-grpc 127.0.0.1:{port}" in r.stdout, r.stdout
        assert "nothing changed" not in r.stdout
        _write(tmp_path, "")
        r = edged("ctl", "reload")
        assert f"closed kserve-grpc 127.0.0.1:{port}" in r.stdout, r.stdout
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 0
        log.close()
    assert not list(tmp_path.glob("edged-*")), list(tmp_path.glob("edged-*/*"))
