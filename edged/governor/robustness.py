"""Every policy against the oracle when the plant is not the one the policy expects.

Why: a policy tuned on one plant may only work on that plant. ``--simulate`` fits one
plant per trace (``simulate.default_plant``); the cases here change what the policy
cannot know: the plant's R or τ off by 30 %, a noisy or late sensor, an ambient that
drifts. The oracle (``oracle.py``) always plans on the *true* plant, so each policy's
share is against the best that plant allowed. ``scripts/docs/governor_robustness.py``
writes the table into ``docs/governor.md``; ``tests/test_governor_oracle.py`` holds the
floors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from edged.config.governor import GovernorConfig
from edged.governor.plant import Plant, Sensor
from edged.governor.simulate import (
    POLICIES,
    SimResult,
    default_ladder,
    default_plant,
    demand_profile,
    run_all,
    share,
)
from edged.governor.trace import load_trace

#: every case reads whole degrees, as ``--simulate`` does: "nominal" is the 1 °C
#: quantisation case; the others add one change each
CASES: dict[str, Callable[[Plant], tuple[Plant, Sensor]]] = {
    "nominal (1 °C readings)": lambda p: (p, Sensor()),
    "R ×0.7": lambda p: (replace(p, rise_per_w=p.rise_per_w * 0.7), Sensor()),
    "R ×1.3": lambda p: (replace(p, rise_per_w=p.rise_per_w * 1.3), Sensor()),
    "τ ×0.7": lambda p: (replace(p, tau_s=p.tau_s * 0.7), Sensor()),
    "τ ×1.3": lambda p: (replace(p, tau_s=p.tau_s * 1.3), Sensor()),
    "noise ±1 °C": lambda p: (p, Sensor(noise_c=1.0, seed=42)),
    "lag 2 s": lambda p: (p, Sensor(lag_s=2.0)),
    "ambient +5 °C": lambda p: (replace(p, drift_c=5.0), Sensor()),
}


@dataclass(frozen=True)
class Row:
    trace: str
    case: str
    runs: dict[str, SimResult]  # every policy and "oracle"

    def share(self, policy: str) -> float | None:
        return share(self.runs[policy].work, self.runs["oracle"].work)


def run_case(trace: Path, trip_c: float, case: str) -> Row:
    """One trace under one case: every policy of ``simulate.POLICIES`` and the oracle."""
    tr = load_trace(trace)
    cfg = GovernorConfig()  # the defaults: each policy's auto levels at the trip
    plant, sensor = CASES[case](default_plant(tr, trip_c))
    runs = run_all(cfg, plant, default_ladder(5.0), demand_profile(tr), sensor)
    return Row(trace.name, case, {k: runs[k] for k in (*POLICIES, "oracle")})


def markdown(rows: list[Row]) -> str:
    """The table: per trace and case, each policy's share of the oracle, seconds above
    the trip, peak and swaps."""
    head = ["trace", "case", "oracle work"]
    for p in POLICIES:
        head += [f"{p} share", f"{p} above s", f"{p} peak °C", f"{p} swaps"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row.trace, row.case, f"{row.runs['oracle'].work:.0f}"]
        for p in POLICIES:
            r, s = row.runs[p], row.share(p)
            cells += ["–" if s is None else f"{100 * s:.1f} %", f"{r.throttled_s:.0f}",
                      f"{r.peak_c:.1f}", str(r.swaps)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
