"""What every sensor source needs to read sysfs: raw attribute reads, error classes,
plausibility and naming rules.

Why one place: each source file imports only from here and ``base`` (never a sibling),
so a source can be read, tested or removed on its own.
"""

from __future__ import annotations

import errno
import os
import re
from typing import Any

#: errnos that mean "no data right now" (power-gated block, link down), not "broken".
GATED_ERRNOS = frozenset({errno.EAGAIN, errno.ENODATA})

#: Plausible silicon temperatures; outside this a reading is garbage (jtop's offline
#: sentinel is -256 °C, some drivers return -40 °C or 0xFFFF... when a block is off).
MIN_PLAUSIBLE_C = -50.0
MAX_PLAUSIBLE_C = 200.0


def read_text(path: str) -> str:
    """One small sysfs attribute, stripped.

    os.read rather than Path.read_text: on Python 3.10 a buffered read of a zone that
    returns EAGAIN raises TypeError instead of OSError; the raw syscall gives the errno.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    return data.decode("ascii").strip()


def read_int(path: str) -> int:
    return int(read_text(path))


def classify_error(exc: BaseException) -> str:
    """'gated' (EAGAIN/ENODATA), 'denied' (PermissionError) or 'error' (anything else)."""
    if isinstance(exc, PermissionError):
        return "denied"
    if isinstance(exc, OSError) and exc.errno in GATED_ERRNOS:
        return "gated"
    return "error"


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def trailing_int(path: str) -> int:
    """The number a sysfs entry ends with (``thermal_zone12`` -> 12), -1 without one."""
    m = re.search(r"(\d+)$", os.path.basename(path))
    return int(m.group(1)) if m else -1


def dedupe(name: str, taken: set[str] | dict[str, Any]) -> str:
    """Same sensor name twice (two ``acpitz`` zones, two ``nvme`` chips): suffix .1, .2."""
    if name not in taken:
        return name
    k = 1
    while f"{name}.{k}" in taken:
        k += 1
    return f"{name}.{k}"


def plausible_c(millic: int, path: str) -> float:
    """m°C as the kernel prints it -> °C; garbage (outside the plausible range) raises."""
    c = millic / 1000.0
    if not MIN_PLAUSIBLE_C <= c <= MAX_PLAUSIBLE_C:
        raise ValueError(f"{path}: implausible temperature {c} °C")
    return c
