"""The energy oracle: the most work that completes the mission on the budget.

Why: the energy budget mode (``energy.py``) can only be called good against the best
schedule there was. Given the demand over the whole mission in advance (which no
online policy has), dynamic programming over time × energy used × rung × time held
finds the schedule of rungs with the most work whose energy never exceeds the budget
before the mission ends, changing rung no faster than the swap budget allows.

Resolution: time in ticks of ``tick_s`` (a rung is held for a whole tick; the demand
is averaged over it, which is exact because a tick's work and energy are both linear
in the demand), energy in ``buckets`` equal parts of what the budget leaves above the
idle power over the mission (each tick's energy above idle rounded to the nearest
part; idle is spent whatever runs). ``solve`` reports the schedule's energy recomputed
without rounding; ``energy_sim`` runs it at two resolutions to show the result holds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np


@dataclass(frozen=True)
class Rung:
    """One ladder step: watts above idle and work per second at full demand."""

    power_w: float
    value: float


@dataclass(frozen=True)
class OracleResult:
    work: float
    energy_j: float  # recomputed without rounding
    rungs: tuple[int, ...]  # per tick
    swaps: int
    tick_s: float
    buckets: int


def tick_demand(demand: Sequence[tuple[float, float]], tick_s: float,
                end_s: float) -> np.ndarray:
    """Mean demand per tick of ``tick_s`` over [0, end_s), the demand held from each
    sample to the next (as the simulation holds it)."""
    n = max(1, math.ceil(end_s / tick_s - 1e-9))
    out = np.zeros(n)
    for (t0, _), (t1, d) in pairwise(demand):
        # the simulation counts the interval ending at a sample with that sample's demand
        a, b = max(t0, 0.0), min(t1, end_s)
        while a < b:
            k = min(int(a // tick_s), n - 1)
            edge = min(b, (k + 1) * tick_s)
            out[k] += d * (edge - a)
            a = edge
    widths = np.minimum(tick_s, end_s - np.arange(n) * tick_s)
    return out / widths


def solve(demand: np.ndarray, tick_s: float, idle_w: float, rungs: Sequence[Rung],
          budget_j: float, hold_s: float, buckets: int = 2000) -> OracleResult | None:
    """The best schedule, or None when even the lightest rung cannot finish."""
    n, r = len(demand), len(rungs)
    widths = np.full(n, tick_s)
    p = np.array([g.power_w for g in rungs])
    v = np.array([g.value for g in rungs])
    above = demand[:, None] * p[None, :] * widths[:, None]  # joules above idle (n, r)
    joules = above + idle_w * widths[:, None]
    gain = demand[:, None] * v[None, :] * widths[:, None]
    spare = budget_j - idle_w * float(widths.sum())  # idle is spent whatever runs
    if spare < 0:
        return None
    unit = max(spare, 1e-9) / buckets
    cost = np.rint(above / unit).astype(int)
    held = max(1, math.ceil(hold_s / tick_s - 1e-9))  # ticks a rung stays after a change
    switch_to = np.zeros((n, r, buckets + 1), dtype=np.int8)
    nxt = np.zeros((r, held, buckets + 1))  # value after the last tick: 0 when within budget
    for t in range(n - 1, -1, -1):
        shifted = np.full((r, held, buckets + 1), -np.inf)
        for j in range(r):
            k = cost[t, j]
            if k <= buckets:
                shifted[j, :, :buckets + 1 - k] = nxt[j, :, k:] + gain[t, j]
        cur = np.empty_like(nxt)
        cur[:, :-1, :] = shifted[:, 1:, :]  # stay: held one tick longer
        stay = shifted[:, -1, :]  # held enough: stay, or change to another rung (held 0)
        fresh = shifted[:, 0, :]
        for j in range(r):
            options = fresh.copy()
            options[j] = stay[j]
            switch_to[t, j] = np.argmax(options, axis=0)
            cur[j, -1] = options.max(axis=0)
        nxt = cur
    if not np.isfinite(nxt[0, -1, 0]):
        return None
    return _walk(switch_to, cost, gain, joules, held, tick_s, buckets)


def _walk(switch_to: np.ndarray, cost: np.ndarray, gain: np.ndarray, joules: np.ndarray,
          held: int, tick_s: float, buckets: int) -> OracleResult:
    """The schedule the table says, from the start: free to choose, nothing used."""
    rung, h, used = 0, held - 1, 0
    chosen: list[int] = []
    work = energy = 0.0
    swaps = 0
    for t in range(len(cost)):
        nxt = int(switch_to[t, rung, used]) if h == held - 1 else rung
        if nxt != rung:
            swaps += t > 0
            h = 0
        else:
            h = min(h + 1, held - 1)
        rung = nxt
        used += int(cost[t, rung])
        work += float(gain[t, rung])
        energy += float(joules[t, rung])
        chosen.append(rung)
    return OracleResult(work, energy, tuple(chosen), swaps, tick_s, buckets)
