#!/usr/bin/env python3
"""Convert a recorded public thermal log into the CSV that ``edged governor replay`` reads.

Only deterministic parsing happens here: no value is edited, smoothed, resampled or
invented. Raw ``tegrastats`` logs need no conversion (the replay reads them as they are).

Formats:

``sbc-bench``
    A result log of ThomasKaiser/sbc-bench (``results/*.txt``). Every row of every
    "System health while running <benchmark>:" table becomes one sample:
    ``HH:MM:SS: <clock>MHz <load> <%cpu> ... <temp>°C [<vcore>V]``. The time of day
    becomes ``t_s`` (seconds since the first row; a jump back of more than 12 h is
    taken as midnight), the ``Temp`` cell becomes ``<zone>_c``. The single row under
    "Testing clockspeeds again. System health now:" is not a table row of a run (it
    repeats the last sample) and is skipped, as is every other line. Rows that do not
    advance the clock are dropped (``t_s`` must increase). Between the tables the
    benchmark kept running but nothing was sampled, so the trace has gaps there.

``pi-csv``
    A Raspberry Pi temperature log written as CSV with (at least) the columns
    ``t_s``, ``temp_c`` (``/sys/class/thermal/thermal_zone0/temp`` in °C, i.e. the
    ``cpu-thermal`` zone) and ``throttled`` (the raw hex value of ``vcgencmd
    get_throttled``), as written by SAPSAN-CYBERSEC/uconsole-cm5-thermal-test's
    ``scripts/thermal-log.sh``. ``t_s`` and ``temp_c`` are copied unchanged to
    ``t_s,<zone>_c``; ``throttled`` becomes 1 when any of the "now" bits 0x2 (ARM
    frequency capped), 0x4 (currently throttled) or 0x8 (soft temperature limit
    active) is set, else 0. Under-voltage (0x1) and the "since boot" bits are not
    thermal throttling of this sample and are ignored. Other columns are dropped.

Usage::

    python scripts/models/convert_trace.py sbc-bench results-1MFf.txt -o out.csv \\
        --zone soc --comment "source: ..." --comment "licence: ..."
    curl -sL URL | python scripts/models/convert_trace.py sbc-bench - > out.csv
    python scripts/models/convert_trace.py pi-csv data/stress.csv -o out.csv --zone cpu-thermal
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from collections.abc import Iterable

SECTION = re.compile(r"^System health while running (?P<what>.+?):\s*$")
ROW = re.compile(
    r"^(?P<h>\d{1,2}):(?P<m>\d{2}):(?P<s>\d{2}):\s+"   # time of day
    r"(?P<clock>\S*?)\s*MHz\s+"                        # "1500/1500MHz", "    MHz", "n/a MHz"
    r"(?P<load>\d+(?:\.\d+)?)\s+"                      # load average
    r".*?(?P<temp>-?\d+(?:\.\d+)?)°C"                  # temperature
)
HEADER = re.compile(r"^Time\s")


def sbc_bench_rows(lines: Iterable[str]) -> list[tuple[int, float, str]]:
    """(seconds of day, temperature °C, benchmark) for every monitoring row, in file order."""
    rows: list[tuple[int, float, str]] = []
    section: str | None = None
    for raw in lines:
        line = raw.rstrip("\n")
        m = SECTION.match(line)
        if m:
            section = m.group("what")
            continue
        if section is None:
            continue
        if not line.strip() or HEADER.match(line):
            continue
        r = ROW.match(line)
        if r is None:          # any other line ends the table
            section = None
            continue
        sod = int(r.group("h")) * 3600 + int(r.group("m")) * 60 + int(r.group("s"))
        rows.append((sod, float(r.group("temp")), section))
    return rows


def sbc_bench_csv(lines: Iterable[str], zone: str, comments: list[str]) -> str:
    rows = sbc_bench_rows(lines)
    if not rows:
        raise SystemExit("convert_trace: no 'System health while running' rows found")
    out = [f"# {c}" for c in comments]
    out.append(f"# converted by scripts/models/convert_trace.py sbc-bench: {len(rows)} "
               "monitoring rows; gaps between benchmark tables are not sampled")
    out.append(f"t_s,{zone}_c")
    day = 0
    prev_sod: int | None = None
    last_t: int | None = None
    t0: int | None = None
    for sod, temp, _what in rows:
        if prev_sod is not None and sod < prev_sod - 12 * 3600:
            day += 1
        prev_sod = sod
        t_abs = day * 86400 + sod
        if t0 is None:
            t0 = t_abs
        t = t_abs - t0
        if last_t is not None and t <= last_t:
            continue
        last_t = t
        out.append(f"{t},{temp:g}")
    return "\n".join(out) + "\n"


THROTTLED_NOW_MASK = 0x2 | 0x4 | 0x8


def pi_csv(lines: Iterable[str], zone: str, comments: list[str]) -> str:
    reader = csv.DictReader(lines)
    missing = {"t_s", "temp_c", "throttled"} - set(reader.fieldnames or [])
    if missing:
        raise SystemExit(f"convert_trace: pi-csv: missing column(s) {sorted(missing)}")
    rows = list(reader)
    out = [f"# {c}" for c in comments]
    out.append(f"# converted by scripts/models/convert_trace.py pi-csv: {len(rows)} rows; "
               "throttled = get_throttled & 0xE (capped|throttled|soft limit, now) != 0")
    out.append(f"t_s,{zone}_c,throttled")
    for r in rows:
        t = r["t_s"].strip()
        temp = r["temp_c"].strip()
        thr = r["throttled"].strip()
        flag = "" if thr in ("", "NA") else str(int((int(thr, 16) & THROTTLED_NOW_MASK) != 0))
        out.append(f"{t},{temp},{flag}")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="format", required=True)
    sb = sub.add_parser("sbc-bench", help="ThomasKaiser/sbc-bench result log")
    sb.add_argument("input", help="result log ('-' = stdin)")
    sb.add_argument("-o", "--output", help="output CSV (default stdout)")
    sb.add_argument("--zone", default="soc", help="sensor name for the Temp column (default soc)")
    sb.add_argument("--comment", action="append", default=[],
                    help="a '# ' comment line for the CSV head (repeatable)")
    pc = sub.add_parser("pi-csv", help="Raspberry Pi CSV log (t_s,temp_c,throttled,...)")
    pc.add_argument("input", help="CSV log ('-' = stdin)")
    pc.add_argument("-o", "--output", help="output CSV (default stdout)")
    pc.add_argument("--zone", default="cpu-thermal",
                    help="sensor name for temp_c (default cpu-thermal)")
    pc.add_argument("--comment", action="append", default=[],
                    help="a '# ' comment line for the CSV head (repeatable)")
    args = ap.parse_args(argv)

    if args.input == "-":
        text = sys.stdin.read()
    else:
        with open(args.input, encoding="utf-8") as f:
            text = f.read()
    if args.format == "sbc-bench":
        csv_text = sbc_bench_csv(text.splitlines(), args.zone, args.comment)
    else:
        csv_text = pi_csv(text.splitlines(), args.zone, args.comment)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(csv_text)
    else:
        sys.stdout.write(csv_text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
