"""Daemon lifecycle under a real sd_notify socket: READY, WATCHDOG, RELOADING, STOPPING;
reload on SIGHUP, drain on SIGTERM, the control endpoint."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from support.configs import digits_config, slow_table
from support.daemons import Daemon, received
from support.notify_socket import NotifySocket
from support.paths import ROOT
from support.slow_model import make_slow_model
from support.waits import wait_until

from edged.client import build_infer

X = np.zeros((1, 1, 28, 28), np.float32)
X64 = np.ones((1, 64), np.float32)


def with_slow(tmp: Path, trip: int, server: str = "") -> Path:
    m = make_slow_model(tmp / "slow.onnx", trip)
    return digits_config(tmp, server=server, extra_models=slow_table(m, max_queue=64))


def test_ready_watchdog_status_and_stopping(make_daemon: Any, tmp_path: Path) -> None:
    with NotifySocket(watchdog_usec=400_000) as ns:
        d = make_daemon(env=ns.env, wait=False)
        ready = ns.wait_for("READY", timeout=60)
        assert ready.pid == d.proc.pid
        assert "1/1 model(s) ready" in ready.get("STATUS", "")
        with d.client() as c:  # READY means models are loaded and sockets bound
            assert c.infer("digits", X).ok
        first = len(ns.fields_seen("WATCHDOG"))
        time.sleep(1.5)
        pings = len(ns.fields_seen("WATCHDOG")) - first
        assert pings >= 4, f"{pings} WATCHDOG pings in 1.5 s with WATCHDOG_USEC=0.4 s"
        d.signal(signal.SIGTERM)
        ns.wait_for("STOPPING", timeout=10)
        assert d.proc.wait(20) == 0


def test_watchdog_pings_stop_while_an_inference_hangs(make_daemon: Any, tmp_path: Path) -> None:
    cfg = with_slow(tmp_path, 1000, server="stall_timeout_s = 0.5\n")
    with NotifySocket(watchdog_usec=400_000) as ns:
        d = make_daemon(cfg, env=ns.env, wait=False)
        ns.wait_for("READY", timeout=60)
        with d.client(timeout_s=60) as c:
            # The loop runs max(x) times: ~5 s on this machine, far past stall_timeout_s.
            c.send(*build_infer("slow", np.full((1, 64), 8e6, np.float32), id="hang"))
            time.sleep(1.2)  # past stall_timeout_s
            before = len(ns.fields_seen("WATCHDOG"))
            time.sleep(1.5)
            during = len(ns.fields_seen("WATCHDOG")) - before
            assert during == 0, f"{during} pings while the worker was stuck"
            assert "withholding WATCHDOG=1" in d.log()
            r = c.recv(60)
            assert r.ok and r.header["id"] == "hang"
        after = len(ns.fields_seen("WATCHDOG"))
        time.sleep(1.0)
        assert len(ns.fields_seen("WATCHDOG")) > after, "pings did not resume"


class Load:
    def __init__(self, d: Daemon, model: str = "digits", n: int = 3) -> None:
        self.statuses: list[str] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(d, model)) for _ in range(n)]
        for t in self.threads:
            t.start()

    def run(self, d: Daemon, model: str) -> None:
        with d.client(timeout_s=30) as c:
            while not self.stop.is_set():
                self.statuses.append(c.infer(model, X, raise_on_error=False).status)

    def finish(self) -> list[str]:
        self.stop.set()
        for t in self.threads:
            t.join(30)
        return self.statuses


def test_sighup_reload_adds_and_changes_models_without_failing_requests(
        make_daemon: Any, tmp_path: Path) -> None:
    cfg = digits_config(tmp_path)
    with NotifySocket() as ns:
        d = make_daemon(cfg, env=ns.env)
        ns.wait_for("READY", timeout=30)
        load = Load(d)
        try:
            time.sleep(0.5)
            text = cfg.read_text().replace("max_queue = 512", "max_queue = 300")
            (tmp_path / "x").mkdir()
            extra = digits_config(tmp_path / "x", variants=("small-fp32",)).read_text()
            cfg.write_text(text + "\n" + extra[extra.index("[[models]]"):].replace(
                'name = "digits"', 'name = "digits-small"', 1))
            d.signal(signal.SIGHUP)
            reloading = ns.wait_for("RELOADING", timeout=30)
            mono = int(reloading["MONOTONIC_USEC"])
            assert abs(mono - time.monotonic_ns() // 1000) < 60_000_000
            ns.wait_for("READY", timeout=60)
            time.sleep(0.5)
            with d.client() as c:
                r = c.infer("digits-small", X)
                assert r.ok and r.header["variant"] == "small-fp32"
        finally:
            statuses = load.finish()
    assert len(statuses) > 50
    assert set(statuses) == {"OK"}, {s: statuses.count(s) for s in set(statuses)}
    st = d.ctl({"op": "status"})
    assert st["last_reload"]["ok"] and st["last_reload"]["added"] == ["digits-small"]
    assert st["last_reload"]["changed"] == ["digits"]
    assert {m["name"]: m["max_queue"] for m in st["models"]} == {"digits": 300,
                                                                "digits-small": 512}


def test_invalid_reload_keeps_serving_the_old_config(make_daemon: Any, tmp_path: Path) -> None:
    cfg = digits_config(tmp_path)
    with NotifySocket() as ns:
        d = make_daemon(cfg, env=ns.env)
        ns.wait_for("READY", timeout=30)
        good = cfg.read_text()
        cfg.write_text(good.replace("max_batch_size = 8", "max_batch_size = -8"))
        d.signal(signal.SIGHUP)
        ns.wait_for("RELOADING", timeout=10)
        again = ns.wait_for("READY", timeout=30)
        assert "reload FAILED" in again.get("STATUS", "")
        with d.client() as c:
            assert c.infer("digits", X).ok
        st = d.ctl({"op": "status"})
        assert st["last_reload"]["ok"] is False
        assert "models[0].max_batch_size: must be > 0" in " ".join(st["last_reload"]["error"])
        assert "reload rejected" in d.log()
        r = d.ctl({"op": "reload"})
        assert r["status"] == "INVALID_ARGUMENT" and "max_batch_size" in r["error"]
        # A config whose artifact is missing is rejected the same way.
        cfg.write_text(good.replace("cnn-fp32.onnx", "missing.onnx"))
        r = d.ctl({"op": "reload"})
        assert r["status"] == "INVALID_ARGUMENT" and "missing.onnx" in r["error"]
        with d.client() as c:
            assert c.infer("digits", X).ok


def test_sigterm_answers_every_request_in_flight(make_daemon: Any, tmp_path: Path) -> None:
    d = make_daemon(with_slow(tmp_path, 60_000), metrics=True)  # ~0.1-0.2 s a batch
    with d.client(timeout_s=30) as c:
        for i in range(10):
            c.send(*build_infer("slow", X64, id=i))
        wait_until(lambda: received(d) == 10, 10, "the ten requests received")
        d.signal(signal.SIGTERM)
        got = {c.recv(30).header["id"]: None for _ in range(10)}
    assert sorted(got) == list(range(10))
    assert d.proc.wait(30) == 0


def test_drain_timeout_answers_the_rest_unavailable(make_daemon: Any, tmp_path: Path) -> None:
    d = make_daemon(with_slow(tmp_path, 150_000, server="drain_timeout_s = 1.0\n"),
                    metrics=True)
    with d.client(timeout_s=30) as c:
        for i in range(10):
            c.send(*build_infer("slow", X64, id=i))
        wait_until(lambda: received(d) == 10, 10, "the ten requests received")
        d.signal(signal.SIGTERM)
        replies = [c.recv(30).header for _ in range(10)]
    statuses = [r["status"] for r in replies]
    assert statuses.count("OK") >= 1 and statuses.count("UNAVAILABLE") >= 1, statuses
    assert set(statuses) <= {"OK", "UNAVAILABLE"}
    assert all("shutting down" in r["error"] for r in replies if r["status"] != "OK")
    assert d.proc.wait(30) == 0


def test_socket_permissions_and_control_ops(make_daemon: Any, tmp_path: Path) -> None:
    d = make_daemon()
    run = Path(d.runtime_dir)
    assert stat.S_IMODE(run.stat().st_mode) == 0o750
    for name in ("control.sock", "edged.sock"):
        assert stat.S_IMODE((run / name).stat().st_mode) == 0o660, name
    r = d.ctl({"op": "unload", "model": "digits"})
    assert r["status"] == "OK" and r["model"]["state"] == "unloaded"
    with d.client() as c:
        u = c.infer("digits", X, raise_on_error=False)
        assert u.status == "UNAVAILABLE" and "unloaded" in u.header["error"]
        assert not c.health().ok  # a required model is not ready
    r = d.ctl({"op": "load", "model": "digits"})
    assert r["status"] == "OK" and r["model"]["state"] == "ready"
    with d.client() as c:
        assert c.infer("digits", X).ok and c.health().ok
    r = d.ctl({"op": "swap", "model": "digits", "variant": "cnn-int8"})
    assert r["status"] == "OK" and r["model"]["active_variant"] == "cnn-int8"
    assert d.ctl({"op": "load", "model": "nope"})["status"] == "NOT_FOUND"
    assert d.ctl({"op": "explode"})["status"] == "NOT_FOUND"
    out = subprocess.run([sys.executable, "-m", "edged", "status", "--control", d.control],
                         capture_output=True, text=True, cwd=ROOT, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "digits" in out.stdout and "[cnn-int8]" in out.stdout and "serving" in out.stdout
    assert os.path.exists(run / "control.sock")
