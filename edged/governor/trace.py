"""Recorded traces: a time series of :class:`Readings` for ``edged governor replay``.

Why: operators tune thresholds on recordings, not by cooking a device. Two formats are
read, chosen by content:

* **CSV** (``docs/governor.md``): a header ``t_s,<zone>_c,...,<rail>_w,...`` with an
  optional ``throttled`` (0/1) column; ``total_w`` is taken as the total power when
  present, else ``VDD_IN``/``POM_5V_IN``, else the sum of the rails. Empty cells mean
  "not read" (never 0). ``#`` lines are comments.
* **tegrastats** logs as Jetson users have them (``tegrastats --logfile``), with or
  without the ``MM-DD-YYYY HH:MM:SS`` prefix (without it, samples are ``interval_s``
  apart). Temperatures ``name@41.5C`` (``PMIC`` and the -256 °C "off" value are
  skipped), rails ``NAME 5542mW/5542mW`` (JetPack 5/6) or ``NAME 3566/3566`` (JetPack 4,
  mW). Names are lower-cased (``CPU@`` → ``cpu``).

Every bad row raises :class:`TraceError` naming the file and line number. Why each row
becomes a ``Partial`` first: the total power of a replayed sample is then decided where a
live one's is (``sensors/sampler.py: total_power``), from the board reading the row gives
(``total_w``, else the rails by the INA3221 source's own rule, ``ina_total``), so a replay
and the daemon cannot disagree on what "total" means.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from edged.governor.sensors import RAIL, THERMAL, THROTTLE, Partial, Readings, ina_total
from edged.governor.sensors.sampler import total_power

THROTTLED = "throttled"
TEGRA_TIME = re.compile(r"^(\d\d-\d\d-\d{4} \d\d:\d\d:\d\d)\s+")
TEGRA_TEMP = re.compile(r"\b([A-Za-z][\w-]*)@(-?\d+(?:\.\d+)?)C\b")
TEGRA_RAIL = re.compile(r"\b([A-Z][A-Z0-9_]+) (\d+)(?:mW)?/(\d+)(?:mW)?(?=\s|$)")
SKIP_TEGRA_ZONES = ("pmic",)
TEGRA_OFF_C = -256.0


class TraceError(ValueError):
    """A trace that cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class Trace:
    """Samples in time order, and where they came from."""

    path: str
    format: str  # "csv" or "tegrastats"
    samples: tuple[Readings, ...]
    #: the device's own throttling per sample, when the trace records it; else None.
    throttled: tuple[bool, ...] | None

    @property
    def duration_s(self) -> float:
        return self.samples[-1].timestamp - self.samples[0].timestamp if self.samples else 0.0


def load_trace(path: str | Path, interval_s: float = 1.0) -> Trace:
    """Read a CSV or tegrastats trace (detected from its first data line)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TraceError(f"{p}: cannot read: {e.strerror or e}; give a recorded trace (a CSV "
                         "or a tegrastats log, docs/governor.md)") from e
    lines = text.splitlines()
    first = next((ln for ln in lines if ln.strip() and not ln.startswith("#")), "")
    if "RAM " in first and ("@" in first or "CPU [" in first):
        trace = _tegrastats(p, lines, interval_s)
    else:
        trace = _csv(p, lines)
    if len(trace.samples) < 2:
        raise TraceError(f"{p}: needs at least 2 samples, found {len(trace.samples)}")
    return trace


def _readings(t: float, temps: dict[str, float], rails: dict[str, float],
              board_w: float | None, throttled: bool | None) -> Readings:
    """One row as the sources would have reported it (``board_w``: a ``total_w`` cell;
    None: the rails' own total by the INA3221 rule), its total decided by the sampler's."""
    part = Partial(temperatures=temps, power=rails,
                   kinds=dict.fromkeys(temps, THERMAL) | dict.fromkeys(rails, RAIL),
                   board_w=board_w if board_w is not None else ina_total(rails))
    if throttled is not None:
        part.throttled[THROTTLED] = throttled
        part.kinds[THROTTLED] = THROTTLE
    return Readings(timestamp=t, wall_time=t, temperatures=part.temperatures,
                    power=part.power, total_power_w=total_power(part),
                    throttled=part.throttled, kinds=part.kinds)


# -- CSV ----------------------------------------------------------------------------------------
def _csv(p: Path, lines: list[str]) -> Trace:
    rows = [(i, ln) for i, ln in enumerate(lines, 1) if ln.strip() and not ln.startswith("#")]
    if not rows:
        raise TraceError(f"{p}: empty trace")
    head_no, head_line = rows[0]
    header = [h.strip() for h in next(csv.reader([head_line]))]
    if not header or header[0] != "t_s":
        raise TraceError(f"{p}:{head_no}: the header must start with t_s (seconds); got "
                         f"{header[0] if header else 'nothing'!r}")
    for h in header[1:]:
        if not (h.endswith(("_c", "_w")) or h == THROTTLED):
            raise TraceError(f"{p}:{head_no}: column {h!r}: expected <zone>_c, <rail>_w, "
                             "total_w or throttled")
    if len(set(header)) != len(header):
        raise TraceError(f"{p}:{head_no}: duplicate column names")
    samples: list[Readings] = []
    marks: list[bool] = []
    prev_t: float | None = None
    for no, line in rows[1:]:
        cells = [c.strip() for c in next(csv.reader([line]))]
        if len(cells) != len(header):
            raise TraceError(f"{p}:{no}: {len(cells)} cells, the header has {len(header)}")
        t = _number(p, no, "t_s", cells[0])
        if t is None:
            raise TraceError(f"{p}:{no}: t_s is empty")
        if prev_t is not None and t <= prev_t:
            raise TraceError(f"{p}:{no}: t_s {t:g} does not increase (previous {prev_t:g})")
        prev_t = t
        temps: dict[str, float] = {}
        rails: dict[str, float] = {}
        total: float | None = None
        throttled: bool | None = None
        for name, cell in zip(header[1:], cells[1:], strict=True):
            value = _number(p, no, name, cell)
            if value is None:
                continue
            if name == THROTTLED:
                if value not in (0.0, 1.0):
                    raise TraceError(f"{p}:{no}: throttled must be 0 or 1; got {cell!r}")
                throttled = value == 1.0
            elif name == "total_w":
                total = value
            elif name.endswith("_w"):
                rails[name[:-2]] = value
            else:
                temps[name[:-2]] = value
        samples.append(_readings(t, temps, rails, total, throttled))
        marks.append(bool(throttled))
    has_marks = THROTTLED in header
    return Trace(str(p), "csv", tuple(samples), tuple(marks) if has_marks else None)


def _number(p: Path, no: int, column: str, cell: str) -> float | None:
    if cell == "":
        return None
    try:
        value = float(cell)
    except ValueError:
        raise TraceError(f"{p}:{no}: {column}: not a number: {cell!r}") from None
    if not math.isfinite(value):
        raise TraceError(f"{p}:{no}: {column}: not finite: {cell!r}")
    return value


# -- tegrastats ---------------------------------------------------------------------------------
def _tegrastats(p: Path, lines: list[str], interval_s: float) -> Trace:
    samples: list[Readings] = []
    start: datetime | None = None
    prev_t: float | None = None
    for no, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "RAM " not in line:
            raise TraceError(f"{p}:{no}: not a tegrastats line (no 'RAM '): {line[:60]!r}")
        m = TEGRA_TIME.match(line)
        if m:
            try:
                stamp = datetime.strptime(m.group(1), "%m-%d-%Y %H:%M:%S")
            except ValueError:
                raise TraceError(f"{p}:{no}: bad timestamp {m.group(1)!r}") from None
            start = start or stamp
            t = (stamp - start).total_seconds()
            if prev_t is not None and t < prev_t:
                raise TraceError(f"{p}:{no}: timestamp goes backwards ({m.group(1)})")
            if prev_t is not None and t == prev_t:
                continue  # tegrastats --interval < 1 s: keep one sample per second stamp
        else:
            t = 0.0 if prev_t is None else prev_t + interval_s
        temps = {
            name.lower(): float(v)
            for name, v in TEGRA_TEMP.findall(line)
            if name.lower() not in SKIP_TEGRA_ZONES and float(v) > TEGRA_OFF_C
        }
        rails = {name: float(now) / 1000.0 for name, now, _avg in TEGRA_RAIL.findall(line)}
        if not temps:
            raise TraceError(f"{p}:{no}: tegrastats line without temperatures (name@NN.NC)")
        samples.append(_readings(t, temps, rails, None, None))
        prev_t = t
    return Trace(str(p), "tegrastats", tuple(samples), None)
