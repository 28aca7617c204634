"""``edged bench footprint`` on a real daemon: start -> healthy, idle CPU and RSS, and
which bytecode case it measured."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from support.configs import digits_config
from support.paths import MODELS, ROOT


def footprint(tmp: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Any]:
    """Run the command on a digits config; bytecode goes to ``tmp`` (never the checkout)."""
    cfg = digits_config(tmp, variants=("cnn-fp32",))
    out = tmp / "footprint.json"
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(tmp / "pycache")}
    p = subprocess.run([sys.executable, "-m", "edged", "bench", "footprint", "--config",
                        str(cfg), "--settle-seconds", "0.2", "--json", str(out), *args],
                       capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert p.returncode == 0, p.stderr + p.stdout
    return p, json.loads(out.read_text())["footprint"]


def test_footprint_reports_start_idle_and_rss_with_bytecode_cached(tmp_path: Path) -> None:
    p, fp = footprint(tmp_path, "--startups", "2", "--idle-seconds", "1")
    bc = fp["bytecode"]
    assert bc["case"] == "cached" and bc["modules"] > 50 and bc["fresh"] == bc["modules"]
    assert bc["env"] == {"PYTHONDONTWRITEBYTECODE": ""}  # "" is unset for Python
    assert "bytecode: cached" in p.stdout and f"{bc['modules']} of {bc['modules']}" in p.stdout
    pycs = list((tmp_path / "pycache").rglob("*.pyc"))
    assert any(p.name.startswith("harness.") for p in pycs)  # compiled into the prefix
    # The daemon could write bytecode (PYTHONDONTWRITEBYTECODE unset): pyzmq's is there.
    assert any("zmq" in p.parts for p in pycs)
    st = fp["startup"]
    assert len(st["ready_s"]) == 2 and all(r > 0 for r in st["ready_s"])
    # The daemon's own figure counts from its process's start, inside the Popen → ready span.
    assert all(0 < ms < r * 1000 for ms, r in zip(st["startup_ms"], st["ready_s"],
                                                  strict=True))
    idle = fp["idle"]["default"]
    assert set(fp["idle"]) == {"default"} and idle["threads"] > 1
    assert 0 <= idle["cpu_pct"] < 100 and 0.9 <= idle["seconds"] < 5
    rss = fp["rss"]["default"]
    assert rss["models"] == [str(MODELS / "cnn-fp32.onnx")]
    assert rss["daemon_rss_mb"] > rss["bare_rss_warm_mb"] > 10
    assert math.isclose(rss["delta_mb"], rss["daemon_rss_mb"] - rss["bare_rss_warm_mb"])
    assert "| start → healthy" in p.stdout and "| RSS, edged.toml" in p.stdout


def test_footprint_can_measure_edged_compiled_from_source(tmp_path: Path) -> None:
    p, fp = footprint(tmp_path, "--startups", "1", "--idle-seconds", "0.5",
                      "--bytecode", "source")
    bc = fp["bytecode"]
    assert bc["case"] == "source" and bc["fresh"] == 0 and bc["modules"] > 50
    assert bc["env"] == {"PYTHONDONTWRITEBYTECODE": "1"}
    assert "bytecode: from source" in p.stdout and "bytecode source" in p.stdout
    assert len(fp["startup"]["ready_s"]) == 1


def test_footprint_names_a_config_it_cannot_read(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "edged", "bench", "footprint", "--config",
                        str(tmp_path / "nope.toml")],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 4 and "nope.toml: cannot read config file" in p.stderr


def test_bench_without_a_subcommand_still_needs_a_model() -> None:
    p = subprocess.run([sys.executable, "-m", "edged", "bench", "--duration", "1"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 2 and "--model is required" in p.stderr and "footprint" in p.stderr
