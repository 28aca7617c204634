"""Battery charge, whether the device is plugged in, and the power a battery supplies.

Under a recorded root: ``/sys/class/power_supply/BAT*/{capacity,status}`` and the
adapter's ``online``; at the real root psutil, which follows more driver quirks.
While a battery discharges it powers the whole device, so its ``power_now`` (µW; else
``voltage_now`` µV × ``current_now`` µA) is the board's power (a rail named after the
supply), under any root: what the energy budget counts on a device without rails.
"""

from __future__ import annotations

import glob
import os

from edged.governor.sensors.base import BATTERY, RAIL, Partial, Source
from edged.governor.sensors.sysfs_support import read_int, read_text

_PLUGGED_STATUS = {"Charging": True, "Full": True, "Not charging": True, "Discharging": False}


def read_battery_sysfs(root: str, out: Partial) -> None:
    supplies = os.path.join(root, "sys/class/power_supply")
    bats = sorted(glob.glob(os.path.join(supplies, "BAT*")))
    if not bats:
        return
    try:
        capacity = read_int(os.path.join(bats[0], "capacity"))
        if not 0 <= capacity <= 100:
            raise ValueError(f"capacity {capacity} outside 0..100")
    except Exception as exc:
        out.fail("battery", BATTERY, exc)
        return
    out.battery_ratio = capacity / 100.0
    out.kinds["battery"] = BATTERY
    try:
        out.battery_plugged = _PLUGGED_STATUS.get(read_text(os.path.join(bats[0], "status")))
    except Exception:
        out.battery_plugged = None
    if out.battery_plugged is None:
        for online in glob.glob(os.path.join(supplies, "A*", "online")):
            try:
                out.battery_plugged = read_int(online) == 1
                break
            except Exception:
                continue


def read_supply_power(root: str, out: Partial) -> None:
    """Each discharging battery's power as a rail; their sum the board's, unless a source
    measured the board at its input already (INA3221's ``VDD_IN``)."""
    total: float | None = None
    for d in sorted(glob.glob(os.path.join(root, "sys/class/power_supply/BAT*"))):
        name = os.path.basename(d)
        try:
            if read_text(os.path.join(d, "status")) != "Discharging":
                if any(os.path.exists(os.path.join(d, f)) for f in ("power_now", "current_now")):
                    out.kinds[name] = RAIL  # charging: unavailable, not stale
                    out.failures[name] = ("gated", "not discharging")
                continue
            if os.path.exists(os.path.join(d, "power_now")):
                watts = abs(read_int(os.path.join(d, "power_now"))) / 1e6
            else:
                watts = abs(read_int(os.path.join(d, "voltage_now"))
                            * read_int(os.path.join(d, "current_now"))) / 1e12
        except FileNotFoundError:
            continue  # a battery that does not report its power
        except Exception as exc:
            out.fail(name, RAIL, exc)
            continue
        out.power[name] = watts
        out.kinds[name] = RAIL
        total = watts + (total or 0.0)
    if total is not None and out.board_w is None:
        out.board_w = total


def read_battery_psutil(out: Partial) -> None:
    import psutil

    try:
        bat = psutil.sensors_battery()
    except Exception as exc:
        out.fail("battery", BATTERY, exc)
        return
    if bat is None:
        return
    out.battery_ratio = max(0.0, min(1.0, float(bat.percent) / 100.0))
    out.battery_plugged = bat.power_plugged
    out.kinds["battery"] = BATTERY


class Battery(Source):
    label = "battery"

    def read(self, out: Partial, now: float) -> None:
        if self.root == "/":
            read_battery_psutil(out)
        else:
            read_battery_sysfs(self.root, out)
        read_supply_power(self.root, out)


def open_source(root: str) -> Source:
    return Battery(root)
