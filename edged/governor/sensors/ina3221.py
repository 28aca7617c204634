"""Jetson power rails through the INA3221 monitors, both driver generations.

JetPack 5/6 use the mainline ``ina3221`` hwmon driver (P = in{n}_input mV ×
curr{n}_input mA); JetPack 4 the downstream ``ina3221x`` IIO driver
(``rail_name_N`` + ``in_power{N}_input`` in mW). The board total is the board rail
when there is one, else the sum of rails without double-counting nested ones.
"""

from __future__ import annotations

import glob
import os

from edged.governor.sensors.base import RAIL, Partial, Source
from edged.governor.sensors.sysfs_support import dedupe, read_int, read_text, trailing_int

#: Rails that represent the whole board; the first one present is the total.
TOTAL_RAILS = ("VDD_IN", "POM_5V_IN")
#: Rails already contained in another rail (AGX Orin: VDDQ_VDD2_1V8AO is inside
#: VIN_SYS_5V0), left out of the sum when the containing rail is present.
SUB_RAILS = {"VDDQ_VDD2_1V8AO": "VIN_SYS_5V0"}


def read_ina3221_hwmon(root: str, out: Partial, rails: dict[str, float]) -> None:
    pattern = os.path.join(root, "sys/bus/i2c/drivers/ina3221/*/hwmon/hwmon*")
    for d in sorted(glob.glob(pattern)):
        for lpath in sorted(glob.glob(os.path.join(d, "in*_label"))):
            n = trailing_int(lpath.removesuffix("_label"))
            if not 1 <= n <= 3:
                continue  # in7 is the shunt-voltage sum, in4-6 are shunt voltages
            try:
                label = read_text(lpath)
            except Exception:
                continue
            if not label or "NC" in label:
                continue  # not connected
            name = dedupe(label, rails)
            try:
                mv = read_int(os.path.join(d, f"in{n}_input"))
                ma = read_int(os.path.join(d, f"curr{n}_input"))
                rails[name] = mv * ma / 1e6
                out.kinds[name] = RAIL
            except Exception as exc:
                rails[name] = float("nan")
                out.fail(name, RAIL, exc)


def read_ina3221_iio(root: str, out: Partial, rails: dict[str, float]) -> None:
    """Power is read directly: this driver's voltage/current file names are swapped."""
    pattern = os.path.join(root, "sys/bus/i2c/drivers/ina3221x/*/iio:device*")
    for d in sorted(glob.glob(pattern)):
        for rpath in sorted(glob.glob(os.path.join(d, "rail_name_*")), key=trailing_int):
            n = trailing_int(rpath)
            try:
                label = read_text(rpath)
            except Exception:
                continue
            if not label or "NC" in label:
                continue
            name = dedupe(label, rails)
            try:
                rails[name] = read_int(os.path.join(d, f"in_power{n}_input")) / 1000.0
                out.kinds[name] = RAIL
            except Exception as exc:
                rails[name] = float("nan")
                out.fail(name, RAIL, exc)


def ina_total(rails: dict[str, float]) -> float | None:
    """The board rail if there is one, else the sum of rails (None if any is unread)."""
    for total in TOTAL_RAILS:
        if total in rails:
            v = rails[total]
            return None if v != v else v
    parts = [v for k, v in rails.items() if SUB_RAILS.get(k) not in rails]
    if not parts or any(v != v for v in parts):
        return None
    return sum(parts)


class Ina3221(Source):
    label = "INA3221"

    def read(self, out: Partial, now: float) -> None:
        rails: dict[str, float] = {}  # NaN: a rail that failed, which spoils a summed total
        read_ina3221_hwmon(self.root, out, rails)
        read_ina3221_iio(self.root, out, rails)
        out.power.update({k: v for k, v in rails.items() if v == v})
        if rails:
            out.board_w = ina_total(rails)


def open_source(root: str) -> Source:
    return Ina3221(root)
