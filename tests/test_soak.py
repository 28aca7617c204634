"""A short soak in CI: scripts/ops/soak for ~30 s against a real daemon.

The full run is ``scripts/ops/soak`` (10 minutes by default). Here: 30 s of steady mixed
load (valid, invalid, expiring and superseded stream requests from three client
processes at 80 % of measured capacity). Every request sent must get exactly one
reply, valid answers must be correct, and the daemon's RSS may grow at most 25 %
from the end of warm-up (10 s) to the end (see RSS_GROWTH_BOUND_PCT).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support.paths import ROOT

# 20 % is the figure for a machine to itself (scripts/ops/soak's default; a 10-minute run
# plateaus at ~5 %). When other jobs starve the daemon of CPU, requests wait in its
# ZeroMQ pipes (up to RCVHWM per connection) and RSS rises with them without leaking:
# a 10-minute run at 4x CPU oversubscription peaked at 19.7 %. CI machines are shared.
RSS_GROWTH_BOUND_PCT = 25.0


def test_short_soak_loses_nothing_and_memory_stays_flat(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "ops" / "soak"), "--duration", "30",
         "--capacity-seconds", "3", "--probe-step-seconds", "1", "--warmup", "10",
         "--window", "10", "--clients", "3",
         "--max-rss-growth", str(RSS_GROWTH_BOUND_PCT), "--json", str(out)],
        capture_output=True, text=True, timeout=240, cwd=str(ROOT))
    assert out.exists(), r.stdout + r.stderr
    rep = json.loads(out.read_text())
    summary = r.stdout
    assert rep["lost"] == 0, summary
    assert rep["sent"] == rep["received"] > 1000, summary
    assert rep["duplicates"] == 0 and rep["unattributed_replies"] == 0, summary
    assert rep["wrong_answers"] == 0 and not rep["unexpected"], summary
    assert rep["daemon_alive_at_end"] and rep["daemon_exit_code"] == 0, summary
    assert rep["daemon_log_tracebacks"] == 0, rep.get("daemon_log_tail")
    # Each part of the mix was sent and answered as it should be.
    kinds = rep["by_kind"]
    # How many valid requests find the queue full depends on what else the machine runs;
    # that they are answered (OK or RESOURCE_EXHAUSTED, never lost) does not.
    assert set(kinds["valid"]) <= {"OK", "RESOURCE_EXHAUSTED"}, summary
    assert kinds["valid"].get("OK", 0) > 0.25 * rep["sent_by_kind"]["valid"], summary
    assert set(kinds["invalid"]) <= {"INVALID_ARGUMENT", "NOT_FOUND", "UNSUPPORTED_VERSION"}
    assert kinds["expired"].get("DEADLINE_EXCEEDED", 0) > 0, summary
    assert set(kinds["stream"]) <= {"OK", "DROPPED", "RESOURCE_EXHAUSTED"}, summary
    assert len(rep["latency_windows"]) >= 3, summary
    assert rep["rss_growth_pct"] is not None
    assert rep["rss_growth_pct"] < RSS_GROWTH_BOUND_PCT, summary
    assert rep["ok"] and r.returncode == 0, summary


def test_soak_reports_its_open_loop_probe_refusals_and_latency(tmp_path: Path) -> None:
    """A few seconds of soak: the report carries what the soak promises (not timings)."""
    out = tmp_path / "soak.json"
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "ops" / "soak"), "--duration", "3",
         "--capacity-seconds", "1", "--probe-step-seconds", "0.4", "--warmup", "1",
         "--window", "1", "--clients", "2", "--max-rss-growth", str(RSS_GROWTH_BOUND_PCT),
         "--json", str(out)],
        capture_output=True, text=True, timeout=240, cwd=str(ROOT))
    assert out.exists(), r.stdout + r.stderr
    rep = json.loads(out.read_text())
    probe = rep["capacity_probe"]
    assert probe["upper_bound_rps"] > 0 and probe["lost"] == 0
    assert isinstance(probe["capacity_is_lower_bound"], bool)
    steps = probe["steps"]
    assert steps, r.stderr
    rates = [st["rate_rps"] for st in steps]
    assert rates == sorted(rates) and len(set(rates)) == len(rates)  # a ramp, open loop
    for st in steps:
        assert {"rate_rps", "sent_rps", "valid_sent", "refused_pct", "p50_ms", "p99_ms",
                "sustained"} <= set(st)
        assert 0.0 <= st["refused_pct"] <= 100.0
    # The capacity is a sustained step's rate (or, if none was, the soak says so).
    sustained = [st["rate_rps"] for st in steps if st["sustained"]]
    assert rep["capacity_rps"] in sustained or "no open-loop probe step" in r.stderr
    assert abs(rep["target_rps"] - rep["capacity_rps"] * 0.8) < 0.2
    for key in ("refused_pct", "p50_ms", "p99_ms", "lost", "wrong_answers", "rss_growth_pct"):
        assert key in rep, key
    assert rep["lost"] == 0 and rep["wrong_answers"] == 0, r.stdout
    assert rep["p50_ms"] <= rep["p99_ms"]
    assert f"refused {rep['refused_pct']} %" in r.stdout and "RSS growth" in r.stdout
