"""The energy budget mode, pure: its config, the plan inside the real Governor, the
energy oracle against brute force, the closed-loop judge on a shipped power trace, the
battery's power in its kernel format, and the replay that reports it."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.paths import ROOT
from support.sysfs import make_battery, write_value

from edged.config.governor import GovernorConfig, LevelConfig
from edged.config.governor_energy import EnergyConfig
from edged.config.schema import Table
from edged.errors import InvalidArgument
from edged.governor.energy_oracle import Rung, solve, tick_demand, upper_bound
from edged.governor.energy_sim import judge
from edged.governor.policy import Governor
from edged.governor.sensors import THERMAL, Readings
from edged.governor.sensors.sampler import Sensors
from edged.governor.trace import load_trace

TRACES = ROOT / "examples" / "traces"
#: watts above an idle of 1 W at full demand, and the work per second, per rung
RUNGS = (Rung(5.0, 1.0), Rung(2.5, 0.85), Rung(1.25, 0.7))


def _governor_config(table: dict) -> tuple[GovernorConfig, list[str]]:
    t = Table(table, "governor", "edged.toml")
    return GovernorConfig.from_table(t), t.problems


def test_config_names_the_key_of_every_problem() -> None:
    cfg, problems = _governor_config({"energy": {"budget_wh": 12.5, "mission_s": 7200}})
    assert not problems and cfg.energy == EnergyConfig(12.5, 7200.0) and cfg.energy.enabled
    assert not _governor_config({})[0].energy.enabled
    _, problems = _governor_config({"energy": {"budget_wh": -1, "mision_s": 60}})
    text = "\n".join(problems)
    assert "governor.energy.budget_wh: must be > 0" in text
    assert "governor.energy.mission_s: missing" in text
    assert "governor.energy.mision_s: unknown key (did you mean 'mission_s'?)" in text


def _mission(budget_wh: float, seconds: int = 1800, lead: int = 20, hold_s: float = 50.0) -> dict:
    """Idle for ``lead`` seconds, then a steady full load on the 3-rung ladder, the real
    Governor choosing the rung each second."""
    cfg = GovernorConfig(enabled=True, swap_min_interval_s=hold_s,
                         energy=EnergyConfig(budget_wh, seconds))
    gov = Governor(cfg, clock=lambda: 0.0)
    rung, spent, work, rungs_seen, mid = 0, 0.0, 0.0, [], None
    for t in range(seconds + 1):
        demand = 0.0 if t <= lead else 1.0
        power = 1.0 + demand * RUNGS[rung].power_w
        if t:
            spent += power
            work += demand * RUNGS[rung].value
        gov.observe_load("m", rung, demand, ladder_len=3, rows=round(10 * demand))
        d = gov.step(Readings(timestamp=t, wall_time=t, total_power_w=power), now=t)
        rungs_seen.append(rung)
        rung = min(d.ladder_steps, 2)
        mid = d if t == seconds // 2 else mid
    return {"spent_wh": spent / 3600, "work": work, "rungs": rungs_seen, "last": d, "mid": mid}


def test_the_plan_spends_the_budget_on_the_heaviest_mix_that_lasts() -> None:
    # 1 W idle + 2.5 W (rung 1) = 3.5 W, 2.25 W on rung 2: 1.5 Wh over 1800 s is 3 W,
    # which only a mix of rungs 1 and 2 fits (60 % on rung 1: work 0.79 per second).
    r = _mission(1.5)
    assert r["spent_wh"] <= 1.5, "the mission must complete on the budget"
    assert r["spent_wh"] >= 0.97 * 1.5, r["spent_wh"]
    assert r["work"] >= 0.97 * 0.79 * 1780, r["work"]
    assert {1, 2} <= set(r["rungs"]) and r["rungs"][0] == 0  # starts heaviest, learns
    e = r["last"].energy
    assert e["idle_w"] == pytest.approx(1.0)  # learned while nothing was computed
    assert e["energy_per_inference_j"]["1"] == pytest.approx(0.25, rel=0.01)  # 2.5 W / 10 rows
    # A budget the heaviest rung fits leaves the ladder alone.
    loose = _mission(4.0)
    assert set(loose["rungs"]) == {0} and loose["spent_wh"] == pytest.approx(2.97, rel=0.01)


def test_a_budget_no_rung_can_finish_says_so_and_runs_the_lightest() -> None:
    r = _mission(0.3, seconds=600)  # 1 W idle + 1.25 W on the lightest: 0.36 Wh
    assert r["rungs"][-1] == 2
    assert "even the lightest known step" in r["mid"].energy["reason"]
    assert r["mid"].energy["projected_end"] == "budget"
    assert r["last"].energy["reason"] == "mission over"


def test_an_operator_budget_counts_from_now_and_carries_what_is_left() -> None:
    gov = Governor(GovernorConfig(enabled=True), clock=lambda: 0.0)
    with pytest.raises(InvalidArgument, match="both budget_wh and mission_s"):
        gov.set_energy(1.0, None)
    gov.step(Readings(timestamp=0, wall_time=0, total_power_w=10.0), now=0)
    gov.set_energy(1.0, 100.0)
    for t in (1, 2, 3):
        gov.step(Readings(timestamp=t, wall_time=t, total_power_w=10.0), now=t)
    e = gov.snapshot()["energy"]
    assert e["by"] == "operator" and e["spent_wh"] == pytest.approx(30 / 3600, abs=1e-4)
    later = gov.set_energy(None, 600.0)  # a new mission length: the budget left carries on
    assert later is not None and later["budget_wh"] == pytest.approx(1.0 - 30 / 3600, abs=1e-4)
    assert gov.set_energy(None, None, off=True) is None
    assert gov.snapshot()["energy"] is None


def test_running_out_spends_the_swap_budget_early() -> None:
    """A step down the budget needs at once is not held for the swap interval."""
    levels = (LevelConfig("normal"), LevelConfig("warm", enter_c=70.0, exit_c=65.0,
                                                 ladder_steps=1))
    gov = Governor(GovernorConfig(enabled=True, levels=levels, swap_min_interval_s=300.0),
                   clock=lambda: 0.0)

    def step(t: int, temp: float) -> int:
        gov.observe_load("m", 0, 1.0, ladder_len=3, rows=10)
        r = Readings(timestamp=t, wall_time=t, temperatures={"zone": temp},
                     kinds={"zone": THERMAL}, total_power_w=6.0)
        return gov.step(r, now=t).ladder_steps

    assert step(0, 75.0) == 1  # warm: the first change is free
    assert [step(t, 50.0) for t in range(1, 20)][-1] == 1  # cool, but the swap budget holds
    gov.set_energy(0.001, 600.0)  # 3.6 J for 600 s: nothing fits
    assert step(20, 50.0) == 2 and gov.decision.energy["urgent"] is True


def test_a_reload_keeps_the_account_unless_the_table_changed() -> None:
    cfg = GovernorConfig(enabled=True, energy=EnergyConfig(1.0, 100.0))
    old = Governor(cfg, clock=lambda: 0.0)
    for t in (0, 1, 2):
        old.step(Readings(timestamp=t, wall_time=t, total_power_w=36.0), now=t)
    same = Governor(cfg, clock=lambda: 2.0, energy_from=old.energy)
    assert same.snapshot()["energy"]["spent_wh"] == pytest.approx(0.02)
    changed = Governor(GovernorConfig(enabled=True, energy=EnergyConfig(2.0, 100.0)),
                       clock=lambda: 2.0, energy_from=old.energy)
    assert changed.snapshot()["energy"] == {"budget_wh": 2.0, "mission_s": 100.0,
                                            "by": "config", "started": False}


def _brute_force(demand: np.ndarray, budget: float, hold: int) -> float:
    """Every schedule of rungs, changing no more often than every ``hold`` ticks."""
    best = -1.0
    for seq in itertools.product(range(len(RUNGS)), repeat=len(demand)):
        runs = [len(list(g)) for _, g in itertools.groupby(seq)]
        if any(n < hold for n in runs[:-1]):
            continue
        energy = sum(1.0 + d * RUNGS[r].power_w for d, r in zip(demand, seq, strict=True))
        if energy <= budget + 1e-9:
            best = max(best, sum(d * RUNGS[r].value for d, r in zip(demand, seq, strict=True)))
    return best


@pytest.mark.parametrize(("budget", "hold"), [(20.0, 1), (20.0, 3), (17.0, 2), (26.0, 3)])
def test_the_oracle_is_the_best_schedule_that_keeps_the_dwell(budget: float, hold: int) -> None:
    demand = np.array([1.0, 0.2, 0.9, 1.0, 0.0, 0.6, 1.0, 0.4])
    best = _brute_force(demand, budget, hold)
    got = solve(demand, 1.0, 1.0, RUNGS, budget, hold_s=hold, buckets=4000)
    assert got is not None and got.work == pytest.approx(best, rel=0.01)
    assert got.energy_j <= budget + 1e-9  # within the budget without rounding
    bound = upper_bound(demand, 1.0, 1.0, RUNGS, budget, hold_s=hold)
    assert best - 1e-9 <= bound <= 1.05 * best
    runs = [len(list(g)) for _, g in itertools.groupby(got.rungs)]
    assert all(n >= hold for n in runs[:-1]), got.rungs
    assert solve(demand, 1.0, 1.0, RUNGS, 8.0 + 0.5, hold_s=1) is None  # idle alone is 8 J


def test_tick_demand_is_the_held_demand_averaged() -> None:
    demand = [(0.0, 0.0), (1.0, 1.0), (2.0, 0.0), (3.0, 0.5), (4.0, 0.5)]
    assert tick_demand(demand, 2.0, 4.0).tolist() == pytest.approx([0.5, 0.5])


def test_on_a_shipped_power_trace_the_mission_completes_near_the_oracle() -> None:
    trace = load_trace(TRACES / "power" / "synthetic-drone-survey.csv")
    r = judge(GovernorConfig(enabled=True), trace, shares=(0.5,))
    row = r["budgets"][0]
    assert row["completed"] and row["died_at_s"] is None
    assert row["share_of_oracle_pct"] >= 90.0, row
    assert 0.0 <= row["unspent_pct"] <= 10.0, row
    # the oracle's schedule is within 1 % of the bound no schedule can beat
    assert row["oracle_work"] <= row["oracle_bound"] <= 1.01 * row["oracle_work"]
    assert row["oracle_spent_pct"] <= 100.0


def test_a_discharging_battery_is_the_boards_power(tmp_path: Path) -> None:
    bat = make_battery(tmp_path, 70, "Discharging")
    write_value(bat / "power_now", 7_250_000)  # µW
    aux = make_battery(tmp_path, 90, "Discharging", name="BAT1")
    write_value(aux / "voltage_now", 12_000_000)  # µV
    write_value(aux / "current_now", -250_000)  # µA, negative while discharging
    s = Sensors(str(tmp_path), sources=("battery",))
    r = s.sample()
    assert r.power == {"BAT0": 7.25, "BAT1": 3.0} and r.total_power_w == pytest.approx(10.25)
    write_value(bat / "status", "Charging")
    r = s.sample()
    assert "BAT0" not in r.power and "BAT0" in r.unavailable and "BAT0" not in r.stale
    assert r.total_power_w == pytest.approx(3.0)


def test_replay_simulate_reports_the_energy_mode(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    busy = [4.0 if 40 <= t % 150 < 110 else 0.2 for t in range(300)]  # two bursts
    rows = ["t_s,total_w"] + [f"{t},{2.0 + w + rng.normal(0, 0.05):.2f}"
                              for t, w in enumerate(busy)]
    path = tmp_path / "power.csv"
    path.write_text("\n".join(rows) + "\n")
    out = subprocess.run([sys.executable, "-m", "edged", "governor", "replay", str(path),
                          "--simulate", "--json"], capture_output=True, text=True, check=True,
                         timeout=120)
    energy = json.loads(out.stdout)["simulation"]["energy"]
    assert [b["share"] for b in energy["budgets"]] == [0.25, 0.5, 0.75]
    assert all(b["completed"] and b["share_of_oracle_pct"] >= 90 for b in energy["budgets"])
    text = subprocess.run([sys.executable, "-m", "edged", "governor", "replay", str(path),
                           "--simulate"], capture_output=True, text=True, check=True,
                          timeout=120).stdout
    assert "energy budget mode (model, not a recording)" in text and "% of oracle" in text
