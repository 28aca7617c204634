"""Governor config and policy: hysteresis, dwell, forecast, power, battery, stale, pin.

End-to-end cases drive real sysfs files through the sampler (``Sensors.sample()``) into
``step()``, as the daemon does; property tests feed ``Readings`` straight to ``step()``
(the policy is pure, time is injected).
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from support.sysfs import (
    ORIN_TRIPS,
    make_battery,
    make_get_throttled,
    make_ina3221_hwmon,
    make_thermal_zone,
    set_zone_temp,
)

from edged.config.governor import GovernorConfig, auto_levels
from edged.config.schema import Table, raise_if_problems
from edged.errors import ConfigError
from edged.governor.decision import Decision
from edged.governor.metrics import GovernorMetrics
from edged.governor.policy import Governor
from edged.governor.sensors import Readings
from edged.governor.sensors.sampler import Sensors


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def parse(data: dict[str, Any], base: Path | None = None) -> GovernorConfig:
    problems: list[str] = []
    t = Table(data, "governor", "/etc/edged/edged.toml", problems, base_dir=base or Path("/"))
    cfg = GovernorConfig.from_table(t)
    raise_if_problems(problems)
    return cfg


def problems_of(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as e:
        parse(data)
    return e.value.problems


LEVELS = [
    {"name": "warm", "enter_c": 70.0, "exit_c": 65.0, "ladder_steps": 1},
    {"name": "hot", "enter_c": 80.0, "exit_c": 75.0, "ladder_steps": 2, "max_batch_size": 2},
    {
        "name": "critical",
        "enter_c": 90.0,
        "exit_c": 85.0,
        "ladder_steps": 3,
        "max_batch_size": 1,
        "max_rate_hz": 5.0,
        "shed_priority_above": 0,
    },
]


def readings(
    t: float,
    temps: dict[str, float] | None = None,
    *,
    total_w: float | None = None,
    battery: float | None = None,
    plugged: bool | None = None,
    stale: set[str] = frozenset(),  # type: ignore[assignment]
) -> Readings:
    temps = temps or {}
    kinds = {n: "thermal" for n in [*temps, *stale]}
    return Readings(
        timestamp=t,
        wall_time=t,
        temperatures=dict(temps),
        total_power_w=total_w,
        battery_ratio=battery,
        battery_plugged=plugged,
        stale=frozenset(stale),
        unavailable=frozenset(stale),
        kinds=kinds,
    )


def governor(tmp_path: Path, **overrides: Any) -> tuple[Governor, Clock]:
    data: dict[str, Any] = {"sysfs_root": str(tmp_path), "dwell_s": 5.0, "levels": LEVELS}
    data.update(overrides)
    clock = Clock()
    return Governor(parse(data), clock=clock), clock


def sampled(tmp_path: Path, **overrides: Any) -> tuple[Governor, Clock, Sensors]:
    """A governor and the sampler reading ``tmp_path`` on the same clock, as the daemon
    pairs them (the policy reads no files itself)."""
    gov, clock = governor(tmp_path, **overrides)
    return gov, clock, Sensors(str(tmp_path), clock=clock)


def auto_governor(tmp_path: Path, **keys: Any) -> Governor:
    """``levels = "auto"`` from the trip points the sampler finds under ``tmp_path``."""
    return Governor(parse({"sysfs_root": str(tmp_path), **keys}),
                    trip_points=Sensors(str(tmp_path)).trip_points())


# -- config -----------------------------------------------------------------------------------
def test_absent_or_empty_table_is_disabled() -> None:
    assert parse({}).enabled is False
    cfg = parse({"sysfs_root": "/"})
    assert cfg.enabled is True and cfg.levels is None  # present: on, levels "auto"
    # policy "auto": mpc with the auto levels; configured levels keep their meaning
    assert cfg.policy == "auto" and cfg.chosen_policy == "mpc"
    assert parse({"levels": LEVELS}).chosen_policy == "levels"
    assert parse({"levels": LEVELS, "policy": "mpc"}).chosen_policy == "mpc"
    assert parse({"enabled": False, "levels": LEVELS}).enabled is False


def test_defaults() -> None:
    cfg = parse({"enabled": True})
    assert (cfg.interval_s, cfg.stale_policy, cfg.dwell_s, cfg.forecast_s) == (1.0, "hot", 5.0, 0)
    assert cfg.sysfs_root == "/" and cfg.sensors == () and cfg.power_budget_w is None


def test_relative_sysfs_root_is_relative_to_config(tmp_path: Path) -> None:
    assert parse({"sysfs_root": "replay/orin"}, tmp_path).sysfs_root == str(
        tmp_path / "replay/orin"
    )


def test_levels_parse_with_implicit_normal() -> None:
    cfg = parse({"levels": LEVELS})
    assert cfg.levels is not None
    assert [lv.name for lv in cfg.levels] == ["normal", "warm", "hot", "critical"]
    crit = cfg.levels[3]
    assert (crit.max_batch_size, crit.max_rate_hz, crit.shed_priority_above) == (1, 5.0, 0)


def test_first_level_without_trigger_is_the_base() -> None:
    cfg = parse({"levels": [{"name": "cool", "max_batch_size": 16}, LEVELS[0]]})
    assert cfg.levels is not None and [lv.name for lv in cfg.levels] == ["cool", "warm"]


def test_exit_defaults_five_below_enter() -> None:
    cfg = parse({"levels": [{"name": "warm", "enter_c": 70}]})
    assert cfg.levels is not None and cfg.levels[1].exit_c == 65.0


def test_validation_names_every_key() -> None:
    probs = problems_of(
        {
            "stale_policy": "panic",
            "dwel_s": 3,
            "interval_s": 0,
            "levels": [
                {"name": "a", "enter_c": 70, "exit_c": 72, "battery_below": 20},
                {"name": "a", "enter_c": 60, "max_batch_size": 0},
                {"name": "b", "ladder_steps": -1},
            ],
        }
    )
    text = "\n".join(probs)
    assert "/etc/edged/edged.toml: governor.stale_policy: must be one of" in text
    assert "governor.dwel_s: unknown key (did you mean 'dwell_s'?)" in text
    assert "governor.interval_s: must be > 0" in text
    assert "governor.levels[0].exit_c: must be below enter_c (70.0)" in text
    assert "governor.levels[0].battery_below: must be a ratio" in text
    assert "governor.levels[1].name: duplicate level name 'a'" in text
    assert "governor.levels[1].max_batch_size: must be > 0" in text
    assert "governor.levels[1].enter_c: must be greater than levels[0].enter_c" in text
    assert "governor.levels[2].ladder_steps: must be >= 0" in text
    assert "governor.levels[2]: has no trigger" in text


def test_levels_must_be_auto_or_tables() -> None:
    assert "governor.levels: must be one of 'auto'" in "\n".join(problems_of({"levels": "magic"}))
    assert parse({"levels": "auto"}).levels is None


def test_power_budget_exit_validated() -> None:
    assert parse({"power_budget_w": 10}).power_budget_exit_w == pytest.approx(9.0)
    text = "\n".join(problems_of({"power_budget_w": 10, "power_budget_exit_w": 12}))
    assert "governor.power_budget_exit_w: must be below power_budget_w" in text


# -- auto levels ------------------------------------------------------------------------------
def test_auto_levels_from_orin_passive_trip(tmp_path: Path) -> None:
    for i, name in enumerate(["cpu-thermal", "gpu-thermal", "tj-thermal"]):
        make_thermal_zone(tmp_path, i, name, 45000, trips=ORIN_TRIPS)
    gov = auto_governor(tmp_path, policy="levels")
    assert gov.trip_c == 99.0
    names = [
        (lv.name, lv.enter_c, lv.exit_c, lv.ladder_steps, lv.max_batch_size) for lv in gov.levels
    ]
    assert names == [
        ("normal", None, None, 0, None),
        ("warm", 84.0, 79.0, 1, None),
        ("hot", 94.0, 89.0, 2, 1),
    ]
    # The default policy (mpc with the auto levels) keeps hot as a backstop at the trip:
    # its batch cap must not engage where mpc holds the board, 1 °C below it.
    default = auto_governor(tmp_path)
    assert default.cfg.chosen_policy == "mpc" and default.limit_c == 99.0
    assert [(lv.name, lv.enter_c, lv.exit_c) for lv in default.levels[1:]] == [
        ("warm", 84.0, 79.0), ("hot", 98.5, 93.5)]


def test_auto_levels_fallback_without_trip(tmp_path: Path) -> None:
    make_thermal_zone(tmp_path, 0, "cpu-thermal", 45000)
    gov = auto_governor(tmp_path, auto_max_batch_size=4, policy="levels")
    assert gov.trip_c is None
    assert [(lv.enter_c, lv.exit_c) for lv in gov.levels[1:]] == [(70.0, 65.0), (80.0, 75.0)]
    assert [lv.enter_c for lv in auto_governor(tmp_path).levels[1:]] == [70.0, 84.5]
    assert gov.levels[2].max_batch_size == 4
    assert auto_levels(None)[1].enter_c == 70.0


def test_the_policy_reads_no_files(tmp_path: Path) -> None:
    """Trip points come from the sampler; a Governor given none never looks at the tree."""
    make_thermal_zone(tmp_path, 0, "cpu-thermal", 95000, trips=ORIN_TRIPS)
    gov = Governor(parse({"sysfs_root": str(tmp_path)}), clock=Clock())
    assert gov.trip_c is None and gov.levels[1].enter_c == 70.0  # the fallback, not 84 °C
    d = gov.step(readings(1000.0))  # no sensors in the readings: nothing read behind them
    assert d.level == "normal" and d.temperature_c is None
    assert gov.snapshot()["readings"]["temperatures"] == {}


# -- hysteresis and dwell, end to end through sysfs files --------------------------------------
def test_ramp_up_and_down_with_hysteresis_and_dwell(tmp_path: Path) -> None:
    make_thermal_zone(tmp_path, 0, "cpu-thermal", 50000)
    make_thermal_zone(tmp_path, 1, "PMIC-Die", 100000)  # would be "critical" if counted
    gov, clock, sensors = sampled(tmp_path)

    def at(t: float, celsius: float) -> Decision:
        clock.t = t
        set_zone_temp(tmp_path, 0, int(celsius * 1000))
        return gov.step(sensors.sample())

    d = at(0, 50)
    assert (d.level, d.changed) == ("normal", False)
    d = at(1, 70.0)
    assert (d.level, d.ladder_steps, d.changed) == ("warm", 1, True)
    assert d.reason == "cpu-thermal 70.0 °C ≥ 70.0 (enter warm)"
    d = at(2, 81.2)
    assert (d.level, d.max_batch_size, d.changed) == ("hot", 2, True)
    assert d.reason == "cpu-thermal 81.2 °C ≥ 80.0 (enter hot)"
    # Cooling into the hysteresis band keeps the level.
    d = at(10, 76)
    assert (d.level, d.changed) == ("hot", False)
    assert "hold hot" in d.reason
    # Below exit, but escalation was recent? No: 8 s on "hot" > dwell; leaves one step.
    d = at(11, 74)
    assert (d.level, d.changed) == ("warm", True)
    assert "exit hot after 5 s dwell" in d.reason
    # Still far below warm's exit, but dwell starts again on warm.
    d = at(12, 40)
    assert d.level == "warm" and "after dwell" in d.reason
    d = at(15.9, 40)
    assert d.level == "warm"
    d = at(16, 40)
    assert (d.level, d.changed) == ("normal", True)
    # Escalation ignores dwell: straight to critical.
    d = at(16.5, 95)
    assert (d.level, d.index, d.max_rate_hz, d.shed_priority_above) == ("critical", 3, 5.0, 0)


def test_headroom_is_ratio_to_first_threshold(tmp_path: Path) -> None:
    gov, _ = governor(tmp_path)
    d = gov.step(readings(0, {"cpu-thermal": 63.0}), now=0)
    assert d.headroom == pytest.approx(63.0 / 70.0)
    assert d.temperature_c == 63.0


def test_sensors_selection_by_glob(tmp_path: Path) -> None:
    gov, _ = governor(tmp_path, sensors=["gpu-*"])
    d = gov.step(readings(0, {"cpu-thermal": 99.0, "gpu-thermal": 60.0}), now=0)
    assert d.level == "normal" and d.temperature_c == 60.0
    gov, _ = governor(tmp_path, ignore_sensors=["cpu-*"])
    assert gov.step(readings(0, {"cpu-thermal": 99.0, "gpu-thermal": 71.0}), now=0).level == "warm"


def test_default_counts_thermal_zones_not_hwmon(tmp_path: Path) -> None:
    gov, _ = governor(tmp_path)
    r = readings(0, {"cpu-thermal": 50.0, "nvme/Composite": 85.0})
    r.kinds["nvme/Composite"] = "hwmon"
    assert gov.step(r, now=0).level == "normal"


# -- forecast ----------------------------------------------------------------------------------
def test_forecast_acts_before_threshold(tmp_path: Path) -> None:
    gov, _ = governor(tmp_path, forecast_s=10.0, forecast_window_s=6.0,
                      forecast_model="linear")
    # +1 °C/s from 55 °C: the 70 °C threshold is 15 s away; the forecast sees it at 60 °C.
    levels = []
    for t in range(0, 8):
        d = gov.step(readings(t, {"cpu-thermal": 55.0 + t}), now=t)
        levels.append((t, d.level, d.reason))
    entered = next(x for x in levels if x[1] == "warm")
    assert entered[0] <= 5  # actual temperature 60 °C, well below 70
    assert "forecast" in entered[2] and "rising 1.00 °C/s" in entered[2]


def test_forecast_off_waits_for_threshold(tmp_path: Path) -> None:
    gov, _ = governor(tmp_path)
    for t in range(0, 14):
        assert gov.step(readings(t, {"cpu-thermal": 55.0 + t}), now=t).level == "normal"
    assert gov.step(readings(15, {"cpu-thermal": 70.0}), now=15).level == "warm"


def test_flat_temperature_has_no_forecast(tmp_path: Path) -> None:
    gov, _ = governor(tmp_path, forecast_s=60.0)
    for t in range(20):
        assert gov.step(readings(t, {"cpu-thermal": 68.0}), now=t).level == "normal"


# -- power -------------------------------------------------------------------------------------
POWER_LEVELS = [
    {"name": "eco", "enter_w": 8.0, "exit_w": 6.0, "ladder_steps": 1},
    {"name": "hot", "enter_c": 80.0, "ladder_steps": 2},
]


def test_power_level_uses_window_average(tmp_path: Path) -> None:
    gov, _ = governor(tmp_path, levels=POWER_LEVELS, power_window_s=4.0, dwell_s=0.0)
    # A one-sample spike to 20 W in a 4 s window of 2 W samples averages 6.5 W: no change.
    seq = [2, 2, 2, 20, 2, 2]
    assert all(gov.step(readings(t, total_w=w), now=t).level == "normal" for t, w in enumerate(seq))
    # Sustained 10 W: the average crosses 8 W.
    levels = [gov.step(readings(6 + t, total_w=10), now=6 + t).level for t in range(5)]
    assert levels[-1] == "eco" and levels[0] == "normal"
    d = gov.decision
    assert (
        d.power_w is not None and d.power_w >= 8.0 and "W (avg 4 s) ≥ 8.0 (enter eco)" in d.reason
    )


def test_power_budget_steps_up_per_window_and_relaxes(tmp_path: Path) -> None:
    gov, _ = governor(
        tmp_path,
        levels=LEVELS,
        power_budget_w=10.0,
        power_window_s=2.0,
        dwell_s=3.0,
    )
    seen = []
    for t in range(0, 7):
        seen.append(gov.step(readings(t, {"cpu-thermal": 40}, total_w=15.0), now=t).index)
    # Over budget (believed after half a window): one level more every window, to the top.
    assert seen[:3] == [0, 1, 1] and seen == sorted(seen) and seen[-1] == 3
    assert "budget 10.0 W" in gov.decision.reason
    # Under the exit (9 W): back down, at most one level per max(dwell, window).
    down = [
        gov.step(readings(t, {"cpu-thermal": 40}, total_w=5.0), now=t).index for t in range(7, 30)
    ]
    assert down[-1] == 0
    changes = [i for i in range(1, len(down)) if down[i] != down[i - 1]]
    assert all(b - a >= 3 for a, b in itertools.pairwise(changes))


def test_rail_power_through_sysfs(tmp_path: Path) -> None:
    make_ina3221_hwmon(tmp_path, [("VDD_IN", 5000, 2000), ("VDD_CPU_GPU_CV", 5000, 900)])
    gov, clock, sensors = sampled(tmp_path, levels=POWER_LEVELS, power_window_s=2.0)
    d = gov.step(sensors.sample())
    assert d.level == "normal" and d.power_w is None  # less than half a window seen yet
    clock.t += 1
    d = gov.step(sensors.sample())
    assert d.level == "eco" and d.power_w == pytest.approx(10.0)


# -- battery ---------------------------------------------------------------------------------
BATTERY_LEVELS = [
    {"name": "saver", "battery_below": 0.3, "ladder_steps": 1},
    {"name": "survive", "battery_below": 0.1, "ladder_steps": 3, "max_rate_hz": 1.0},
]


def test_battery_thresholds_and_plugged(tmp_path: Path) -> None:
    gov, _ = governor(tmp_path, levels=BATTERY_LEVELS, dwell_s=0.0)
    assert gov.step(readings(0, battery=0.5, plugged=False), now=0).level == "normal"
    d = gov.step(readings(1, battery=0.25, plugged=False), now=1)
    assert d.level == "saver" and d.reason == "battery 25% < 30% on battery (enter saver)"
    assert gov.step(readings(2, battery=0.08, plugged=False), now=2).level == "survive"
    # Plugged in: battery triggers do not apply.
    assert gov.step(readings(3, battery=0.08, plugged=True), now=3).level == "saver"
    assert gov.step(readings(4, battery=0.08, plugged=True), now=4).level == "normal"
    # Hysteresis: 0.32 < 0.30 + 0.05 keeps "saver" once entered.
    gov.step(readings(5, battery=0.29, plugged=False), now=5)
    assert gov.step(readings(6, battery=0.32, plugged=False), now=6).level == "saver"
    assert gov.step(readings(7, battery=0.36, plugged=False), now=7).level == "normal"


def test_battery_through_sysfs(tmp_path: Path) -> None:
    make_battery(tmp_path, 9, "Discharging")
    gov, _, sensors = sampled(tmp_path, levels=BATTERY_LEVELS)
    assert gov.step(sensors.sample()).level == "survive"


# -- stale sensors ---------------------------------------------------------------------------
def test_stale_sensor_is_hot_by_default(tmp_path: Path) -> None:
    z = make_thermal_zone(tmp_path, 0, "cpu-thermal", 50000)
    make_thermal_zone(tmp_path, 1, "gpu-thermal", 50000)
    gov, clock, sensors = sampled(tmp_path)
    assert gov.step(sensors.sample()).level == "normal"
    (z / "temp").write_text("garbage\n")
    clock.t += 1
    d = gov.step(sensors.sample())
    assert (d.level, d.reason) == ("critical", "sensor cpu-thermal stale (stale_policy=hot)")


def test_power_gated_zone_is_not_stale(tmp_path: Path) -> None:
    """Orin cv*-thermal read EAGAIN when the DLA is gated; here: never readable = not stale."""
    make_thermal_zone(tmp_path, 0, "cpu-thermal", 50000)
    make_thermal_zone(tmp_path, 1, "cv0-thermal", "\n")
    gov, _, sensors = sampled(tmp_path)
    r = sensors.sample()
    assert "cv0-thermal" in r.unavailable
    assert gov.step(r).level == "normal"


def test_stale_hold_and_ignore(tmp_path: Path) -> None:
    gov, _ = governor(tmp_path, stale_policy="hold")
    gov.step(readings(0, {"cpu-thermal": 72.0, "gpu-thermal": 40.0}), now=0)
    d = gov.step(readings(1, {"gpu-thermal": 40.0}, stale={"cpu-thermal"}), now=100)
    assert d.level == "warm" and d.temperature_c == 72.0  # last good value held
    gov, _ = governor(tmp_path, stale_policy="ignore")
    gov.step(readings(0, {"cpu-thermal": 60.0, "gpu-thermal": 40.0}), now=0)
    d = gov.step(readings(1, {"gpu-thermal": 40.0}, stale={"cpu-thermal"}), now=1)
    assert d.level == "normal" and d.temperature_c == 40.0


# -- pin ---------------------------------------------------------------------------------------
def test_pin_and_unpin(tmp_path: Path) -> None:
    gov, _ = governor(tmp_path)
    gov.pin("hot")
    d = gov.step(readings(0, {"cpu-thermal": 40.0}), now=0)
    assert (d.level, d.pinned, d.changed) == ("hot", True, True)
    assert d.reason.startswith("pinned by operator")
    snap = gov.snapshot()
    assert (snap["pinned"], snap["automatic_level"]) == ("hot", "normal")
    gov.pin(snap["pinned"])  # round-trips, e.g. across a reload
    gov.pin(None)
    d = gov.step(readings(1, {"cpu-thermal": 40.0}), now=1)
    assert (d.level, d.pinned, d.changed) == ("normal", False, True)
    with pytest.raises(ValueError, match="levels: normal, warm, hot, critical"):
        gov.pin("melting")


def test_snapshot_is_json_and_counts_time(tmp_path: Path) -> None:
    make_thermal_zone(tmp_path, 0, "cpu-thermal", 50000)
    gov, clock, sensors = sampled(tmp_path)
    gov.step(sensors.sample())
    clock.t += 3
    set_zone_temp(tmp_path, 0, 71000)
    gov.step(sensors.sample())
    clock.t += 2
    gov.step(sensors.sample())
    snap = json.loads(json.dumps(gov.snapshot()))
    assert snap["level"] == "warm" and snap["pinned"] is None
    assert snap["seconds_per_level"] == {"normal": 3.0, "warm": 2.0, "hot": 0.0, "critical": 0.0}
    assert snap["readings"]["temperatures"] == {"cpu-thermal": 71.0}
    assert snap["headroom"] == pytest.approx(71 / 70)


# -- metrics -------------------------------------------------------------------------------------
def test_metrics_names_and_values(tmp_path: Path) -> None:
    make_thermal_zone(tmp_path, 0, "cpu-thermal", 81200)
    make_ina3221_hwmon(tmp_path, [("VDD_IN", 5000, 1000)])
    make_battery(tmp_path, 80, "Charging")
    make_get_throttled(tmp_path, 0x50005)
    gov, clock, sensors = sampled(tmp_path)
    reg = CollectorRegistry()
    m = GovernorMetrics(reg, gov.level_names)
    r = sensors.sample()
    d = gov.step(r)
    m.update(r, d, 1.5)
    get = reg.get_sample_value
    assert get("edged_sensor_temperature_celsius", {"sensor": "cpu-thermal"}) == 81.2
    assert get("edged_sensor_power_watts", {"rail": "VDD_IN"}) == 5.0
    assert get("edged_sensor_power_watts", {"rail": "total"}) == 5.0
    assert get("edged_sensor_battery_ratio") == 0.8
    assert get("edged_sensor_stale", {"sensor": "cpu-thermal"}) == 0
    assert get("edged_governor_level") == 2
    assert get("edged_governor_level_info", {"level": "hot"}) == 1
    assert get("edged_governor_level_info", {"level": "normal"}) == 0
    assert get("edged_governor_level_seconds_total", {"level": "hot"}) == 1.5
    assert get("edged_thermal_headroom_ratio") == pytest.approx(81.2 / 70)
    assert math.isnan(get("edged_power_watts"))  # not believed before half a window
    assert get("edged_sensor_throttled", {"flag": "under_voltage"}) == 1
    assert get("edged_sensor_throttled", {"flag": "freq_capped"}) == 0
    # A sensor that stops reading: its gauge goes away instead of freezing.
    (tmp_path / "sys/class/thermal/thermal_zone0/temp").write_text("bad\n")
    clock.t += 6
    r = sensors.sample()
    m.update(r, gov.step(r), 1.0)
    assert get("edged_power_watts") == 5.0
    assert get("edged_sensor_temperature_celsius", {"sensor": "cpu-thermal"}) is None
    assert get("edged_sensor_stale", {"sensor": "cpu-thermal"}) == 1
    assert b"edged_governor_level_seconds_total" in generate_latest(reg)


# -- properties ----------------------------------------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0.05, 4.0),  # time step
            st.one_of(st.none(), st.floats(20.0, 110.0)),  # temperature (None = no reading)
            st.booleans(),  # stale?
        ),
        min_size=1,
        max_size=60,
    ),
    st.sampled_from(["hot", "hold", "ignore"]),
    st.floats(0.0, 5.0),
)
def test_policy_never_oscillates_faster_than_dwell(
    steps: list[tuple[float, float | None, bool]], stale_policy: str, forecast_s: float
) -> None:
    cfg = parse(
        {
            "sysfs_root": "/nonexistent",
            "dwell_s": 3.0,
            "stale_policy": stale_policy,
            "forecast_s": forecast_s,
            "levels": LEVELS,
        }
    )
    gov = Governor(cfg, clock=Clock())
    now, last_change = 0.0, 0.0
    prev = 0
    for dt, temp, is_stale in steps:
        now += dt
        temps = {"cpu-thermal": temp} if temp is not None and not is_stale else {}
        d = gov.step(readings(now, temps, stale={"cpu-thermal"} if is_stale else set()), now=now)
        assert 0 <= d.index < len(gov.levels) and d.level == gov.levels[d.index].name
        assert d.changed == (d.index != prev)
        if d.index < prev:
            # Relaxing happens only after the dwell on the level being left, one step at a time.
            assert now - last_change >= 3.0 - 1e-9
            assert d.index == prev - 1
        if d.index != prev:
            last_change = now
        prev = d.index


# -- replay command ------------------------------------------------------------------------------
def test_replay_command_reads_a_recorded_tree(tmp_path: Path, capsys) -> None:
    from edged.governor.__main__ import main

    make_thermal_zone(tmp_path, 0, "cpu-thermal", 88000, trips=ORIN_TRIPS)
    cfg = tmp_path / "edged.toml"
    cfg.write_text('[governor]\nsysfs_root = "."\ndwell_s = 1\n')
    assert main(["--config", str(cfg), "--count", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["trip_c"] == 99.0
    assert out["decision"]["level"] == "warm"  # 88 °C ≥ 99 − 15
    assert out["readings"]["temperatures"] == {"cpu-thermal": 88.0}


def test_replay_command_names_a_bad_key_as_the_daemon_does(tmp_path: Path, capsys) -> None:
    """``python -m edged.governor`` reads ``[governor]`` through the config package: the
    same problem text as ``load_config`` (file, ``governor.<key>``), all at once, exit 2."""
    from edged.config.file import load_config
    from edged.governor.__main__ import main

    cfg = tmp_path / "edged.toml"
    cfg.write_text('[governor]\ndwell_s = -1\nstale_polcy = "hot"\n')
    assert main(["--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert f"{cfg}: governor.dwell_s: must be >= 0; got -1.0" in err
    assert f"{cfg}: governor.stale_polcy: unknown key (did you mean 'stale_policy'?)" in err
    with pytest.raises(ConfigError) as daemon:
        load_config(cfg)
    assert all(line in daemon.value.problems for line in err.strip().splitlines())
    cfg.write_text('governor = 3\n')
    assert main(["--config", str(cfg)]) == 2
    assert f"{cfg}: governor: expected a table, got 3" in capsys.readouterr().err
    cfg.write_text('[governor\n')
    assert main(["--config", str(cfg)]) == 2
    assert f"{cfg}:1:10: invalid TOML" in capsys.readouterr().err
    assert main(["--config", str(tmp_path / "absent.toml")]) == 2
    assert "cannot read config file" in capsys.readouterr().err
