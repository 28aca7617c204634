"""The oracle: the most work any schedule of rungs could have done on a simulated run.

Why: "0 s above the limit" says a policy is safe, not whether it is good; a policy that
serves the lightest rung all day is safe too. Knowing the plant (``plant.Plant``), the
load and the ladder in advance, dynamic programming finds the schedule with the most
work that never reaches the firmware limit, paying the same swap budget the governor pays
(``swap_budget.py``): after a change the rung holds for ``swap_min_interval_s``, and a
change back up the ladder moves one rung. (The governor may spend its budget early at a
hard threshold; the oracle never needs to, so it never does.) Every policy's work is then
a share of the oracle's.

Method: backward induction over the simulator's time steps (``demand_profile``'s
ticks) × the plant's temperature on a grid × the active rung. A swap is one transition
that jumps to the first step at least ``swap_min_interval_s`` later, holding the new rung
(the plant is linear, so the block maps the start temperature affinely and its constraint
is one threshold), so no "time since the last swap" state is needed. Between grid points
the value is interpolated linearly; a grid point from which no safe schedule exists is
worth :data:`INFEASIBLE`, so interpolating towards one is pessimistic, and the forward
pass re-decides at the exact temperature each step, so the schedule it returns is safe.

Resolution: :data:`RESOLUTION_C` = 0.05 °C; ``tests/test_governor_oracle.py`` shows that
halving it (double the resolution) changes the oracle's work by less than 0.5 %.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from edged.governor.plant import Plant, Rung

RESOLUTION_C = 0.05
INFEASIBLE = -1e12
_FEASIBLE = INFEASIBLE / 2


@dataclass(frozen=True)
class _Steps:
    """Per interval k (from sample k-1 to k): decay, forced response and work per rung."""

    times: np.ndarray  # (N,)
    decay: np.ndarray  # (N,): exp(-dt/τ); index 0 unused
    forced: np.ndarray  # (N, R): (1 - decay) · equilibrium
    work: np.ndarray  # (N, R)
    eq: np.ndarray  # (N, R): where each rung would settle


def _steps(plant: Plant, ladder: Sequence[Rung], demand: Sequence[tuple[float, float]]) -> _Steps:
    times = np.array([t for t, _ in demand], dtype=float)
    duty = np.array([d for _, d in demand], dtype=float)
    dt = np.diff(times, prepend=times[0])
    decay = np.exp(-dt / plant.tau_s)
    rung_w = np.array([r.power_w for r in ladder])
    value = np.array([r.value for r in ladder])
    amb = np.array([plant.ambient_at(t - times[0], times[-1] - times[0]) for t in times])
    eq = amb[:, None] + plant.rise_per_w * (plant.idle_w + duty[:, None] * rung_w[None, :])
    return _Steps(times, decay, (1.0 - decay)[:, None] * eq, (dt * duty)[:, None] * value, eq)


def _block_end(times: np.ndarray, hold_s: float) -> np.ndarray:
    """For a swap decided at sample k: the first sample at least ``hold_s`` later."""
    end = np.searchsorted(times, times + hold_s, side="left")
    return np.minimum(np.maximum(end, np.arange(len(times)) + 1), len(times) - 1)


def _blocks(s: _Steps, end: np.ndarray, limit: float) -> tuple[np.ndarray, ...]:
    """Per (k, rung): T_end = A·T_k + B over the held block, the start temperature below
    which every step of it stays under ``limit``, and the block's work (all k at once,
    one step further into every block per pass)."""
    n, r = s.work.shape
    a, b = np.ones((n, r)), np.zeros((n, r))
    thr, work = np.full((n, r), np.inf), np.zeros((n, r))
    ks = np.arange(n)
    for m in range(1, int((end - ks).max(initial=0)) + 1):
        k = ks[ks + m <= end]
        i = k + m
        a[k] *= s.decay[i, None]
        b[k] = b[k] * s.decay[i, None] + s.forced[i]
        thr[k] = np.minimum(thr[k], (limit - b[k]) / a[k])
        work[k] += s.work[i]
    return a, b, thr, work


def _moves(active: int, rungs: int) -> list[int]:
    """Rungs a swap may go to: any lighter one, or one rung heavier (``SwapBudget``)."""
    return [j for j in range(rungs) if j > active or j == active - 1]


class Oracle:
    """The value function over (sample, temperature, rung) and the schedule it gives."""

    def __init__(
        self, plant: Plant, ladder: Sequence[Rung], demand: Sequence[tuple[float, float]],
        swap_min_interval_s: float, resolution_c: float = RESOLUTION_C,
    ) -> None:
        self.limit = plant.trip_c
        self.s = _steps(plant, ladder, demand)
        self.start_c = plant.equilibrium(plant.idle_w)
        self.end = _block_end(self.s.times, swap_min_interval_s)
        self.blocks = _blocks(self.s, self.end, self.limit)
        n, r = self.s.work.shape
        low = min(self.start_c, float(self.s.eq.min())) - 1.0
        bins = math.ceil((self.limit - low) / resolution_c) + 1
        self.grid = np.linspace(low, self.limit, bins)
        self.value = np.empty((n, bins, r))
        self._solve()

    def _options(self, k: int, temps: np.ndarray, rung: int) -> list[tuple[np.ndarray, int]]:
        """(value of each option at ``temps``, the rung it moves to) for a free decision."""
        s, (a, b, thr, work) = self.s, self.blocks
        nxt = s.decay[k + 1] * temps + s.forced[k + 1, rung]
        opts = [(s.work[k + 1, rung] + self._at(k + 1, rung, nxt), rung)]
        j = int(self.end[k])
        for to in _moves(rung, s.work.shape[1]):
            v = work[k, to] + self._at(j, to, a[k, to] * temps + b[k, to])
            opts.append((np.where(temps < thr[k, to], v, INFEASIBLE), to))
        return opts

    def _at(self, k: int, rung: int, temps: np.ndarray) -> np.ndarray:
        v = np.interp(temps, self.grid, self.value[k, :, rung], right=INFEASIBLE)
        return np.where(temps < self.limit, v, INFEASIBLE)

    def _solve(self) -> None:
        n, r = self.s.work.shape
        hot = self.grid >= self.limit
        self.value[n - 1] = np.where(hot, INFEASIBLE, 0.0)[:, None]
        for k in range(n - 2, -1, -1):
            for rung in range(r):
                best = np.max([v for v, _ in self._options(k, self.grid, rung)], axis=0)
                self.value[k, :, rung] = np.where(hot | (best < _FEASIBLE), INFEASIBLE, best)

    @property
    def work(self) -> float:
        """The most work from the start (idle equilibrium, heaviest rung, swaps allowed)."""
        v = float(np.interp(self.start_c, self.grid, self.value[0, :, 0]))
        return max(v, 0.0) if v > _FEASIBLE else 0.0

    def schedule(self) -> list[int]:
        """The rung of each interval (index 0 unused), re-decided at the exact temperature."""
        s = self.s
        n = len(s.times)
        rungs = [0] * n
        temp, rung, k = self.start_c, 0, 0
        while k < n - 1:
            opts = self._options(k, np.array([temp]), rung)
            value, to = max(opts, key=lambda o: float(o[0][0]))  # first (stay) wins ties
            stop = k + 1 if to == rung else int(self.end[k])
            for i in range(k + 1, stop + 1):
                rungs[i] = to
                temp = s.decay[i] * temp + s.forced[i, to]
            rung, k = to, stop
            del value
        return rungs
