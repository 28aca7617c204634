"""The governor inside the real daemon: a sysfs tree in kernel formats drives levels,
variant swaps under load, batch caps and shedding."""

from __future__ import annotations

import math
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from support.configs import digits_config
from support.governor import LEVELS, Streamers, X, active, level, status
from support.sysfs import (
    make_battery,
    make_ina3221_hwmon,
    make_thermal_zone,
    set_zone_temp,
    write_value,
)
from support.waits import wait_governor_steps, wait_until


def governor_config(tmp: Path, root: Path, extra: str = "") -> Path:
    return digits_config(tmp, governor=f"""
[governor]
enabled = true
sysfs_root = "{root}"
interval_s = 0.1
dwell_s = 0.3
{extra}
{LEVELS}
""")


@pytest.fixture
def sysroot(tmp_path: Path) -> Path:
    root = tmp_path / "sysroot"
    make_thermal_zone(root, 0, "cpu-thermal", 45000,
                      trips=[(95000, "passive", 0), (105000, "critical", 0)])
    make_thermal_zone(root, 1, "PMIC-Die", 100000)  # bogus on Jetson: must be skipped
    make_battery(root, 80, "Discharging")
    return root


def test_temperature_ramp_swaps_variants_under_load_without_failures(
        make_daemon: Any, tmp_path: Path, sysroot: Path) -> None:
    d = make_daemon(governor_config(tmp_path, sysroot), metrics=True)
    assert level(d) == "normal" and active(d) == "cnn-fp32"
    load = Streamers(d)
    try:
        time.sleep(0.5)
        set_zone_temp(sysroot, 0, 72000)
        wait_until(lambda: active(d) == "cnn-int8", what="swap to cnn-int8 at 72 °C")
        assert level(d) == "warm"
        set_zone_temp(sysroot, 0, 68000)  # between exit (65) and enter (70): hysteresis holds
        # Five ticks (0.5 s) that read 68 °C: longer than dwell_s, so only the hysteresis holds.
        g = wait_governor_steps(lambda: status(d), 6)
        assert g["readings"]["temperatures"]["cpu-thermal"] == 68.0
        assert level(d) == "warm"
        set_zone_temp(sysroot, 0, 83000)
        wait_until(lambda: active(d) == "small-fp32", what="swap to small-fp32 at 83 °C")
        s = status(d)
        assert s["governor"]["level"] == "hot"
        assert "cpu-thermal" in s["governor"]["reason"]
        time.sleep(0.5)
        set_zone_temp(sysroot, 0, 50000)
        wait_until(lambda: active(d) == "cnn-fp32", what="back to cnn-fp32 after cooling")
        time.sleep(0.5)
    finally:
        replies = load.finish()
    assert len(replies) > 100
    bad = [r for r in replies if r[1] != "OK"]
    assert not bad, f"{len(bad)} non-OK replies during swaps: {bad[:5]}"
    assert all(r[3] for r in replies), "a reply was classified wrongly"
    seen = {r[2] for r in replies}
    assert seen == {"cnn-fp32", "cnn-int8", "small-fp32"}
    # Each client's requests are sequential, so its replies show the swaps in causal
    # order: down the ladder rung by rung, then back up one rung per dwell.
    for k in range(4):
        order = [r[2] for r in replies if r[4] == k]
        walk = [v for i, v in enumerate(order) if i == 0 or order[i - 1] != v]
        assert walk == ["cnn-fp32", "cnn-int8", "small-fp32", "cnn-int8", "cnn-fp32"], (k, walk)
    text = urllib.request.urlopen(f"http://127.0.0.1:{d.metrics_port}/metrics").read().decode()
    assert 'edged_sensor_temperature_celsius{sensor="cpu-thermal"}' in text
    assert "PMIC" not in text
    assert 'edged_variant_swaps_total{from_variant="cnn-fp32",model="digits",reason="governor",' \
           'to_variant="cnn-int8"} 1.0' in text
    assert ('edged_active_variant_info{backend="onnxruntime",model="digits",'
            'variant="cnn-fp32"} 1.0') in text
    assert "edged_governor_level 0.0" in text


def test_hot_level_sheds_low_priority_and_caps_batches(
        make_daemon: Any, tmp_path: Path, sysroot: Path) -> None:
    set_zone_temp(sysroot, 0, 85000)
    d = make_daemon(governor_config(tmp_path, sysroot))
    wait_until(lambda: level(d) == "hot", what="hot level")
    wait_until(lambda: active(d) == "small-fp32", what="swap to the lightest variant")
    with d.client() as c:
        shed = c.infer("digits", X[:1], priority=1, raise_on_error=False)
        assert shed.status == "RESOURCE_EXHAUSTED"
        assert "shed" in shed.header["error"] and "hot" in shed.header["error"]
        ok = c.infer("digits", X[:1], priority=0)
        assert ok.ok and ok.header["variant"] == "small-fp32"
        from edged.client import build_infer
        for i in range(16):
            c.send(*build_infer("digits", X[i:i + 1], priority=0, id=i))
        batches = [c.recv().header["timing"]["batch"] for _ in range(16)]
    assert max(batches) <= 2, batches


def test_stale_sensor_is_treated_as_hot_and_recovers(
        make_daemon: Any, tmp_path: Path, sysroot: Path) -> None:
    d = make_daemon(governor_config(tmp_path, sysroot))
    assert level(d) == "normal"
    zone = sysroot / "sys/class/thermal/thermal_zone0/temp"
    zone.write_text("garbage\n")
    wait_until(lambda: level(d) == "hot", what="stale sensor -> hot")
    assert "stale" in status(d)["governor"]["reason"]
    zone.unlink()
    g = wait_governor_steps(lambda: status(d), 3)  # ticks that found the zone gone
    assert "cpu-thermal" in g["readings"]["stale"]
    assert level(d) == "hot"
    assert d.proc.poll() is None
    zone.write_text("40000\n")
    wait_until(lambda: level(d) == "normal", what="recovery after the sensor returns")
    with d.client() as c:
        assert c.infer("digits", X[:1]).ok


def test_battery_threshold_and_operator_pin(make_daemon: Any, tmp_path: Path,
                                           sysroot: Path) -> None:
    d = make_daemon(governor_config(tmp_path, sysroot))
    make_battery(sysroot, 15, "Discharging")
    wait_until(lambda: level(d) == "low-battery", what="low battery level")
    wait_until(lambda: active(d) == "small-fp32", what="light variant on low battery")
    make_battery(sysroot, 60, "Charging")
    wait_until(lambda: level(d) == "normal", what="normal when charged")
    r = d.ctl({"op": "level", "level": "warm"})
    assert r["status"] == "OK" and r["governor"]["pinned"] == "warm"
    wait_until(lambda: active(d) == "cnn-int8", what="pinned warm -> cnn-int8")
    bad = d.ctl({"op": "level", "level": "lukewarm"})
    assert bad["status"] == "INVALID_ARGUMENT" and "warm" in bad["error"]
    assert d.ctl({"op": "level", "level": "auto"})["governor"]["pinned"] is None
    wait_until(lambda: active(d) == "cnn-fp32", what="auto again")


#: each variant's board power in BoardPlant: they settle at 64, 54 and 49 °C
VARIANT_W = {"cnn-fp32": 6.0, "cnn-int8": 3.5, "small-fp32": 2.25}


class BoardPlant:
    """The test is the board: a first-order plant (``τ·dT/dt = T_amb + R·P − T``) whose
    power is the daemon's active variant's, written every tick as the kernel would show
    it: ``thermal_zone0/temp`` (m°C) and an INA3221 ``VDD_IN`` rail (mV, mA)."""

    AMBIENT_C, RISE, TAU_S = 40.0, 4.0, 5.0

    def __init__(self, root: Path) -> None:
        self.root, self.temp, self.peak = root, 46.0, 46.0
        self.rail = make_ina3221_hwmon(root, [("VDD_IN", 5000, 200)])
        self.write(1.0)

    def write(self, power_w: float) -> None:
        set_zone_temp(self.root, 0, round(self.temp * 1000))
        write_value(self.rail / "curr1_input", round(power_w / 5.0 * 1000))

    def run(self, d: Any, seconds: float) -> list[tuple[float, str]]:
        """Step the plant in real time for ``seconds``; (temperature, variant) per step."""
        seen, last, end = [], time.monotonic(), time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(0.05)
            variant = active(d)
            now = time.monotonic()
            power = VARIANT_W[variant]
            eq = self.AMBIENT_C + self.RISE * power
            self.temp = eq + (self.temp - eq) * math.exp(-(now - last) / self.TAU_S)
            last, self.peak = now, max(self.peak, self.temp)
            self.write(power)
            seen.append((self.temp, variant))
        return seen


def test_mpc_closed_loop_steps_down_before_the_limit_and_comes_back(
        make_daemon: Any, tmp_path: Path, sysroot: Path) -> None:
    """policy = "mpc" in the real daemon on kernel-format files rewritten by a plant the
    test runs: it identifies the board, steps down before the limit (60 °C, which the
    heaviest variant's 64 °C would cross) and goes back up once there is headroom."""
    plant = BoardPlant(sysroot)
    d = make_daemon(governor_config(tmp_path, sysroot, extra="""policy = "mpc"
limit_c = 60.0
swap_min_interval_s = 1.0"""))
    load = Streamers(d)
    try:
        seen = plant.run(d, 20.0)
        prediction = status(d)["governor"]["prediction"]
    finally:
        replies = load.finish()
    walk = [v for i, (_, v) in enumerate(seen) if i == 0 or seen[i - 1][1] != v]
    assert walk[0] == "cnn-fp32" and len(walk) >= 3, walk
    assert "cnn-fp32" in walk[2:], f"never back to the heaviest variant: {walk}"
    assert plant.peak < 60.0, (plant.peak, walk)
    assert prediction["limit_c"] == 60.0 and "plan" in prediction["models"]["digits"]
    assert prediction["tau_s"] > 0 and prediction["rise_per_unit"] > 0
    assert all(r[1] == "OK" for r in replies) and len(replies) > 100
