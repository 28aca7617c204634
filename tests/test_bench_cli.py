"""``edged bench`` against a real daemon, with the in-process ORT comparison."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import MODELS, ROOT, Daemon


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
