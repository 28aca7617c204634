"""``edged bench`` against a real daemon, with the in-process ORT comparison."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support.daemons import Daemon
from support.paths import MODELS, ROOT


def test_edged_bench_drives_the_daemon_and_reports_ratios(daemon: Daemon,
                                                          tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    p = subprocess.run(
        [sys.executable, "-m", "edged", "bench", "--endpoint", daemon.tcp, "--model", "digits",
         "--clients", "2", "--in-flight", "2", "--duration", "1.5", "--input", "image",
         "--file", str(MODELS / "samples" / "digit7_196.png"),
         "--raw", str(MODELS / "cnn-fp32.onnx"), "--json", str(out)],
        capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert "p50 daemon/raw" in p.stdout and "round 1" in p.stderr  # progress shown
    r = json.loads(out.read_text())
    d = r["rounds"][0]["daemon"]
    assert d["ok"] > 10 and d["statuses"] == {"OK": d["ok"]}
    assert 0 < d["p50_ms"] <= d["p90_ms"] <= d["p99_ms"]
    assert r["rounds"][0]["raw"]["best_throughput"] > 0
    assert r["ratios"]["p50 daemon/raw"] > 0
    assert r["machine"]["logical_cpus"] >= 1


def test_edged_bench_names_what_the_daemon_serves(daemon: Daemon) -> None:
    p = subprocess.run([sys.executable, "-m", "edged", "bench", "--endpoint", daemon.tcp,
                        "--model", "nope", "--duration", "1"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 2 and "does not serve 'nope'" in p.stderr and "digits" in p.stderr


def test_edged_bench_floor_reports_daemon_raw_and_both_floors(daemon: Daemon,
                                                              tmp_path: Path) -> None:
    """One run: raw ORT, the daemon and the two floor servers, each phase answered."""
    out = tmp_path / "floor.json"
    p = subprocess.run(
        [sys.executable, "-m", "edged", "bench", "--endpoint", daemon.ipc, "--model", "digits",
         "--floor", "--raw", str(MODELS / "cnn-fp32.onnx"), "--clients", "2",
         "--duration", "1", "--json", str(out)],
        capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    r = json.loads(out.read_text())
    load = r["machine"]["load_avg"][0]
    assert f"load average {load}" in p.stdout
    assert ("WARNING: load average" in p.stdout) == (load > 0.3)
    rnd = r["rounds"][0]
    for phase, clients in (("daemon_b1", 1), ("floor_b1", 1), ("daemon_n", 2), ("floor_n", 2)):
        d = rnd[phase]
        assert d["clients"] == clients and d["in_flight"] == 1, phase
        assert d["ok"] > 5 and d["statuses"] == {"OK": d["ok"]}, (phase, d)
        assert 0 < d["p50_ms"] <= d["p99_ms"], phase
    assert rnd["raw"]["best_throughput"] > 0
    assert set(r["ratios"]) == {
        "p50 daemon / one-thread floor", "p50 daemon / raw", "p50 one-thread floor / raw",
        "throughput daemon / batching floor", "throughput daemon / raw best",
        "throughput batching floor / raw best"}
    assert all(v > 0 for v in r["ratios"].values()), r["ratios"]
    assert "p50 daemon / one-thread floor" in p.stdout


def test_edged_bench_floor_needs_a_model_file_and_a_raw_tensor(daemon: Daemon) -> None:
    base = [sys.executable, "-m", "edged", "bench", "--endpoint", daemon.tcp, "--model",
            "digits", "--floor", "--duration", "1"]
    p = subprocess.run(base, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 2 and "--floor needs --raw" in p.stderr
    p = subprocess.run([*base, "--raw", str(MODELS / "cnn-fp32.onnx"), "--input", "image",
                        "--file", str(MODELS / "samples" / "digit7_196.png")],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 2 and "the floors take a raw tensor" in p.stderr
