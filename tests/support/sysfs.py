"""Build sysfs trees in the kernel's own formats under a temp root, for sensor tests.

Each helper writes real files the way the kernel prints them ("45000\\n" for 45 °C,
names and types followed by a newline), at the real paths, so the code under test
reads them exactly as it reads /sys. Board layouts (zone types, rail names and
channels, driver paths, the Orin trip points, PMIC-Die's constant 100 °C) are the real
boards' (docs/governor.md, "Per-board notes"); the readings themselves are illustrative, not
measured on a board. Reusable by any test:
``from support.sysfs import make_thermal_zone``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

# (type, m°C, [(trip m°C, trip type, hyst m°C), ...])
Trip = tuple[int, str, int]

#: Jetson Orin Nano rails on 1-0040 (channel 1..3): (label, mV, mA).
ORIN_NANO_RAILS: list[tuple[str, int, int]] = [
    ("VDD_IN", 5072, 1304),
    ("VDD_CPU_GPU_CV", 5064, 344),
    ("VDD_SOC", 5064, 432),
]
#: Jetson Nano (JetPack 4, ina3221x at 6-0040): (rail name, mW).
NANO_RAILS: list[tuple[str, int]] = [("POM_5V_IN", 3552), ("POM_5V_GPU", 79), ("POM_5V_CPU", 868)]
#: Jetson Nano zone types (PMIC-Die always reads 100 °C and must be skipped).
NANO_ZONES: list[tuple[str, int]] = [
    ("AO-therm", 40500),
    ("CPU-therm", 41000),
    ("GPU-therm", 39500),
    ("PLL-therm", 38500),
    ("PMIC-Die", 100000),
    ("thermal-fan-est", 40200),
]
#: Orin zone types; trips per zone: sw-throttle 99000 passive, sw-shutdown 104500 critical.
ORIN_TRIPS: list[Trip] = [(99000, "passive", 0), (104500, "critical", 0)]


def _write(path: Path, text: str) -> Path:
    """Replace the file atomically: a sysfs read never sees a half-written value, and a
    truncate-then-write here could show the governor an empty (stale) file mid-test."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


def write_value(path: str | os.PathLike[str], value: object) -> Path:
    """Overwrite one attribute as the kernel prints it: the value and a newline."""
    return _write(Path(path), f"{value}\n")


def make_thermal_zone(
    root: str | os.PathLike[str],
    index: int,
    type: str,
    millic: int | str | None,
    trips: Sequence[Trip] = (),
) -> Path:
    """``sys/class/thermal/thermal_zone{index}/{type,temp,trip_point_N_*}``.

    ``millic`` None writes no ``temp`` file; a str is written verbatim (garbage tests).
    """
    d = Path(root, "sys/class/thermal", f"thermal_zone{index}")
    write_value(d / "type", type)
    if millic is not None:
        write_value(d / "temp", millic)
    write_value(d / "mode", "enabled")
    for n, (temp, ttype, hyst) in enumerate(trips):
        write_value(d / f"trip_point_{n}_temp", temp)
        write_value(d / f"trip_point_{n}_type", ttype)
        write_value(d / f"trip_point_{n}_hyst", hyst)
    return d


def set_zone_temp(root: str | os.PathLike[str], index: int, millic: int | str) -> None:
    write_value(Path(root, "sys/class/thermal", f"thermal_zone{index}", "temp"), millic)


def make_hwmon(
    root: str | os.PathLike[str], index: int, name: str, temps: Iterable[tuple[str | None, int]]
) -> Path:
    """``sys/class/hwmon/hwmon{index}/{name,temp{n}_input,temp{n}_label}`` (m°C)."""
    d = Path(root, "sys/class/hwmon", f"hwmon{index}")
    write_value(d / "name", name)
    for n, (label, millic) in enumerate(temps, start=1):
        write_value(d / f"temp{n}_input", millic)
        if label is not None:
            write_value(d / f"temp{n}_label", label)
    return d


def make_ina3221_hwmon(
    root: str | os.PathLike[str],
    rails: Sequence[tuple[str, int, int]],
    device: str = "1-0040",
    hwmon: int = 3,
) -> Path:
    """JetPack 5/6 ``ina3221`` hwmon: ``in{n}_label``, ``in{n}_input`` mV, ``curr{n}_input`` mA.

    Also writes the shunt-sum channel 7 (``in7_label`` "sum of shunt voltages"), which
    readers must skip. A rail labelled "NC" is a not-connected channel.
    """
    d = Path(root, "sys/bus/i2c/drivers/ina3221", device, "hwmon", f"hwmon{hwmon}")
    write_value(d / "name", "ina3221")
    for n, (label, mv, ma) in enumerate(rails, start=1):
        write_value(d / f"in{n}_label", label)
        write_value(d / f"in{n}_input", mv)
        write_value(d / f"curr{n}_input", ma)
        write_value(d / f"curr{n}_crit", 32760)
        write_value(d / f"shunt{n}_resistor", 5000)
    write_value(d / "in7_label", "sum of shunt voltages")
    write_value(d / "in7_input", 1000)
    write_value(d / "curr4_input", 2080)
    write_value(d / "update_interval", 1000)
    return d


def make_ina3221_iio(
    root: str | os.PathLike[str],
    rails: Sequence[tuple[str, int]],
    device: str = "6-0040",
) -> Path:
    """JetPack 4 ``ina3221x`` IIO: ``rail_name_N``, ``in_power{N}_input`` mW (N from 0)."""
    d = Path(root, "sys/bus/i2c/drivers/ina3221x", device, "iio:device0")
    write_value(d / "name", "ina3221x")
    for n, (label, mw) in enumerate(rails):
        write_value(d / f"rail_name_{n}", label)
        write_value(d / f"in_power{n}_input", mw)
        # Voltage/current as the driver names them (swapped in this driver; unused).
        write_value(d / f"in_voltage{n}_input", 5000)
        write_value(d / f"in_current{n}_input", mw * 1000 // 5000)
    return d


def make_rapl(
    root: str | os.PathLike[str],
    energy_uj: int,
    max_range: int = 262143328850,
    package: int = 0,
    name: str | None = None,
) -> Path:
    """``sys/class/powercap/intel-rapl:{package}/{name,energy_uj,max_energy_range_uj}``
    plus a ``core`` subzone ``intel-rapl:{package}:0`` that must not be counted."""
    d = Path(root, "sys/class/powercap", f"intel-rapl:{package}")
    write_value(d / "name", name or f"package-{package}")
    write_value(d / "energy_uj", energy_uj)
    write_value(d / "max_energy_range_uj", max_range)
    write_value(d / "enabled", 1)
    sub = Path(root, "sys/class/powercap", f"intel-rapl:{package}:0")
    write_value(sub / "name", "core")
    write_value(sub / "energy_uj", energy_uj // 2)
    write_value(sub / "max_energy_range_uj", max_range)
    return d


def set_rapl_energy(root: str | os.PathLike[str], energy_uj: int, package: int = 0) -> None:
    write_value(Path(root, "sys/class/powercap", f"intel-rapl:{package}", "energy_uj"), energy_uj)


def make_get_throttled(root: str | os.PathLike[str], value: int | str) -> Path:
    """Raspberry Pi firmware ``get_throttled``: hex without 0x, as the driver prints it."""
    text = value if isinstance(value, str) else f"{value:x}"
    return write_value(Path(root, "sys/devices/platform/soc/soc:firmware/get_throttled"), text)


def make_battery(
    root: str | os.PathLike[str], capacity: int, status: str, name: str = "BAT0"
) -> Path:
    """``sys/class/power_supply/BAT0/{type,capacity,status}`` (capacity in %)."""
    d = Path(root, "sys/class/power_supply", name)
    write_value(d / "type", "Battery")
    write_value(d / "capacity", capacity)
    write_value(d / "status", status)
    write_value(d / "present", 1)
    return d


def make_unreadable_by_directory(path: str | os.PathLike[str]) -> None:
    """Replace an attribute file with a directory: open works, read fails (EISDIR)."""
    p = Path(path)
    if p.exists():
        p.unlink()
    p.mkdir(parents=True)
