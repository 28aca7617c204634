"""``edged governor replay``: trace formats, bad rows, determinism, and the CLI on the
shipped traces (real subprocesses, real files)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from edged.config.governor import GovernorConfig
from edged.governor.replay import replay
from edged.governor.trace import TraceError, load_trace

ROOT = Path(__file__).resolve().parent.parent
TRACES = sorted(p for p in (ROOT / "examples" / "traces").iterdir()
                if p.suffix in (".csv", ".log"))
FORECAST_CONFIG = """
[governor]
forecast_s = 30
forecast_model = "first_order"
"""

JP5 = (
    "{stamp} RAM 2274/6834MB (lfb 27x4MB) SWAP 542/3417MB (cached 2MB) "
    "CPU [99%@1189,100%@1188,off,off] EMC_FREQ 0% GR3D_FREQ 22% AUX@36.5C CPU@{cpu}C "
    "thermal@37.85C GPU@38C PMIC@50C CV0@-256C VDD_IN {vin}mW/5542mW "
    "VDD_CPU_GPU_CV 1594mW/1594mW VDD_SOC 1234mW/1234mW"
)
JP4 = (
    "RAM 1738/3956MB (lfb 172x4MB) SWAP 0/1978MB (cached 0MB) CPU [7%@1224,0%@1224] "
    "EMC_FREQ 0% GR3D_FREQ 0% PLL@29C CPU@{cpu}C PMIC@100C GPU@31.5C AO@37C "
    "thermal@31.25C POM_5V_IN {vin}/2089 POM_5V_GPU 40/57 POM_5V_CPU 203/289"
)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "edged", "governor", "replay", *args],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)


def fresh_replay(path: Path, cfg: GovernorConfig) -> dict:
    """A replay with a new Governor (the policy reads no sensors: the trace is its input)."""
    return replay(cfg, load_trace(path))


# -- formats -----------------------------------------------------------------------------------
def test_csv_parses_zones_rails_total_and_throttle_marks(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text("# a comment\nt_s,cpu-thermal_c,gpu-thermal_c,VDD_IN_w,VDD_GPU_w,throttled\n"
                 "0,50,48,5.5,1.0,0\n1.5,51,,6.0,1.2,1\n")
    tr = load_trace(p)
    assert tr.format == "csv" and len(tr.samples) == 2 and tr.throttled == (False, True)
    s = tr.samples[1]
    assert s.timestamp == 1.5 and s.temperatures == {"cpu-thermal": 51.0}  # empty = not read
    assert s.power == {"VDD_IN": 6.0, "VDD_GPU": 1.2} and s.total_power_w == 6.0


def test_csv_total_is_the_total_w_column_else_the_rails_as_the_sampler_takes_them(
        tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text("t_s,cpu_c,VDD_IN_w,VDD_GPU_w,total_w\n0,50,5.5,1.0,7.0\n1,50,5.5,1.0,\n")
    assert [s.total_power_w for s in load_trace(p).samples] == [7.0, 5.5]
    p.write_text("t_s,cpu_c,VDD_CPU_w,VDD_GPU_w\n0,50,2.0,1.0\n1,50,,\n")
    assert [s.total_power_w for s in load_trace(p).samples] == [3.0, None]


def test_tegrastats_jetpack5_with_timestamps_and_jetpack4_without(tmp_path: Path) -> None:
    p5 = tmp_path / "jp5.log"
    p5.write_text("\n".join(JP5.format(stamp=f"10-01-2025 20:05:{55 + i}", cpu=40 + i,
                                       vin=5542 + 100 * i) for i in range(3)) + "\n")
    tr = load_trace(p5)
    assert tr.format == "tegrastats" and [s.timestamp for s in tr.samples] == [0.0, 1.0, 2.0]
    s = tr.samples[2]
    # PMIC (bogus) and the -256 °C "off" zone are skipped; names lower-cased.
    assert s.temperatures == {"aux": 36.5, "cpu": 42.0, "thermal": 37.85, "gpu": 38.0}
    assert s.power["VDD_IN"] == pytest.approx(5.742) and s.total_power_w == pytest.approx(5.742)
    p4 = tmp_path / "jp4.log"
    p4.write_text("\n".join(JP4.format(cpu=30 + i, vin=1997 + i) for i in range(3)) + "\n")
    tr4 = load_trace(p4, interval_s=0.5)
    assert [s.timestamp for s in tr4.samples] == [0.0, 0.5, 1.0]
    assert tr4.samples[0].total_power_w == pytest.approx(1.997)  # POM_5V_IN is the total
    assert "pmic" not in tr4.samples[0].temperatures


@pytest.mark.parametrize(("text", "expected"), [
    ("t_s,cpu_c\n0,50\n1,hot\n", ":3: cpu_c: not a number: 'hot'"),
    ("t_s,cpu_c\n0,50\n1,50,7\n", ":3: 3 cells, the header has 2"),
    ("t_s,cpu_c\n0,50\n\n0,51\n", ":4: t_s 0 does not increase"),
    ("time,cpu_c\n0,50\n", ":1: the header must start with t_s"),
    ("t_s,cpu\n0,50\n", ":1: column 'cpu': expected <zone>_c"),
    ("t_s,cpu_c,throttled\n0,50,2\n1,50,0\n", ":2: throttled must be 0 or 1"),
    ("t_s,cpu_c\n0,nan\n", ":2: cpu_c: not finite"),
])
def test_bad_csv_rows_name_the_line(tmp_path: Path, text: str, expected: str) -> None:
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert f"{p}{expected}" in str(e.value)


def test_bad_tegrastats_line_names_the_line(tmp_path: Path) -> None:
    p = tmp_path / "bad.log"
    p.write_text(JP4.format(cpu=30, vin=2000) + "\nnvidia@jetson:~$ sudo tegrastats\n")
    with pytest.raises(TraceError, match=r"bad\.log:2: not a tegrastats line"):
        load_trace(p)


# -- determinism and the CLI ---------------------------------------------------------------------
def test_replay_is_deterministic() -> None:
    cfg = GovernorConfig(enabled=True, forecast_s=30.0, forecast_model="first_order",
                         forecast_window_s=60.0, forecast_persist=5)
    trace = ROOT / "examples" / "traces" / "synthetic-pi4-heatup.csv"
    a = fresh_replay(trace, cfg)
    b = fresh_replay(trace, cfg)
    assert a["decisions"] and a["decisions"] == b["decisions"] and a["summary"] == b["summary"]


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.name)
def test_cli_replays_each_shipped_trace_within_targets(trace: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "edged.toml"
    cfg.write_text(FORECAST_CONFIG)
    # Boards that never reach the default 70/80 °C levels are replayed with the trip
    # point their README suggests (levels at trip - 15 and trip - 5 °C).
    trips = {"orin": "99", "uconsole-cm5": "65", "jetson-nano": "60"}
    trip = next((["--trip", v] for k, v in trips.items() if k in trace.name), [])
    r = run_cli(str(trace), "--config", str(cfg), "--json", *trip)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)["summary"]
    assert s["level_changes"] >= 1  # the trace does heat the board past a threshold
    # Targets (docs/governor.md "Replay figures"), one heat-up/cool-down cycle per trace:
    assert all(n <= 1 for n in s["entries_per_level"].values()), s
    assert s["top_level_from_forecast"] is False
    if "lead_before_device_throttling_s" in s:
        assert s["lead_before_device_throttling_s"] >= 60
    text = run_cli(str(trace), *trip)
    assert text.returncode == 0 and "summary" in text.stdout and "level_changes" in text.stdout


def test_cli_bad_trace_exits_2_with_the_line(tmp_path: Path) -> None:
    p = tmp_path / "bad.csv"
    p.write_text("t_s,cpu_c\n0,50\n1,x\n")
    r = run_cli(str(p))
    assert r.returncode == 2 and f"{p}:3: cpu_c: not a number" in r.stderr


def test_cli_plot_and_simulate_write_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "replay.png"
    trace = ROOT / "examples" / "traces" / "synthetic-pi4-heatup.csv"
    r = run_cli(str(trace), "--plot", str(out), "--simulate", "--json")
    assert r.returncode == 0, r.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    runs = json.loads(r.stdout)["simulation"]["runs"]
    assert set(runs) == {"plain", "predicted", "mpc", "heaviest", "lightest", "oracle"}
    assert runs["heaviest"]["throttled_s"] > 0
    assert runs["lightest"]["work_lost_vs_lightest_pct"] == 0
    # Every run as a share of the oracle's work (the oracle itself: 1, 0 s above the trip).
    assert runs["oracle"]["share_of_oracle"] == 1.0
    assert runs["oracle"]["seconds_above_limit"] == 0
    assert runs["heaviest"]["seconds_above_limit"] > 0
    for name, run in runs.items():
        assert {"share_of_oracle", "seconds_above_limit", "swaps"} <= set(run), name
        assert 0 < run["share_of_oracle"] <= 1.0, name
