"""``edged bench --peer``: edged against a real Triton on the same model, end to end on tiny
settings (a peer that cannot be built here skips, with the reason)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tritonclient.grpc", reason="the kserve extra is not installed "
                    "(pip install 'edged[kserve]')")
from support.paths import MODELS, ROOT
from support.peers import venv_or_skip


@pytest.mark.timeout(900)  # a clean machine builds the Triton venv first (a minute or so)
def test_edged_bench_peer_reports_both_servers_and_the_ratios(
        request: pytest.FixtureRequest, tmp_path: Path) -> None:
    venv_or_skip(request, "triton")
    out = tmp_path / "peer.json"
    p = subprocess.run(
        [sys.executable, "-m", "edged", "bench", "--peer", "triton",
         "--onnx", str(MODELS / "cnn-fp32.onnx"), "--model", "digits", "--clients", "2",
         "--duration", "1", "--rounds", "1", "--floor", "--json", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(out.read_text())
    assert f"load average {r['machine']['load_avg'][0]}" in p.stdout  # the machine line
    assert r["peer"] == "triton" and r["max_batch_size"] == 8
    assert r["peer_versions"]["nvidia-pytriton"] == "0.7.0", r["peer_versions"]
    rnd = r["rounds"][0]
    for server in ("edged", "peer", "floor"):  # --floor: the gRPC floor takes its turn too
        for clients in ("1", "2"):
            d = rnd[server][clients]
            assert d["ok"] > 5 and d["statuses"] == {"OK": d["ok"]}, (server, clients, d)
            assert 0 < d["p50_ms"] <= d["p99_ms"], (server, clients)
            # the server's whole process tree (Triton's python backend is a child process)
            assert 0 < d["cpu_ms_per_request"] < 1000, (server, clients, d)
    assert set(r["ratios"]) == {f"{m} {pair}, {c}"
                                for m in ("throughput", "p50", "p99", "cpu/request")
                                for c in ("1 client", "2 clients")
                                for pair in ("edged/peer", "edged/floor", "peer/floor")}
    assert all(v > 0 for v in r["ratios"].values()), r["ratios"]
    assert "throughput edged/peer, 2 clients" in p.stdout and "triton" in p.stdout
    assert "cpu/request edged/peer, 2 clients" in p.stdout and "ms/request" in p.stdout
    assert "gRPC floor" in p.stdout and "throughput edged/floor, 2 clients" in p.stdout


def test_edged_bench_peer_says_what_is_missing() -> None:
    p = subprocess.run([sys.executable, "-m", "edged", "bench", "--peer", "triton"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 2 and "--peer needs --onnx MODEL_FILE" in p.stderr, p.stderr
    p = subprocess.run([sys.executable, "-m", "edged", "bench", "--peer", "kserve", "--onnx",
                        str(MODELS / "cnn-fp32.onnx"), "--input", "image"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 2 and "--peer sends raw tensors" in p.stderr, p.stderr
