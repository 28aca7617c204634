#!/usr/bin/env python3
"""Regenerate the energy budget table of docs/governor.md ("Energy budget figures").

Every power trace shipped (each trace in examples/traces/ and examples/traces/power/
with the board's power in every sample) is judged by ``edged governor replay
--simulate --json`` with the default governor: the energy budget mode against the
energy oracle at three budgets between always-lightest and always-heaviest. The rows
go between the table's markers in the doc.

    python scripts/docs/governor_energy_table.py          # prints the rows
    python scripts/docs/governor_energy_table.py --write  # and rewrites the doc's table
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "examples" / "traces"
DOC = ROOT / "docs" / "governor.md"
START, END = "<!-- energy-table:start -->", "<!-- energy-table:end -->"
HEADER = ("| trace | budget (share) | completed | work, % of the oracle's bound | unspent | "
          "swaps (oracle) | oracle's schedule, % of its bound |\n|---|---|---|---|---|---|---|")


def judged(trace: Path) -> dict | None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "edged", "governor", "replay", str(trace),
                          "--simulate", "--json"], capture_output=True, text=True, env=env,
                         check=True)
    return json.loads(out.stdout)["simulation"].get("energy")


def rows() -> list[str]:
    out = []
    traces = sorted(p for d in (TRACES, TRACES / "power") for p in d.iterdir()
                    if p.suffix in (".csv", ".log"))
    for trace in traces:
        energy = judged(trace)
        if energy is None:
            continue  # no power in the trace
        name = trace.relative_to(TRACES).as_posix()
        for b in energy["budgets"]:
            out.append(f"| {name} | {b['budget_wh']:.3f} Wh ({b['share']:.2f}) | "
                       f"{'yes' if b['completed'] else '**no**'} | "
                       f"{b['share_of_oracle_pct']:.1f} % | {b['unspent_pct']:.1f} % | "
                       f"{b['swaps']} ({b['oracle_swaps']}) | {b['oracle_of_bound_pct']:.1f} % |")
    return out


def main() -> None:
    table = "\n".join([HEADER, *rows()])
    print(table)
    if "--write" in sys.argv[1:]:
        text = DOC.read_text()
        head, rest = text.split(START, 1)
        _, tail = rest.split(END, 1)
        DOC.write_text(f"{head}{START}\n{table}\n{END}{tail}")


if __name__ == "__main__":
    main()
