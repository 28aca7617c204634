"""The model-predictive rung choice (``policy = "mpc"``): identify the board online, plan
a short horizon every tick, serve the plan's first rung.

Why: the ``predicted`` choice keeps each rung's *equilibrium* below the first threshold,
so on a board where only the lightest rung settles there it gives up a fifth of the work,
although the heavier rungs could run for minutes before the temperature gets anywhere
near the firmware limit. A planner that knows the board's response can run the heavy
rung while there is thermal headroom and step down at the last moment the swap budget
allows, the way the oracle (``oracle.py``) does with perfect knowledge.

Identification: recursive least squares with forgetting (:class:`Rls`) on the same
first-order model as ``thermal_model.py`` (``τ·dT/dt = T_amb + R·P − T``, regressed as
``ΔT/Δt`` over :data:`LAG_STEPS` ticks, at most :data:`LAG_S`, on ``[1, P, T]``), so the
fit follows a board whose ambient or cooling changes. Each rung's power is what
``LoadBook`` learned while it ran; a rung
never seen running is assumed to draw :data:`UNSEEN_POWER_RATIO` of the next heavier
one's compute power, and rung ``i`` is worth ``RUNG_VALUE ** i`` of the heaviest's work
(the governor does not know each variant's value; this prior ranks them).

Planning: every sequence of rungs over :data:`SEGMENTS` more holds of
``swap_min_interval_s`` after the first choice (stay one tick, or swap now and hold),
each move one the swap budget allows, is predicted in closed form; the one with the most
work whose predicted temperature stays :data:`MARGIN_C` below the limit at every segment
end wins (the response is monotone within a segment, so the ends bound it). At most
3 × 3³ sequences: well under a millisecond per tick, on the governor's thread.
"""

from __future__ import annotations

import functools
import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from edged.governor.thermal_model import ThermalParams

LAG_STEPS = 20  # ΔT over this many ticks (1 °C steps need a span to average out) ...
LAG_S = 20.0  # ... but over no more than this long
FORGET = 0.998  # per update: a memory of ~500 ticks
P0 = 1e3
P_TRACE_MAX = 1e4  # bounds the covariance while the input does not vary (windup)
MIN_UPDATES = 10
TAU_RANGE_S = (1.0, 7200.0)
MARGIN_C = 1.0  # below the limit: a 1 °C reading is up to 0.5 °C low, and a tick late
SEGMENTS = 3
UNSEEN_POWER_RATIO = 0.5
RUNG_VALUE = 0.85


class Rls:
    """Recursive least squares of ``ΔT/Δt`` on ``[1, P, T − T_ref]`` with forgetting."""

    def __init__(self, units: str = "W") -> None:
        self._start(units)

    def _start(self, units: str) -> None:
        self._window: deque[tuple[float, float, float]] = deque()
        self._theta = np.zeros(3)
        self._p = np.eye(3) * P0
        self._ref: float | None = None
        self.updates = 0
        self.units = units

    def add(self, t: float, temp: float, power: float, units: str) -> None:
        if units != self.units:
            self._start(units)  # W and duty do not mix: start again
        if self._ref is None:
            self._ref = temp
        w = self._window
        w.append((t, temp, power))
        while len(w) > 2 and (len(w) > LAG_STEPS + 1 or w[1][0] <= t - LAG_S):
            w.popleft()
        if len(w) <= LAG_STEPS and t - w[0][0] < LAG_S:
            return
        arr = np.asarray(w)
        y = (temp - arr[0, 1]) / (t - arr[0, 0])
        self._update(np.array([1.0, arr[:, 2].mean(), arr[:, 1].mean() - self._ref]), y)

    def _update(self, x: np.ndarray, y: float) -> None:
        px = self._p @ x
        gain = px / (FORGET + x @ px)
        self._theta = self._theta + gain * (y - x @ self._theta)
        self._p = (self._p - np.outer(gain, px)) / FORGET
        trace = float(np.trace(self._p))
        if trace > P_TRACE_MAX:
            self._p *= P_TRACE_MAX / trace
        self.updates += 1

    def params(self) -> ThermalParams | None:
        """The identified board, or None until it is plausible (a stable, heating fit)."""
        a, b, c = (float(v) for v in self._theta)
        if self.updates < MIN_UPDATES or c >= 0 or b <= 0 or self._ref is None:
            return None
        tau = -1.0 / c
        if not TAU_RANGE_S[0] <= tau <= TAU_RANGE_S[1]:
            return None
        return ThermalParams(ambient_c=(a - c * self._ref) * tau, rise_per_unit=b * tau,
                             tau_s=tau, units=self.units)


@dataclass(frozen=True)
class Plan:
    rung: int
    rungs: tuple[int, ...]  # the chosen sequence (first choice, then each hold)
    peak_c: float
    safe: bool


def powers_with_prior(known: Sequence[float | None], idle: float) -> list[float]:
    """Each rung's power; an unseen one from the next heavier known one (or lighter)."""
    out: list[float] = []
    for i, p in enumerate(known):
        if p is not None:
            out.append(p)
        elif out:
            out.append(idle + (out[-1] - idle) * UNSEEN_POWER_RATIO)
        else:
            later = next(((j, q) for j, q in enumerate(known) if q is not None), None)
            out.append(idle if later is None else
                       idle + (later[1] - idle) / UNSEEN_POWER_RATIO ** (later[0] - i))
    return out


def _moves(active: int, rungs: int) -> list[int]:
    """Where the next hold may go: stay, any lighter rung, or one rung heavier."""
    return [j for j in range(rungs) if j >= active or j == active - 1]


@functools.cache
def sequences(rungs: int, active: int, free: bool) -> np.ndarray:
    """Every (first choice, hold, hold, hold) the swap budget allows, one row each; the
    first choice is a swap only when ``free``."""
    firsts = _moves(active, rungs) if free else [active]
    out = [seq for first in firsts
           for seq in itertools.product([first], *[range(rungs)] * SEGMENTS)
           if all(b in _moves(a, rungs) for a, b in itertools.pairwise((active, *seq)))]
    return np.array(out, dtype=np.intp)


def plan(params: ThermalParams, temp: float, powers: Sequence[float], active: int,
         hold_left_s: float, step_s: float, hold_s: float, limit_c: float) -> Plan:
    """The rung to serve now (see the module docstring)."""
    eqs = np.array([params.equilibrium(p) for p in powers])
    hold_s = max(hold_s, step_s)
    seqs = sequences(len(powers), active, hold_left_s <= 0)
    # The first segment: one tick (then free) when staying, a whole hold after a swap.
    first = np.where(seqs[:, 0] == active, max(hold_left_s, step_s), hold_s)
    durs = np.column_stack([first] + [np.full(len(seqs), hold_s)] * SEGMENTS)
    durs[:, -1] += first.min() - first  # every plan covers the same horizon
    t = np.full(len(seqs), float(temp))
    peak = np.full(len(seqs), -np.inf)  # the start is not ours to change
    work = np.zeros(len(seqs))
    for i in range(SEGMENTS + 1):
        eq = eqs[seqs[:, i]]
        t = eq + (t - eq) * np.exp(-durs[:, i] / params.tau_s)
        peak = np.maximum(peak, t)
        work += durs[:, i] * RUNG_VALUE ** seqs[:, i]
    safe_c = limit_c - MARGIN_C
    safe = peak < safe_c
    if safe.any():
        score = np.where(safe, work + headroom_value(list(eqs), params.tau_s, safe_c)
                         * (safe_c - t), -np.inf)
    else:  # nothing stays under the limit: the one that peaks lowest
        score = -peak
    k = int(np.argmax(score))  # the first best: staying is listed before swapping
    return Plan(int(seqs[k, 0]), tuple(int(v) for v in seqs[k]), float(peak[k]), bool(safe[k]))


def headroom_value(eqs: Sequence[float], tau_s: float, safe_c: float) -> float:
    """Work a degree of headroom left at the horizon's end is worth (its terminal value).

    Near the limit the sustainable schedule mixes the two rungs whose equilibria bracket
    it; a degree of headroom lets the heavier of them run ``τ / (eq_a − eq_b)`` seconds
    more instead of the lighter one. Without it, every plan would end the horizon as hot
    as it may, and cool down on a rung lighter than needed to afford it.
    """
    for a in range(len(eqs) - 1):
        if eqs[a] >= safe_c > eqs[a + 1]:
            return tau_s * (RUNG_VALUE ** a - RUNG_VALUE ** (a + 1)) / (eqs[a] - eqs[a + 1])
    return 0.0
