"""The energy budget mode: spend ``budget_wh`` over ``mission_s`` so the mission completes
with the most work.

Why a plan on energy per inference: a rung's work and its power above idle are both
proportional to the demand (the inference rate times the rung's energy per inference),
so a joule buys the same work whenever it is spent, and the best schedule is a mix of
two adjacent rungs at any demand (docs/governor.md, "Energy budget mode"). The plan
therefore only keeps the spending on course: each step it divides what the budget
leaves above idle by the inferences the rest of the mission expects (the mission's
mean rate so far) and picks the heaviest ladder step whose energy per inference fits.
Running lighter than that raises the allowance and the plan climbs again; running
heavier lowers it and it steps down; so nearly the whole budget is spent as the
mission ends.

What is measured: the board's total power (integrated into ``spent_j``), the rows the
models computed (``observe_rows``), and from both each step's energy per inference above
idle (:class:`EnergyBook`). A step never run is explored downwards when every known step
is too heavy; a heavier step never run is guessed at ``UNKNOWN_HEAVIER`` × the next one.

Safety: a step is chosen only when holding it for the swap budget's interval and then
finishing on the lightest known step still completes the mission; when the current
step fails that test the step down is ``urgent`` (it spends the swap budget early).
Pure: time and readings are passed in; ``policy.py`` composes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edged.config.governor_energy import EnergyConfig
from edged.errors import InvalidArgument

#: weight of the newest interval in the rate and the idle power
EWMA = 0.3
#: each interval at a step keeps this much of that step's earlier sums (about 50 kept)
DECAY = 0.98
#: a heavier step never run is assumed to cost this many times the next lighter one
UNKNOWN_HEAVIER = 2.0
#: going heavier needs its energy per inference this far (relative) below the allowance
HEAVIER_MARGIN = 0.02
WH = 3600.0
#: the allowance plans the rest of the mission as if it were this share of its length, so
#: the reserve is spent down as the mission shrinks (a demand that ends early, an idle
#: tail, leaves less unspent); 0.7 ran the shipped solar camera trace out of energy
HEDGE = 0.8
#: ... while finishing on the lightest step is judged at this many times the mean rate
#: (the demand of the rest may exceed what the mission has shown so far)
FLOOR_RATE = 1.1


@dataclass
class _Account:
    """The budget in force: joules for the seconds from ``start``."""

    budget_j: float
    mission_s: float
    start: float | None = None
    spent_j: float = 0.0


class EnergyBook:
    """Each ladder step's energy per inference above idle, idle power, and the rate of
    inferences: now (an EWMA) and over the mission so far (the forecast of its rest)."""

    def __init__(self) -> None:
        #: per step: decayed sums of joules, seconds and rows while it computed
        self._sums: dict[int, list[float]] = {}
        self.idle_w: float | None = None
        self.rate: float | None = None  # rows per second (None: rows never reported)
        self.power_w: float | None = None  # the last interval's measured power
        self._rows = 0.0
        self._seconds = 0.0

    def learn(self, step: int, power_w: float, rows: int | None, dt: float) -> None:
        """One interval of ``dt`` seconds at ``step``: ``power_w`` drawn, ``rows`` computed
        (None: not counted; then a second counts as one inference)."""
        self.power_w = power_w
        if rows is not None:
            rate = rows / dt
            self.rate = rate if self.rate is None else self.rate + EWMA * (rate - self.rate)
            self._rows += rows
            self._seconds += dt
            if rows == 0:
                self.idle_w = power_w if self.idle_w is None else (
                    self.idle_w + EWMA * (power_w - self.idle_w))
                return
        sums = self._sums.setdefault(step, [0.0, 0.0, 0.0])
        for i, v in enumerate((power_w * dt, dt, dt if rows is None else float(rows))):
            sums[i] = DECAY * sums[i] + v

    @property
    def per_row_j(self) -> dict[int, float]:
        """Each step's joules per inference above idle (a ratio of sums, so an interval
        of few rows weighs little; idle as known now, so learning it later corrects
        what was measured before)."""
        idle = self.idle_w or 0.0
        return {j: max(e - idle * s, 0.0) / r for j, (e, s, r) in self._sums.items() if r > 0}

    def now_rate(self) -> float:
        return 1.0 if self.rate is None else self.rate

    def mean_rate(self) -> float:
        """Rows per second over everything seen: what the rest of the mission expects."""
        if self.rate is None:
            return 1.0
        return self._rows / self._seconds if self._seconds > 0 else self.rate

    def restart(self) -> None:
        """A new mission: the rate so far no longer forecasts it."""
        self._rows = self._seconds = 0.0


class EnergyPlan:
    """The budget, what is spent, and the ladder step the budget asks for."""

    def __init__(self, cfg: EnergyConfig, hold_s: float) -> None:
        self.hold_s = hold_s
        self.config = cfg
        self.by = "config"
        self.book = EnergyBook()
        self.account: _Account | None = None
        if cfg.enabled:
            assert cfg.budget_wh is not None and cfg.mission_s is not None
            self.account = _Account(cfg.budget_wh * WH, cfg.mission_s)
        self._last_t: float | None = None
        self._rows: int | None = None
        self.step = 0
        self.urgent = False
        self.why = ""
        self.allowed_w: float | None = None

    @property
    def active(self) -> bool:
        return self.account is not None

    def observe_rows(self, rows: int) -> None:
        """Rows computed since the last governor step (summed over models)."""
        self._rows = (self._rows or 0) + rows

    def set(self, budget_wh: float | None, mission_s: float | None, now: float) -> None:
        """An operator's new budget and/or mission, counted from ``now``: what is not
        given carries on from what is left of it."""
        a = self.account
        left_j = self.left_j() if a is not None else None
        left_s = self.mission_left_s(now) if a is not None else None
        budget_j = budget_wh * WH if budget_wh is not None else left_j
        mission = mission_s if mission_s is not None else left_s
        if budget_j is None or mission is None:
            raise InvalidArgument("no energy budget is in force yet: give both budget_wh "
                                  "and mission_s")
        self.account = _Account(budget_j, mission, start=now)
        self.by = "operator"
        if mission_s is not None:
            self.book.restart()

    def off(self) -> None:
        self.account = None
        self.by = "operator"
        self.step, self.urgent, self.why = 0, False, ""

    def carry_over(self, old: EnergyPlan) -> None:
        """Keep ``old``'s learning and, while the config's table is unchanged, its account
        (an operator's too): a reload must not refill the battery."""
        self.book = old.book
        if old.config == self.config:
            self.account, self.by = old.account, old.by

    # -- the account ----------------------------------------------------------------------
    def left_j(self) -> float:
        a = self.account
        assert a is not None
        return a.budget_j - a.spent_j

    def mission_left_s(self, now: float) -> float:
        a = self.account
        assert a is not None
        start = now if a.start is None else a.start
        return max(a.mission_s - (now - start), 0.0)

    def update(self, now: float, power_w: float | None, step: int, n_steps: int) -> int:
        """Count the interval that ended at ``now`` (spent at ``step``) and plan the next:
        the ladder step the budget asks for (0: no constraint)."""
        rows, self._rows = self._rows, None
        last, self._last_t = self._last_t, now
        a = self.account
        if a is None:
            return 0
        if a.start is None:
            a.start = now
        dt = 0.0 if last is None or now <= last else now - last
        if power_w is not None and dt > 0:
            a.spent_j += power_w * dt
            self.book.learn(step, power_w, rows, dt)
        self.step, self.urgent, self.why = self._plan(now, step, max(n_steps, 1))
        return self.step

    def _plan(self, now: float, current: int, n: int) -> tuple[int, bool, str]:
        """The heaviest step whose energy per inference fits what is left per inference
        the rest of the mission expects (at the mission's mean rate so far), if holding
        it for the swap interval still lets the lightest known step finish."""
        left, t_left = self.left_j(), self.mission_left_s(now)
        if t_left <= 0:
            self.allowed_w = None
            return 0, False, "mission over"
        book = self.book
        idle, mean, rate = book.idle_w or 0.0, book.mean_rate(), book.now_rate()
        self.allowed_w = max(left, 0.0) / t_left
        spare = left - idle * t_left  # what the inferences may spend, above idle
        per_row = spare / (mean * t_left * HEDGE) if mean > 0 else float("inf")
        preds = self._predictions(n)
        known = [e for e in preds if e is not None]
        hold = min(self.hold_s, t_left)
        floor_w = idle + mean * FLOOR_RATE * (min(known) if known else 0.0)

        def safe(e: float) -> bool:
            return left - (idle + rate * e) * hold >= floor_w * (t_left - hold)

        lightest_known = max((j for j, e in enumerate(preds) if e is not None), default=-1)
        want = n - 1
        for j, e in enumerate(preds):
            if e is None:
                if j > lightest_known:  # every known step is too heavy: explore lighter
                    want = j
                    break
                continue
            margin = 1.0 - HEAVIER_MARGIN if j < current else 1.0
            if e <= per_row * margin and safe(e):
                want = j
                break
        cur = preds[current] if current < n else None
        urgent = want > current and cur is not None and not safe(cur)
        why = (f"energy: {max(left, 0.0) / WH:.3f} Wh for {t_left:.0f} s allows "
               f"{self.allowed_w:.2f} W")
        if known and floor_w * t_left > left:
            why += f"; even the lightest known step ({floor_w:.2f} W) runs out first"
        if book.power_w is None:
            why += "; no power reading yet, so nothing is counted"
        return want, urgent, why

    def _predictions(self, n: int) -> list[float | None]:
        """Each step's energy per inference (None: never run, lighter than every known)."""
        preds: list[float | None] = [self.book.per_row_j.get(j) for j in range(n)]
        for j in range(n - 2, -1, -1):  # a heavier step never run: guessed from below
            nxt = preds[j + 1]
            if preds[j] is None and nxt is not None:
                preds[j] = nxt * UNKNOWN_HEAVIER
        return preds

    def snapshot(self, now: float | None) -> dict[str, Any] | None:
        """JSON-safe: budget, what is left, the mission, and when the budget runs out."""
        a = self.account
        if a is None:
            return None
        now = a.start if now is None else now
        if now is None:
            return {"budget_wh": round(a.budget_j / WH, 4), "mission_s": a.mission_s,
                    "by": self.by, "started": False}
        left, t_left = self.left_j(), self.mission_left_s(now)
        power = self.book.power_w
        empty_in = None if not power or power <= 0 else max(left, 0.0) / power
        return {
            "budget_wh": round(a.budget_j / WH, 4),
            "mission_s": round(a.mission_s, 1),
            "by": self.by,
            "spent_wh": round(a.spent_j / WH, 4),
            "left_wh": round(left / WH, 4),
            "left_pct": round(100.0 * left / a.budget_j, 1) if a.budget_j > 0 else 0.0,
            "mission_left_s": round(t_left, 1),
            "allowed_w": None if self.allowed_w is None else round(self.allowed_w, 3),
            "power_w": None if power is None else round(power, 3),
            # at the power drawn now, the budget is spent this many seconds from now
            "empty_in_s": None if empty_in is None else round(empty_in, 1),
            "projected_end": _projected_end(empty_in, t_left),
            "step": self.step,
            "urgent": self.urgent,
            "reason": self.why,
            "energy_per_inference_j": {str(k): round(v, 6) for k, v in
                                       sorted(self.book.per_row_j.items())},
            "idle_w": None if self.book.idle_w is None else round(self.book.idle_w, 3),
        }


def _projected_end(empty_in: float | None, t_left: float) -> str:
    """``mission`` when the budget outlasts the mission at the present draw, else
    ``budget`` (the plan steps down to avoid it); ``over`` when the mission ended."""
    if t_left <= 0:
        return "over"
    if empty_in is None or empty_in >= t_left:
        return "mission"
    return "budget"
