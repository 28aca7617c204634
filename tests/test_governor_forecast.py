"""First-order forecast, swap budget and predicted variant choice (pure policy: Readings in,
Decisions out, time injected; the simulator's plant is a first-order model)."""

from __future__ import annotations

import itertools
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edged.config.governor import GovernorConfig
from edged.config.schema import Table, raise_if_problems
from edged.errors import ConfigError
from edged.governor.decision import Decision
from edged.governor.forecast import fit_first_order
from edged.governor.plant import Plant
from edged.governor.policy import Governor
from edged.governor.sensors import Readings
from edged.governor.simulate import compare, default_ladder
from edged.governor.thermal_model import choose_rung

ZONE = "cpu-thermal"


def parse(data: dict[str, Any]) -> GovernorConfig:
    problems: list[str] = []
    cfg = GovernorConfig.from_table(Table(data, "governor", "edged.toml", problems,
                                          base_dir=Path("/")))
    raise_if_problems(problems)
    return cfg


def governor(tmp: Path, **keys: Any) -> Governor:
    cfg = parse({"sysfs_root": str(tmp), "nvml": False, **keys})
    return Governor(cfg, clock=lambda: 0.0)


def reading(t: float, temp: float, power: float | None = None) -> Readings:
    rails = {} if power is None else {"VDD_IN": power}
    return Readings(timestamp=t, wall_time=t, temperatures={ZONE: temp}, power=rails,
                    total_power_w=power,
                    kinds={ZONE: "thermal"} | dict.fromkeys(rails, "rail"))


def heat_up(seconds: int = 720) -> list[tuple[float, float, float]]:
    """(t, quantised temperature, true slope): 60 s idle, then a load step to a two-pole
    response (fast die τ 4 s, slow heat sink τ 150 s) settling at 85 °C."""
    out, fast, slow = [], 0.0, 0.0
    rng = random.Random(1)
    for t in range(seconds):
        u = 1.0 if t >= 60 else 0.0
        before = 48 + fast + slow
        fast += (9 * u - fast) * (1 - math.exp(-1 / 4))
        slow += (28 * u - slow) * (1 - math.exp(-1 / 150))
        true = 48 + fast + slow
        out.append((float(t), float(round(true + rng.gauss(0, 0.3))), true - before))
    return out


# -- the fit -----------------------------------------------------------------------------------
def test_fit_recovers_time_constant_and_equilibrium() -> None:
    t = np.arange(60.0)
    temps = 80.0 - 30.0 * np.exp(-(t + 100.0) / 150.0)
    fit = fit_first_order(t, temps, horizon_s=30.0, span_s=60.0)
    assert fit.equilibrium_c == pytest.approx(80.0, abs=1.5)
    assert fit.tau_s == pytest.approx(150.0, rel=0.15)
    assert fit.forecast_c == pytest.approx(80.0 - 30.0 * math.exp(-189.0 / 150.0), abs=0.3)
    line = fit_first_order(t, 50.0 + 0.1 * t, horizon_s=30.0, span_s=60.0)
    assert line.equilibrium_c is None  # a straight line has no equilibrium in sight


def test_forecast_on_quantised_heat_up_escalates_once_and_never_relaxes_while_rising(
        tmp_path: Path) -> None:
    gov = governor(tmp_path, forecast_s=30.0, forecast_model="first_order")
    decisions: list[tuple[float, Decision, float]] = []
    for t, temp, slope in heat_up():
        decisions.append((t, gov.step(reading(t, temp), now=t), slope))
    ups = [(t, d) for (t, d, _), (_, p, _) in zip(decisions[1:], decisions, strict=False)
           if d.index > p.index]
    by_forecast = [(t, d) for t, d in ups if d.reason.endswith("forecast)")]
    assert len(by_forecast) <= 1, by_forecast
    # The load step's fast transient (2-3 s) must not drive the forecast.
    assert all(t > 70 for t, _ in by_forecast), by_forecast
    # Never straight to the top on the forecast alone, never more than one level up.
    assert all(d.level != "hot" for _, d in by_forecast)
    downs = [(t, slope) for (t, d, slope), (_, p, _) in zip(decisions[1:], decisions,
                                                            strict=False) if d.index < p.index]
    assert not [x for x in downs if x[1] > 0.01], downs
    assert any(d.level == "warm" for _, d, _ in decisions)


def test_linear_forecast_still_follows_a_ramp(tmp_path: Path) -> None:
    """The legacy model is unchanged apart from the one-level cap."""
    gov = governor(tmp_path, forecast_s=10.0, forecast_window_s=6.0, forecast_model="linear")
    levels = [gov.step(reading(t, 55.0 + t), now=t).level for t in range(8)]
    assert levels.index("warm") <= 5


# -- swap budget -------------------------------------------------------------------------------
def test_swap_budget_holds_under_a_noisy_trace(tmp_path: Path) -> None:
    gov = governor(tmp_path, dwell_s=2.0, swap_min_interval_s=60.0)
    rng = random.Random(7)
    changes: list[float] = []
    level_changes = 0
    prev_steps = prev_index = 0
    for t in range(1200):
        temp = 70.0 + 6.0 * math.sin(t / 9.0) + rng.gauss(0, 1.5)  # flaps across 65/70
        d = gov.step(reading(float(t), temp), now=float(t))
        level_changes += d.index != prev_index
        if d.ladder_steps != prev_steps:
            changes.append(float(t))
        if d.swap_hold_s is not None:
            assert d.ladder_steps != d.ladder_wanted
        prev_steps, prev_index = d.ladder_steps, d.index
    assert level_changes > 20  # the level does flap...
    assert changes and all(b - a >= 60.0 for a, b in itertools.pairwise(changes))
    assert len(changes) <= 1200 / 60 + 1  # ...the variant does not


def test_hard_threshold_overrides_the_budget(tmp_path: Path) -> None:
    # the levels' hard threshold (mpc's is limit_c: test_governor_oracle.py)
    gov = governor(tmp_path, swap_min_interval_s=600.0, policy="levels")
    assert gov.step(reading(0, 71.0), now=0).ladder_steps == 1
    held = gov.step(reading(1, 79.0), now=1)
    assert held.ladder_steps == 1  # no hot level yet
    d = gov.step(reading(2, 80.0), now=2)  # the top level's enter value
    assert (d.level, d.ladder_steps, d.swap_hold_s) == ("hot", 2, None)


def test_swap_budget_config_is_validated(tmp_path: Path) -> None:
    assert parse({"dwell_s": 4.0}).swap_min_interval_s == 40.0  # "auto" = 10 dwells
    assert parse({"swap_min_interval_s": 0}).swap_min_interval_s == 0.0
    for bad, text in (({"swap_min_interval_s": "soon"}, "governor.swap_min_interval_s: must"),
                      ({"swap_min_interval_s": -1}, "governor.swap_min_interval_s: must be >= 0"),
                      ({"forecast_model": "cubic"}, "governor.forecast_model: must be one of"),
                      ({"forecast_persist": 0}, "governor.forecast_persist: must be > 0"),
                      ({"predict": "yes"}, "governor.predict: expected")):
        with pytest.raises(ConfigError) as e:
            parse(bad)
        assert text in str(e.value), (bad, str(e.value))


# -- prediction --------------------------------------------------------------------------------
def test_choose_rung_prefers_heaviest_safe_and_explores_only_downwards() -> None:
    assert choose_rung([90.0, 72.0, 60.0], active=0, limit_c=70.0) == 2
    assert choose_rung([90.0, None, None], active=0, limit_c=70.0) == 1
    assert choose_rung([None, 65.0, 60.0], active=1, limit_c=70.0) == 1
    assert choose_rung([69.0, 60.0], active=1, limit_c=70.0) == 1  # margin: 69 ≥ 70 − 2
    assert choose_rung([67.0, 60.0], active=1, limit_c=70.0) == 0


def test_observe_load_learns_and_reports_the_prediction(tmp_path: Path) -> None:
    gov = governor(tmp_path, predict=True)
    temp = 50.0
    explored_at: float | None = None
    for t in range(400):  # the plant ignores the choice: fp32 keeps heating towards 76 °C
        power = 2.0 if t < 60 else 6.0
        gov.observe_load("digits", 0, 0.0 if t < 60 else 0.9, now=float(t), ladder_len=3)
        eq = 40.0 + 6.0 * power
        temp = eq + (temp - eq) * math.exp(-1 / 80.0)
        d = gov.step(reading(float(t), round(temp), power), now=float(t))
        if explored_at is None and (d.variant_steps or {}).get("digits") == 1:
            explored_at = temp
    p = d.to_dict()["prediction"]
    assert p["units"] == "W" and p["limit_c"] == 70.0
    assert p["equilibrium_c"] == pytest.approx(76.0, abs=4.0)
    assert p["models"]["digits"]["equilibria_c"][0] == pytest.approx(76.0, abs=4.0)
    # fp32 settles above 70 °C: the next rung (never seen yet) is chosen well before 70.
    assert explored_at is not None and explored_at < 68.0
    assert d.variant_steps == {"digits": 1} and d.ladder_steps == 1


def test_simulated_prediction_stays_below_the_threshold_where_the_plain_policy_overshoots(
        tmp_path: Path) -> None:
    cfg = parse({"sysfs_root": str(tmp_path), "nvml": False})
    plant = Plant(ambient_c=48.0, rise_per_w=7.0, tau_s=120.0, idle_w=1.0, trip_c=85.0)
    demand = [(float(t), 0.0 if t < 60 else 1.0) for t in range(720)]
    sim = compare(cfg, plant, default_ladder(5.0), demand)
    runs = sim["runs"]
    assert runs["plain"]["peak_c"] > 70.0  # reacts at the threshold, then the lag overshoots
    assert runs["predicted"]["peak_c"] < 70.0
    assert runs["predicted"]["swaps"] <= 3
    assert runs["heaviest"]["throttled_s"] > 0 and runs["predicted"]["throttled_s"] == 0


def test_bursty_power_does_not_hide_the_forecast() -> None:
    from edged.governor.forecast import FirstOrderForecast

    fc = FirstOrderForecast(window_s=60.0, horizon_s=30.0, settle_s=10.0)
    fits = []
    for t in range(300):  # batches make VDD_IN swing 5 ↔ 13 W every second
        temp = round(80.0 - 30.0 * math.exp(-t / 150.0))
        fits.append(fc.update(float(t), float(temp), 5.0 if t % 2 else 13.0))
    assert fc.last_step_at is None
    assert sum(f is not None for f in fits[100:]) == 200
    step = [fc.update(300.0 + t, 70.0, 20.0) for t in range(8)]  # a real step: 9 → 20 W
    assert fc.last_step_at is not None and step[-1] is None
