"""The predicted variant choice and the swap budget, between a level and its ladder step.

A level asks for a ladder step; with ``predict`` each model reporting its load
(``observe``) is instead held at the lighter of the level's step and the rung whose
predicted equilibrium stays below the first threshold (``thermal_model.py``). Either
way the step moves only when the swap budget allows (``swap_budget.py``). With
``policy = "mpc"`` (also what ``policy = "auto"`` runs with the auto levels) the model's
step is the planner's (``mpc.py``) instead: on the identified board once the fit is
plausible, before that on a cautious prior board (``mpc_prior.py``), and the level's only
when the prior proved implausible; while nothing computes, the active rung stays.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from edged.governor.mpc import Rls, plan, powers_with_prior
from edged.governor.mpc_prior import Prior
from edged.governor.swap_budget import SwapBudget
from edged.governor.thermal_model import LoadBook, ThermalModel, choose_rung

#: how many of the last tick intervals the planner's "one tick" is the longest of: a tick
#: may come late (a slow sensor read), and a plan that swaps "next tick" must still hold
GAPS = 5


class Predictor:
    """Learns the board and each variant's power; turns a wanted step into steps to apply."""

    def __init__(self, policy: str, swap_min_interval_s: float, limit_c: float) -> None:
        self.enabled = policy in ("predicted", "mpc")
        #: the online identification ``mpc`` plans with (None: another policy)
        self.planner = Rls() if policy == "mpc" else None
        #: the cautious board ``mpc`` plans with until ``planner`` has a plausible fit
        self.prior = Prior(limit_c)
        self._planning = False
        self.limit_c = limit_c
        self._last_now: float | None = None
        #: the last few tick intervals: the planner assumes the longest of them
        self._gaps: deque[float] = deque(maxlen=GAPS)
        self.swaps = SwapBudget(swap_min_interval_s)
        self._thermal = ThermalModel()
        self._book = LoadBook()
        self._ladder_len: dict[str, int] = {}
        self._rungs: dict[str, int] = {}  # last predicted rung per model

    @property
    def planning(self) -> bool:
        """True while ``mpc``'s plans choose the rungs (on its fit, or on the prior)."""
        return self._planning

    def observe(self, model: str, variant_index: int, duty: float,
                ladder_len: int | None) -> None:
        self._book.observe(model, variant_index, duty)
        if ladder_len is not None:
            self._ladder_len[model] = ladder_len

    def predict(self, temp: float | None, total_power_w: float | None, now: float,
                limit: float | None) -> dict[str, Any] | None:
        """Learn from this sample; the board fit and each model's predicted equilibria."""
        book = self._book
        rails = total_power_w is not None
        book.learn(total_power_w)
        power = total_power_w if rails else (book.duty_total() if book.active else None)
        if temp is None or power is None:
            return None
        self._thermal.add(now, temp, power, "W" if rails else "duty")
        if self.planner is not None:
            return self._plan(temp, power, now, "W" if rails else "duty")
        params = self._thermal.params()
        if params is None:
            return None
        models: dict[str, Any] = {}
        for model, (active, duty) in sorted(book.active.items()):
            n = max(self._ladder_len.get(model, active + 1), active + 1)
            eqs: list[float | None] = []
            for i in range(n):
                p = book.predicted_power(model, i, rails)
                eqs.append(None if p is None else params.equilibrium(p))
            rung = active if limit is None else choose_rung(eqs, active, limit)
            models[model] = {
                "active": active,
                "duty": round(duty, 3),
                "equilibria_c": [None if e is None else round(e, 1) for e in eqs],
                "rung": rung,
            }
        return _board(params, power, limit, models)

    def _plan(self, temp: float, power: float, now: float, units: str) -> dict[str, Any] | None:
        """``mpc``: identify (``Rls``), then plan each reporting model's rung."""
        assert self.planner is not None
        if self._last_now is not None and now > self._last_now:
            self._gaps.append(now - self._last_now)
        self._last_now = now
        self.planner.add(now, temp, power, units)
        self.prior.add(now, temp, power)
        fitted = self.planner.params()
        book, rails = self._book, units == "W"
        idle = (book.idle_power or 0.0) if rails else 0.0
        ladders = {model: powers_with_prior(
            [book.predicted_power(model, i, rails)
             for i in range(max(self._ladder_len.get(model, active + 1), active + 1))], idle)
            for model, (active, _) in book.active.items()}
        heavy = max((pw[0] for pw in ladders.values()), default=idle)
        params = fitted or self.prior.params(heavy, idle, units)
        idle_hold = params is None and heavy <= idle and not self.prior.implausible
        self._planning = params is not None or idle_hold
        if idle_hold:  # nothing computes, so no rung heats the board: a swap buys nothing
            return {"plant": None, "limit_c": self.limit_c, "models": {
                m: {"active": a, "duty": round(d, 3), "rung": a}
                for m, (a, d) in sorted(book.active.items())}}
        if params is None:
            return None
        models: dict[str, Any] = {}
        for model, (active, duty) in sorted(book.active.items()):
            powers = ladders[model]
            p = plan(params, temp, powers, active, self.swaps.hold_left(model, now),
                     max(self._gaps, default=1.0), self.swaps.min_interval_s, self.limit_c)
            models[model] = {"active": active, "duty": round(duty, 3),
                             "plan": list(p.rungs), "plan_peak_c": round(p.peak_c, 1),
                             "safe": p.safe, "rung": p.rung}
        return _board(params, power, self.limit_c, models) | {
            "plant": "fit" if fitted else "prior"}

    def ladder(
        self, want: int, now: float, force: bool, prediction: dict[str, Any] | None,
        floor: int = 0,
    ) -> tuple[int, float | None, dict[str, int] | None, int]:
        """Apply the predicted choice and the swap budget: (steps, hold s, per model, wanted).

        ``force`` (a hard threshold, a stale sensor under "hot", an operator pin) spends
        the swap budget early; ``floor`` is the step mpc's plan may not go heavier than
        (a pin, a stale sensor under "hot", the energy budget).
        """
        if not (self.enabled and self._book.active):
            steps, left = self.swaps.allow("*", want, now, force=force)
            return steps, (left if left > 0 else None), None, want
        # Each reporting model keeps its last predicted rung while the model is
        # (re)learning, and is budgeted on its own; the global step is their max.
        predicted = (prediction or {}).get("models", {})
        per_model: dict[str, int] = {}
        lefts: list[float] = []
        for name in sorted(self._book.active):
            if name in predicted:
                self._rungs[name] = predicted[name]["rung"]
            if self.planner is not None:  # the plan, else the level's (prior implausible)
                wanted = max(predicted[name]["rung"], floor) if name in predicted else want
            else:
                wanted = max(want, self._rungs.get(name, 0))
            per_model[name], left = self.swaps.allow(name, wanted, now, force=force)
            lefts.append(left)
        if self.planner is not None:
            wanted = max(max(predicted[m]["rung"], floor) if m in predicted else want
                         for m in per_model)
        else:
            wanted = max(want, *self._rungs.values()) if self._rungs else want
        hold = max(lefts) if lefts and max(lefts) > 0 else None
        return max(per_model.values()), hold, per_model, wanted


def _board(params: Any, power: float, limit: float | None,
           models: dict[str, Any]) -> dict[str, Any]:
    return {
        "units": params.units,
        "ambient_c": round(params.ambient_c, 1),
        "rise_per_unit": round(params.rise_per_unit, 3),
        "tau_s": round(params.tau_s, 1),
        "power": round(power, 3),
        "equilibrium_c": round(params.equilibrium(power), 1),
        "limit_c": limit,
        "models": models,
    }
