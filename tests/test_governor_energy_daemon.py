"""The energy budget in the real daemon: a discharging battery's power in its kernel
format under a temporary sysfs root, a small budget that steps the variant down and
shows in ``edged status``, and the budget changed live through the control API."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from support.configs import digits_config
from support.governor import Streamers, active, status
from support.paths import ROOT
from support.sysfs import make_battery, make_thermal_zone, write_value
from support.waits import wait_until


@pytest.fixture
def battery_root(tmp_path: Path) -> Path:
    """A cool board on battery drawing 12 W (``power_now`` in µW, as the kernel has it)."""
    root = tmp_path / "sysroot"
    make_thermal_zone(root, 0, "cpu-thermal", 45000, trips=[(95000, "passive", 0)])
    bat = make_battery(root, 80, "Discharging")
    write_value(bat / "power_now", 12_000_000)
    return root


def _config(tmp: Path, root: Path, energy: str = "") -> Path:
    return digits_config(tmp, governor=f"""
[governor]
enabled = true
sysfs_root = "{root}"
interval_s = 0.1
swap_min_interval_s = 0
{energy}
""")


def _cli(d: Any, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "edged", *args, "--control", d.control],
                          capture_output=True, text=True, env=env, timeout=60)


def test_a_small_budget_steps_down_and_status_shows_it(
        make_daemon: Any, tmp_path: Path, battery_root: Path) -> None:
    # 0.05 Wh is 15 s at 12 W, for a 600 s mission: only the lightest rung is allowed.
    d = make_daemon(_config(tmp_path, battery_root, """
[governor.energy]
budget_wh = 0.05
mission_s = 600
"""), metrics=True)
    load = Streamers(d, n=2)
    try:
        wait_until(lambda: active(d) == "small-fp32", 30, "the budget steps down the ladder")
        g = status(d)["governor"]
    finally:
        replies = load.finish()
    assert replies and all(r[1] == "OK" for r in replies)
    e = g["energy"]
    assert e["budget_wh"] == 0.05 and e["by"] == "config"
    assert e["spent_wh"] > 0 and e["left_wh"] < 0.05
    assert e["power_w"] == 12.0 and e["projected_end"] == "budget"
    assert e["mission_left_s"] < 600 and e["step"] == 2
    assert "energy: " in g["reason"] and g["readings"]["power"]["BAT0"] == 12.0
    scraped = urllib.request.urlopen(f"http://127.0.0.1:{d.metrics_port}/metrics").read()
    left = next(ln for ln in scraped.decode().splitlines()
                if ln.startswith("edged_energy_budget_left_joules "))
    assert float(left.split()[1]) < 0.05 * 3600
    text = _cli(d, "status")
    assert text.returncode == 0, text.stderr
    line = next(ln for ln in text.stdout.splitlines() if ln.strip().startswith("energy"))
    assert "of 0.050 Wh left" in line and "runs out in" in line, line
    assert "the energy budget steps the ladder 2 rung(s) down" in text.stdout, text.stdout


def test_the_budget_changes_live_through_the_control_api(
        make_daemon: Any, tmp_path: Path, battery_root: Path) -> None:
    d = make_daemon(_config(tmp_path, battery_root))
    r = d.ctl({"op": "energy"})
    assert r["status"] == "OK" and r["energy"] is None
    for bad, says in (({"budget_wh": 1.0}, "both budget_wh and mission_s"),
                      ({"budget_wh": -1, "mission_s": 60}, "'budget_wh' must be a number > 0"),
                      ({"mission_s": "2h"}, "'mission_s' must be a number > 0"),
                      ({"off": True, "budget_wh": 1.0}, "without budget_wh")):
        r = d.ctl({"op": "energy", **bad})
        assert r["status"] == "INVALID_ARGUMENT" and says in r["error"], (bad, r)
    assert status(d)["governor"]["energy"] is None  # a refused change changed nothing
    load = Streamers(d, n=2)
    try:
        r = d.ctl({"op": "energy", "budget_wh": 0.05, "mission_s": 600})
        assert r["status"] == "OK"
        assert r["energy"]["budget_wh"] == 0.05 and r["energy"]["by"] == "operator"
        wait_until(lambda: active(d) == "small-fp32", 30, "a small budget steps down")
        before = status(d)["governor"]["energy"]
        assert d.ctl({"op": "reload"})["status"] == "OK"  # a new Governor: the account carries
        after = status(d)["governor"]["energy"]
        assert after["by"] == "operator" and after["budget_wh"] == 0.05
        assert after["spent_wh"] >= before["spent_wh"] > 0
        r = _cli(d, "ctl", "energy", "--budget-wh", "1000", "--mission", "1h")
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("energy: ") and "1000.000 Wh" in r.stdout, r.stdout
        wait_until(lambda: active(d) == "cnn-fp32", 30, "a large budget climbs back")
        e = status(d)["governor"]["energy"]
        assert e["budget_wh"] == 1000.0 and e["mission_s"] == 3600.0
        assert e["projected_end"] == "mission"
        off = _cli(d, "ctl", "energy", "--off")
        assert off.returncode == 0 and off.stdout.strip() == "energy budget: off", off.stdout
    finally:
        replies = load.finish()
    assert replies and all(r[1] == "OK" for r in replies)
    assert status(d)["governor"]["energy"] is None
