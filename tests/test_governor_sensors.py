"""Sensors read real files in kernel formats under a temp sysfs root (nothing mocked)."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from support.sysfs import (
    NANO_RAILS,
    NANO_ZONES,
    ORIN_NANO_RAILS,
    ORIN_TRIPS,
    make_battery,
    make_get_throttled,
    make_hwmon,
    make_ina3221_hwmon,
    make_ina3221_iio,
    make_rapl,
    make_thermal_zone,
    make_unreadable_by_directory,
    set_rapl_energy,
    set_zone_temp,
)

from edged.governor.sensors import (
    first_passive_trip_c,
    parse_throttled,
    rapl_permission_message,
    read_trip_points,
)
from edged.governor.sensors.sampler import Sensors


class Clock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def sensors(root: Path, clock: Clock | None = None) -> Sensors:
    return Sensors(str(root), clock=clock or Clock())


# -- thermal zones ---------------------------------------------------------------------------
def test_zones_named_by_type_and_pmic_skipped(tmp_path: Path) -> None:
    for i, (ztype, millic) in enumerate(NANO_ZONES):
        make_thermal_zone(tmp_path, i, ztype, millic)
    r = sensors(tmp_path).sample()
    assert r.temperatures["CPU-therm"] == pytest.approx(41.0)
    assert r.temperatures["GPU-therm"] == pytest.approx(39.5)
    assert "PMIC-Die" not in r.temperatures and "PMIC-Die" not in r.kinds
    assert r.kinds["CPU-therm"] == "thermal"
    assert not r.stale and not r.unavailable


def test_zone_numbering_does_not_matter(tmp_path: Path) -> None:
    make_thermal_zone(tmp_path, 7, "cpu-thermal", 50000)
    make_thermal_zone(tmp_path, 2, "gpu-thermal", 48000)
    make_thermal_zone(tmp_path, 10, "acpitz", 30000)
    make_thermal_zone(tmp_path, 11, "acpitz", 31000)
    r = sensors(tmp_path).sample()
    assert r.temperatures == {
        "gpu-thermal": 48.0,
        "cpu-thermal": 50.0,
        "acpitz": 30.0,
        "acpitz.1": 31.0,
    }


@pytest.mark.parametrize("how", ["directory", "garbage", "deleted", "empty", "implausible"])
def test_unreadable_zone_is_unavailable_never_zero(tmp_path: Path, how: str) -> None:
    make_thermal_zone(tmp_path, 0, "cpu-thermal", 60000)
    z = make_thermal_zone(tmp_path, 1, "cv0-thermal", 55000)
    if how == "directory":
        make_unreadable_by_directory(z / "temp")
    elif how == "garbage":
        (z / "temp").write_text("\x00\xff garbage\n")
    elif how == "deleted":
        (z / "temp").unlink()
    elif how == "empty":
        (z / "temp").write_text("")
    else:
        (z / "temp").write_text("-256000\n")  # jtop's "offline" sentinel
    r = sensors(tmp_path).sample()
    assert "cv0-thermal" not in r.temperatures
    assert "cv0-thermal" in r.unavailable
    # Never read fine, so not stale: a zone broken from boot is not a disappearance.
    assert "cv0-thermal" not in r.stale
    assert r.temperatures["cpu-thermal"] == 60.0


def test_zone_that_goes_bad_becomes_stale_and_recovers(tmp_path: Path, caplog) -> None:
    z = make_thermal_zone(tmp_path, 0, "cpu-thermal", 60000)
    s = sensors(tmp_path)
    assert s.sample().temperatures["cpu-thermal"] == 60.0
    (z / "temp").write_text("not a number\n")
    with caplog.at_level(logging.INFO, logger="edged.governor.sensors"):
        for _ in range(5):
            r = s.sample()
            assert "cpu-thermal" in r.stale and "cpu-thermal" not in r.temperatures
    assert sum("stale" in m for m in caplog.messages) == 1  # once per transition
    shutil.rmtree(z)  # the whole zone disappears: still stale
    assert "cpu-thermal" in s.sample().stale
    make_thermal_zone(tmp_path, 0, "cpu-thermal", 61000)
    r = s.sample()
    assert r.temperatures["cpu-thermal"] == 61.0 and not r.stale


def test_type_unreadable_zone_is_ignored(tmp_path: Path) -> None:
    z = make_thermal_zone(tmp_path, 0, "cpu-thermal", 60000)
    make_unreadable_by_directory(z / "type")
    make_thermal_zone(tmp_path, 1, "gpu-thermal", 50000)
    assert sensors(tmp_path).sample().temperatures == {"gpu-thermal": 50.0}


def test_trip_points_and_first_passive(tmp_path: Path) -> None:
    for i, name in enumerate(["cpu-thermal", "gpu-thermal", "tj-thermal"]):
        make_thermal_zone(tmp_path, i, name, 45000, trips=ORIN_TRIPS)
    make_thermal_zone(tmp_path, 3, "PMIC-Die", 100000, trips=[(50000, "passive", 0)])
    make_thermal_zone(tmp_path, 4, "odd", 40000, trips=[(0, "passive", 0), (90000, "active", 2000)])
    trips = read_trip_points(str(tmp_path))
    assert "PMIC-Die" not in trips
    cpu = trips["cpu-thermal"]
    assert [(t.temp_c, t.type, t.hyst_c) for t in cpu] == [
        (99.0, "passive", 0.0),
        (104.5, "critical", 0.0),
    ]
    assert first_passive_trip_c(trips) == ("cpu-thermal", 99.0)  # 0 °C placeholder ignored
    assert first_passive_trip_c(trips, lambda n: n == "odd") is None


# -- hwmon and battery ---------------------------------------------------------------------
def test_hwmon_temperatures_under_custom_root(tmp_path: Path) -> None:
    make_hwmon(tmp_path, 0, "coretemp", [("Package id 0", 52000), ("Core 0", 50000)])
    make_hwmon(tmp_path, 1, "nvme", [(None, 38850)])
    r = sensors(tmp_path).sample()
    assert r.temperatures["coretemp/Package id 0"] == 52.0
    assert r.temperatures["nvme/temp1"] == pytest.approx(38.85)
    assert r.kinds["coretemp/Core 0"] == "hwmon"


@pytest.mark.parametrize(
    ("status", "plugged"),
    [("Discharging", False), ("Charging", True), ("Full", True), ("Unknown", None)],
)
def test_battery(tmp_path: Path, status: str, plugged: bool | None) -> None:
    make_battery(tmp_path, 37, status)
    r = sensors(tmp_path).sample()
    assert r.battery_ratio == pytest.approx(0.37)
    assert r.battery_plugged is plugged


def test_no_battery_means_none(tmp_path: Path) -> None:
    r = sensors(tmp_path).sample()
    assert r.battery_ratio is None and r.battery_plugged is None


# -- power rails -----------------------------------------------------------------------------
def test_ina3221_hwmon_orin_nano(tmp_path: Path) -> None:
    make_ina3221_hwmon(tmp_path, ORIN_NANO_RAILS)
    r = sensors(tmp_path).sample()
    assert set(r.power) == {"VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"}  # no in7 sum channel
    assert r.power["VDD_IN"] == pytest.approx(5072 * 1304 / 1e6)
    assert r.total_power_w == pytest.approx(r.power["VDD_IN"])  # VDD_IN is the total


def test_ina3221_hwmon_agx_orin_sum_skips_nc_and_subrail(tmp_path: Path) -> None:
    make_ina3221_hwmon(
        tmp_path,
        [("VDD_GPU_SOC", 5000, 1000), ("VDD_CPU_CV", 5000, 400), ("VIN_SYS_5V0", 5000, 600)],
        device="1-0040",
        hwmon=1,
    )
    make_ina3221_hwmon(
        tmp_path,
        [("NC", 0, 0), ("VDDQ_VDD2_1V8AO", 5000, 100), ("NC", 0, 0)],
        device="1-0041",
        hwmon=2,
    )
    r = sensors(tmp_path).sample()
    assert "NC" not in r.power
    assert r.power["VDDQ_VDD2_1V8AO"] == pytest.approx(0.5)
    # No VDD_IN: sum of rails, without the one already inside VIN_SYS_5V0.
    assert r.total_power_w == pytest.approx(5.0 + 2.0 + 3.0)


def test_ina3221_iio_nano_jetpack4(tmp_path: Path) -> None:
    make_ina3221_iio(tmp_path, NANO_RAILS)
    r = sensors(tmp_path).sample()
    assert r.power == {"POM_5V_IN": 3.552, "POM_5V_GPU": 0.079, "POM_5V_CPU": 0.868}
    assert r.total_power_w == pytest.approx(3.552)


def test_ina3221_unreadable_rail_means_no_total(tmp_path: Path) -> None:
    d = make_ina3221_hwmon(tmp_path, [("VDD_CPU", 5000, 100), ("VDD_GPU", 5000, 200)])
    make_unreadable_by_directory(d / "curr2_input")
    r = sensors(tmp_path).sample()
    assert "VDD_GPU" in r.unavailable and "VDD_GPU" not in r.power
    assert r.total_power_w is None  # a partial sum would under-report


def test_rapl_watts_and_wraparound(tmp_path: Path) -> None:
    clock = Clock(10.0)
    make_rapl(tmp_path, energy_uj=1_000_000, max_range=10_000_000)
    s = sensors(tmp_path, clock)
    r = s.sample()
    assert "rapl/package-0" not in r.power and not r.unavailable  # first sample: no delta
    clock.t = 12.0
    set_rapl_energy(tmp_path, 9_000_000)  # 8 J over 2 s
    r = s.sample()
    assert r.power["rapl/package-0"] == pytest.approx(8.0 / 2.0)
    clock.t = 14.0
    set_rapl_energy(tmp_path, 3_000_000)  # wrapped: (3e6 + 10e6 - 9e6) uJ over 2 s
    r = s.sample()
    assert r.power["rapl/package-0"] == pytest.approx(2.0)
    assert r.total_power_w == pytest.approx(2.0)
    assert "rapl/core" not in r.power  # subzones are not packages


def test_rapl_psys_is_the_total(tmp_path: Path) -> None:
    clock = Clock(0.0)
    make_rapl(tmp_path, 0, package=0)
    make_rapl(tmp_path, 0, package=1, name="psys")
    s = sensors(tmp_path, clock)
    s.sample()
    clock.t = 1.0
    set_rapl_energy(tmp_path, 5_000_000, package=0)
    set_rapl_energy(tmp_path, 12_000_000, package=1)
    r = s.sample()
    assert r.power == {"rapl/package-0": 5.0, "rapl/psys": 12.0}
    assert r.total_power_w == 12.0


def test_rapl_permission_message_names_the_fix() -> None:
    msg = rapl_permission_message("/sys/class/powercap/intel-rapl:0/energy_uj")
    assert "root-only since the PLATYPUS fix" in msg
    assert "tmpfiles" in msg and "intel-rapl:0/energy_uj" in msg


def test_rapl_permission_denied_for_real(caplog) -> None:
    """energy_uj mode 0400 owned by root, read as an unprivileged user (seteuid)."""
    base = Path(tempfile.mkdtemp(prefix="edged-rapl-"))
    try:
        os.chmod(base, 0o755)
        make_rapl(base, 1_000_000)
        for dirpath, _dirs, _files in os.walk(base):
            os.chmod(dirpath, 0o755)
        energy = base / "sys/class/powercap/intel-rapl:0/energy_uj"
        os.chmod(energy, 0o400 if os.geteuid() == 0 else 0o000)
        s = Sensors(str(base), clock=Clock())
        with caplog.at_level(logging.WARNING, logger="edged.governor.sensors"):
            if os.geteuid() == 0:
                os.seteuid(65534)  # nobody; the real uid stays 0 so we can switch back
            try:
                r1 = s.sample()
                r2 = s.sample()
            finally:
                if os.getuid() == 0:
                    os.seteuid(0)
        for r in (r1, r2):
            assert "rapl/package-0" in r.unavailable
            assert "rapl/package-0" not in r.stale and "rapl/package-0" not in r.power
        platypus = [m for m in caplog.messages if "PLATYPUS" in m]
        assert len(platypus) == 1
    finally:
        shutil.rmtree(base)


# -- Raspberry Pi ------------------------------------------------------------------------------
def test_parse_throttled_0x50005() -> None:
    f = parse_throttled("0x50005")
    assert f["under_voltage"] and f["throttled"]
    assert not f["freq_capped"] and not f["soft_temp_limit"]
    assert f["under_voltage_since_boot"] and f["throttled_since_boot"]
    assert not f["freq_capped_since_boot"]
    assert parse_throttled("throttled=0x0") == dict.fromkeys(f, False)


def test_get_throttled_file(tmp_path: Path) -> None:
    make_thermal_zone(tmp_path, 0, "cpu-thermal", 62300)
    make_get_throttled(tmp_path, 0x50005)
    r = sensors(tmp_path).sample()
    assert r.throttled["under_voltage"] and r.throttled["throttled"]
    assert r.temperatures["cpu-thermal"] == pytest.approx(62.3)


def test_get_throttled_other_soc_path_and_garbage(tmp_path: Path) -> None:
    p = tmp_path / "sys/devices/platform/soc@107c000000/soc@107c000000:firmware/get_throttled"
    p.parent.mkdir(parents=True)
    p.write_text("80008\n")
    s = sensors(tmp_path)
    r = s.sample()
    assert r.throttled["soft_temp_limit"] and r.throttled["soft_temp_limit_since_boot"]
    p.write_text("zzz\n")
    r = s.sample()
    assert r.throttled == {} and "get_throttled" in r.stale


# -- robustness -------------------------------------------------------------------------------
def test_empty_root_and_nvml_absent(tmp_path: Path) -> None:
    r = Sensors(str(tmp_path), nvml=True, clock=Clock()).sample()
    assert r.temperatures == {} and r.power == {} and r.total_power_w is None
    d = r.to_dict()
    assert d["stale"] == [] and d["battery_ratio"] is None


def test_real_root_sample_never_raises() -> None:
    """At "/" psutil and (absent here) NVML are used; whatever this host has, no exception."""
    s = Sensors("/")
    r = s.sample()
    for v in r.temperatures.values():
        assert -50 <= v <= 200
    s.close()


def test_zone_temp_updates(tmp_path: Path) -> None:
    make_thermal_zone(tmp_path, 0, "cpu-thermal", 40000)
    s = sensors(tmp_path)
    assert s.sample().temperatures["cpu-thermal"] == 40.0
    set_zone_temp(tmp_path, 0, 85500)
    assert s.sample().temperatures["cpu-thermal"] == 85.5


# -- sources chosen by name -------------------------------------------------------------------
def test_sources_are_chosen_by_name(tmp_path: Path) -> None:
    make_thermal_zone(tmp_path, 0, "cpu-thermal", 40000)
    make_battery(tmp_path, 55, "Discharging")
    everything = sensors(tmp_path).sample()
    assert everything.temperatures == {"cpu-thermal": 40.0}
    assert everything.battery_ratio == pytest.approx(0.55)
    zones_only = Sensors(str(tmp_path), clock=Clock(), sources=["thermal_zone"]).sample()
    assert zones_only.temperatures == {"cpu-thermal": 40.0}
    assert zones_only.battery_ratio is None and "battery" not in zones_only.kinds
    assert [s.label for s in Sensors(str(tmp_path), sources=["rapl", "rpi"]).sources] == [
        "RAPL", "get_throttled"]


def test_unknown_source_name_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"unknown sensor source 'ina3221x'; known: thermal_zone,"):
        Sensors(str(tmp_path), sources=["thermal_zone", "ina3221x"])

