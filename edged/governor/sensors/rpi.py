"""Raspberry Pi throttle flags: the firmware's ``get_throttled`` bitmask in sysfs."""

from __future__ import annotations

import glob
import os

from edged.governor.sensors.base import THROTTLE, Partial, Source
from edged.governor.sensors.sysfs_support import read_text

#: Raspberry Pi ``get_throttled`` bits (raspberrypi.com docs, "get_throttled").
THROTTLE_BITS: dict[str, int] = {
    "under_voltage": 0,
    "freq_capped": 1,
    "throttled": 2,
    "soft_temp_limit": 3,
    "under_voltage_since_boot": 16,
    "freq_capped_since_boot": 17,
    "throttled_since_boot": 18,
    "soft_temp_limit_since_boot": 19,
}


def get_throttled_path(root: str) -> str | None:
    fixed = os.path.join(root, "sys/devices/platform/soc/soc:firmware/get_throttled")
    if os.path.exists(fixed):
        return fixed
    found = sorted(
        glob.glob(os.path.join(root, "sys/devices/platform/soc*/*firmware*/get_throttled"))
    )
    return found[0] if found else None


def parse_throttled(text: str) -> dict[str, bool]:
    """Hex bitmask as sysfs prints it ("50005", "0x50005" or vcgencmd's "throttled=0x50005")."""
    value = int(text.strip().rpartition("=")[2], 16)
    return {flag: bool(value >> bit & 1) for flag, bit in THROTTLE_BITS.items()}


class GetThrottled(Source):
    label = "get_throttled"

    def read(self, out: Partial, now: float) -> None:
        path = get_throttled_path(self.root)
        if path is None:
            return
        try:
            out.throttled.update(parse_throttled(read_text(path)))
            out.kinds["get_throttled"] = THROTTLE
        except Exception as exc:
            out.fail("get_throttled", THROTTLE, exc)


def open_source(root: str) -> Source:
    return GetThrottled(root)
