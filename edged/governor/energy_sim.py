"""The energy budget mode in closed loop on a power trace, against the energy oracle.

Why: ``edged governor replay --simulate`` on a trace with power says how the budget
mode would have spent a budget on that trace's demand: the real ``Governor`` (its
``[governor.energy]`` plan, swap budget and all) chooses the rung each sample, the
simulated device draws ``idle + demand × rung power`` and does ``demand × rung value``
of work, and the device stops when the budget is gone. The oracle
(``energy_oracle.py``) is the most work any schedule could have done on the same
demand and budget. The demand is the trace's power between its idle (10th percentile)
and busy (95th percentile) levels (``simulate.demand_profile``), the idle power and the
heaviest rung's are those levels, the lighter rungs ``simulate.DEFAULT_LADDER``'s
fractions; budgets are set between always-lightest and always-heaviest
(``BUDGET_SHARES``), where a budget binds. All of this is a model of the trace, and
``docs/governor.md`` says so beside every figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from itertools import pairwise
from typing import Any

import numpy as np

from edged.config.governor import GovernorConfig
from edged.config.governor_energy import EnergyConfig
from edged.governor.energy import WH
from edged.governor.energy_oracle import Rung, solve, tick_demand, upper_bound
from edged.governor.policy import Governor
from edged.governor.sensors import RAIL, Readings
from edged.governor.simulate import DEFAULT_LADDER, demand_profile
from edged.governor.trace import Trace

#: where between always-lightest (0) and always-heaviest (1) each judged budget lies
BUDGET_SHARES = (0.25, 0.5, 0.75)
#: rows per second at full demand (the same for every rung: the demand is the camera's)
RATE = 10.0
TICK_S = 5.0
BUCKETS = 2000
MODEL = "sim"


def has_power(trace: Trace) -> bool:
    return all(s.total_power_w is not None for s in trace.samples)


def device(trace: Trace) -> tuple[float, list[Rung]]:
    """Idle watts and the ladder (watts above idle at full demand, value) of the trace."""
    arr = np.asarray([s.total_power_w for s in trace.samples], dtype=float)
    idle, busy = float(np.percentile(arr, 10)), float(np.percentile(arr, 95))
    heavy = max(busy - idle, 0.05 * max(busy, 1e-9))
    return idle, [Rung(heavy * f, v) for f, v in DEFAULT_LADDER]


def run(cfg: GovernorConfig, demand: Sequence[tuple[float, float]], idle_w: float,
        rungs: Sequence[Rung], budget_j: float) -> dict[str, Any]:
    """One mission of the length of ``demand`` with the governor's energy plan."""
    mission = demand[-1][0] - demand[0][0]
    gcfg = replace(cfg, energy=EnergyConfig(budget_j / WH, mission))
    clock = [demand[0][0]]
    gov = Governor(gcfg, clock=lambda: clock[0])
    rung, spent, work, swaps = 0, 0.0, 0.0, 0
    died: float | None = None
    prev = demand[0][0]
    for t, d in demand:
        dt, prev = t - prev, t
        power = idle_w + d * rungs[rung].power_w
        if dt > 0 and died is None:
            spent += power * dt
            work += d * rungs[rung].value * dt
            if spent > budget_j * (1 + 1e-9):
                died = t - demand[0][0]
        clock[0] = t
        gov.observe_load(MODEL, rung, d, t, ladder_len=len(rungs), rows=round(d * RATE * dt))
        dec = gov.step(Readings(timestamp=t, wall_time=t, power={"VDD_IN": power},
                                total_power_w=power, kinds={"VDD_IN": RAIL}), now=t)
        want = min(dec.ladder_steps, len(rungs) - 1)
        if want != rung:
            rung, swaps = want, swaps + 1
    return {"work": work, "spent_j": spent, "swaps": swaps, "died_at_s": died,
            "completed": died is None}


def judge(cfg: GovernorConfig, trace: Trace,
          shares: Sequence[float] = BUDGET_SHARES) -> dict[str, Any]:
    """The budget mode against the oracle at each budget share, on ``trace``'s demand."""
    demand = demand_profile(trace)
    idle, rungs = device(trace)
    end = demand[-1][0]
    ticks = tick_demand(demand, TICK_S, end)
    fixed = [sum(idle * (t1 - t0) + d * g.power_w * (t1 - t0)
                 for (t0, _), (t1, d) in pairwise(demand)) for g in rungs]
    rows = []
    for share in shares:
        budget = fixed[-1] + share * (fixed[0] - fixed[-1])
        mode = run(cfg, demand, idle, rungs, budget)
        oracle = solve(ticks, TICK_S, idle, rungs, budget, cfg.swap_min_interval_s, BUCKETS)
        bound = upper_bound(ticks, TICK_S, idle, rungs, budget, cfg.swap_min_interval_s)
        rows.append(_row(share, budget, mode, oracle, bound))
    return {"idle_w": round(idle, 3), "mission_s": round(end, 1),
            "ladder": [vars(g) for g in rungs], "tick_s": TICK_S, "buckets": BUCKETS,
            "hold_s": cfg.swap_min_interval_s, "budgets": rows}


def _row(share: float, budget: float, mode: dict[str, Any], oracle: Any,
         bound: float) -> dict[str, Any]:
    """One budget's figures. The best possible work lies between the oracle's schedule
    (``oracle_work``, feasible) and ``oracle_bound``; the mode's share is of the bound,
    so it never flatters the mode."""
    o_work = oracle.work if oracle is not None else None
    return {
        "share": share,
        "budget_wh": round(budget / WH, 4),
        "completed": mode["completed"],
        "died_at_s": mode["died_at_s"],
        "work": round(mode["work"], 2),
        "oracle_work": None if o_work is None else round(o_work, 2),
        "oracle_bound": round(bound, 2),
        "oracle_of_bound_pct": None if o_work is None else round(100 * o_work / bound, 2),
        "oracle_spent_pct": None if oracle is None else round(100 * oracle.energy_j / budget, 2),
        "share_of_oracle_pct": None if bound <= 0 else round(100 * mode["work"] / bound, 1),
        "unspent_pct": round(100 * (budget - mode["spent_j"]) / budget, 2),
        "swaps": mode["swaps"],
        "oracle_swaps": None if oracle is None else oracle.swaps,
    }


def format_text(result: dict[str, Any]) -> list[str]:
    """The energy rows of ``edged governor replay --simulate``."""
    lines = ["", f"energy budget mode (model, not a recording): idle {result['idle_w']:.2f} W, "
             f"mission {result['mission_s']:.0f} s, swaps ≥ {result['hold_s']:g} s apart; "
             f"oracle: {result['tick_s']:g} s ticks, budget in {result['buckets']} parts; "
             "% of oracle is of its upper bound",
             f"  {'budget Wh':>10}{'completed':>11}{'% of oracle':>13}{'unspent':>9}"
             f"{'swaps':>7}{'oracle swaps':>14}{'oracle/bound':>14}"]
    for r in result["budgets"]:
        share = "-" if r["share_of_oracle_pct"] is None else f"{r['share_of_oracle_pct']:.1f}%"
        fine = "-" if r["oracle_of_bound_pct"] is None else f"{r['oracle_of_bound_pct']:.2f}%"
        lines.append(f"  {r['budget_wh']:>10.4f}{'yes' if r['completed'] else 'NO':>11}"
                     f"{share:>13}{r['unspent_pct']:>8.2f}%{r['swaps']:>7}"
                     f"{r['oracle_swaps'] if r['oracle_swaps'] is not None else '-':>14}"
                     f"{fine:>14}")
    return lines
