"""The board ``mpc`` plans with before it has identified one: a cautious prior.

Why: the online fit (``mpc.Rls``) needs the power to have varied before it is plausible,
about two minutes into a load. Until then ``mpc`` used to follow the levels, and a board
that starts warm (a recording at 70.6 °C, above the auto ``warm`` level) served a lighter
rung from the first second where the heavy one had minutes of headroom. The prior lets
it plan from the first tick on a board assumed *worse* than most:

* it settles fast: ``τ`` = :data:`TAU_S` (a Pi 4's heat sink fits about that; larger
  heat sinks take several minutes);
* the heaviest rung, at the power it draws (or is assumed to), settles :data:`OVER_C`
  above the limit, so it must be stepped down in time;
* with no compute the board settles at the coolest reading seen, but no lower than
  :data:`SPAN_C` under the limit (a low ambient would make the lighter rungs look cool).

A prior that is wrong the cautious way only steps down sooner than needed. One that is
wrong the other way shows itself: the board heats faster than the prior says at the power
it draws. Over every :data:`CHECK_S` window of readings, a rise faster than the prior's by
:data:`SLACK_C_PER_S` marks it implausible for good, and the levels' steps apply until the
fit is plausible (``prediction.py``).
"""

from __future__ import annotations

from collections import deque

from edged.governor.thermal_model import ThermalParams

TAU_S = 90.0
OVER_C = 10.0
SPAN_C = 30.0
CHECK_S = 20.0
#: 1 °C readings over a 20 s window: one step of quantisation is 0.05 °C/s
SLACK_C_PER_S = 0.06


class Prior:
    """The cautious board of the module docstring, checked against every reading."""

    def __init__(self, limit_c: float) -> None:
        self.limit_c = limit_c
        self.coolest_c: float | None = None
        self.implausible = False
        self._window: deque[tuple[float, float, float]] = deque()

    def add(self, t: float, temp: float, power: float) -> None:
        self.coolest_c = temp if self.coolest_c is None else min(self.coolest_c, temp)
        w = self._window
        w.append((t, temp, power))
        while len(w) > 2 and w[1][0] <= t - CHECK_S:
            w.popleft()

    def params(self, heavy: float, idle: float, units: str) -> ThermalParams | None:
        """The prior board for a ladder whose heaviest rung draws ``heavy`` (``idle``
        without compute); None once implausible or while nothing is known."""
        if self.implausible or self.coolest_c is None or heavy <= idle:
            return None
        base = max(self.coolest_c, self.limit_c - SPAN_C)
        rise = (self.limit_c + OVER_C - base) / (heavy - idle)
        prior = ThermalParams(ambient_c=base - rise * idle, rise_per_unit=rise, tau_s=TAU_S,
                              units=units)
        w = self._window
        if w[-1][0] - w[0][0] >= CHECK_S:
            n = len(w)
            mean_s, mean_t, mean_p = (sum(s[k] for s in w) / n for k in range(3))
            # the least-squares slope: noise on single readings does not decide it
            seen = (sum((s[0] - mean_s) * (s[1] - mean_t) for s in w)
                    / sum((s[0] - mean_s) ** 2 for s in w))
            if seen > (prior.equilibrium(mean_p) - mean_t) / TAU_S + SLACK_C_PER_S:
                self.implausible = True
                return None
        return prior
