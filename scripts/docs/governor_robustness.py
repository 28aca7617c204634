#!/usr/bin/env python3
"""Regenerate the robustness table in docs/governor.md (between its markers).

Every governor policy on every shipped trace (examples/traces/, at the trip point its
README gives) under every case of ``edged.governor.robustness.CASES``, against the
oracle. Also prints the planner's cost per tick (``mpc.plan``, time.perf_counter) and
which Done-when floors hold. A model, not a measurement: docs/governor.md says so.

    python scripts/docs/governor_robustness.py            # rewrite the table
    python scripts/docs/governor_robustness.py --check    # exit 1 if the doc differs
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from edged.governor import prediction  # noqa: E402
from edged.governor.robustness import CASES, Row, markdown, run_case  # noqa: E402

TRACES = ROOT / "examples" / "traces"
DOC = ROOT / "docs" / "governor.md"
BEGIN, END = "<!-- robustness:begin -->", "<!-- robustness:end -->"
#: the passive trip each trace's README gives (examples/traces/README.md)
TRIPS = {
    "sbc-bench-jetson-nano-1I4j.csv": 60.0,
    "sbc-bench-rpi4-1MFf.csv": 85.0,
    "synthetic-orin-nano-tegrastats.log": 99.0,
    "synthetic-pi4-heatup.csv": 85.0,
    "uconsole-cm5-stress.csv": 65.0,
}
DEFAULT_TRIP = 85.0


def shipped() -> list[Path]:
    return sorted(p for p in TRACES.iterdir() if p.suffix in (".csv", ".log"))


def rows() -> tuple[list[Row], list[float]]:
    """Every (trace, case) row, and the planner's cost of every tick it planned (s)."""
    costs: list[float] = []
    plan = prediction.plan

    def timed(*args, **kwargs):  # type: ignore[no-untyped-def]
        t = time.perf_counter()
        try:
            return plan(*args, **kwargs)
        finally:
            costs.append(time.perf_counter() - t)

    prediction.plan = timed  # type: ignore[assignment]
    try:
        out = [run_case(t, TRIPS.get(t.name, DEFAULT_TRIP), c) for t in shipped() for c in CASES]
    finally:
        prediction.plan = plan  # type: ignore[assignment]
    return out, costs


def replace_table(doc: str, table: str) -> str:
    a, b = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    return doc[:a] + "\n" + table + "\n" + doc[b:]


def floors(table_rows: list[Row], policy: str) -> list[str]:
    """The Done-when floors ``policy`` misses: 0 s above the trip everywhere; ≥ 97 % of
    the oracle nominally, ≥ 90 % under every other case."""
    missed = []
    for r in table_rows:
        floor = 0.97 if r.case.startswith("nominal") else 0.90
        s = r.share(policy)
        if r.runs[policy].throttled_s > 0 or (s is not None and s < floor):
            missed.append(f"{r.trace} / {r.case}: {100 * (s or 0):.1f} %, "
                          f"{r.runs[policy].throttled_s:.0f} s above")
    return missed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/governor.md differs")
    args = ap.parse_args()
    table_rows, costs = rows()
    table = markdown(table_rows)
    doc = DOC.read_text()
    new = replace_table(doc, table)
    if not args.check:
        DOC.write_text(new)
        print(table)
    summarize(table_rows, costs)
    if args.check and new != doc:
        print("docs/governor.md: the robustness table is not what the code gives; "
              "run scripts/docs/governor_robustness.py", file=sys.stderr)
        return 1
    return 0


def summarize(table_rows: list[Row], costs: list[float]) -> None:
    if costs:
        ms = sorted(c * 1e3 for c in costs)
        print(f"\nmpc planner: {len(ms)} ticks, median {statistics.median(ms):.3f} ms, "
              f"p99 {ms[int(0.99 * (len(ms) - 1))]:.3f} ms, max {ms[-1]:.3f} ms")
    for policy in ("plain", "predicted", "mpc"):
        gaps = [g for r in table_rows if (g := r.runs[policy].min_swap_gap_s) is not None]
        print(f"{policy}: shortest time between two swaps {min(gaps, default=None)} s")
        missed = floors(table_rows, policy)
        print(f"{policy}: floors missed on {len(missed)} of {len(table_rows)} rows")
        for m in missed:
            print(f"  {m}")


if __name__ == "__main__":
    sys.exit(main())
