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
part; idle is spent whatever runs). The schedule's energy is recomputed without
rounding and must be within the budget (``solve``). How far that schedule can be from
the best is bounded without any rounding by the Lagrangian dual (``upper_bound``): the
best work lies between the two.
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


#: re-solves on a budget lowered by what rounding let a schedule overspend
FEASIBLE_TRIES = 6


def solve(demand: np.ndarray, tick_s: float, idle_w: float, rungs: Sequence[Rung],
          budget_j: float, hold_s: float, buckets: int = 2000) -> OracleResult | None:
    """The best schedule whose energy, recomputed without rounding, is within the budget
    (rounding each tick lets the table overspend a little, so the budget it plans on is
    lowered by that until it does not); None when even the lightest rung cannot finish."""
    plan_j = budget_j
    for _ in range(FEASIBLE_TRIES):
        best = _solve(demand, tick_s, idle_w, rungs, plan_j, hold_s, buckets)
        if best is None or best.energy_j <= budget_j * (1 + 1e-9):
            return best
        plan_j -= best.energy_j - budget_j
    return None


def _solve(demand: np.ndarray, tick_s: float, idle_w: float, rungs: Sequence[Rung],
           budget_j: float, hold_s: float, buckets: int) -> OracleResult | None:
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


def upper_bound(demand: np.ndarray, tick_s: float, idle_w: float, rungs: Sequence[Rung],
                budget_j: float, hold_s: float, grid: int = 64) -> float:
    """A bound no schedule's work exceeds, without rounding anything: for any price
    ``λ ≥ 0`` of a joule, the most of ``work − λ·(energy − budget)`` over schedules that
    keep the swap interval (a small exact DP, no energy in the state) is at least the
    best work within the budget; the least of it over a grid of prices, refined once."""
    p = np.array([g.power_w for g in rungs])
    v = np.array([g.value for g in rungs])
    joules = (idle_w + demand[:, None] * p[None, :]) * tick_s
    gain = demand[:, None] * v[None, :] * tick_s
    held = max(1, math.ceil(hold_s / tick_s - 1e-9))
    top = float(v.max() / max(p.min(), 1e-9))  # beyond this price no joule pays
    prices = np.concatenate([[0.0], np.geomspace(top * 1e-4, top, grid)])
    bound = _dual(prices, gain, joules, held, budget_j)
    k = int(np.argmin(bound))
    lo, hi = prices[max(k - 1, 0)], prices[min(k + 1, len(prices) - 1)]
    fine = np.linspace(lo, hi, grid)
    return float(min(bound.min(), _dual(fine, gain, joules, held, budget_j).min()))


def _dual(prices: np.ndarray, gain: np.ndarray, joules: np.ndarray, held: int,
          budget_j: float) -> np.ndarray:
    """``max over schedules of work − λ·(energy − budget)`` for each price ``λ``."""
    n, r = gain.shape
    nxt = np.zeros((len(prices), r, held))
    for t in range(n - 1, -1, -1):
        shifted = nxt + (gain[t][None, :] - prices[:, None] * joules[t][None, :])[:, :, None]
        cur = np.empty_like(nxt)
        cur[:, :, :-1] = shifted[:, :, 1:]
        fresh = shifted[:, :, 0]
        for j in range(r):
            options = fresh.copy()
            options[:, j] = shifted[:, j, -1]
            cur[:, j, -1] = options.max(axis=1)
        nxt = cur
    return nxt[:, 0, -1] + prices * budget_j
