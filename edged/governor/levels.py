"""The level ladder: which level each trigger asks for, and hysteresis with dwell.

* Levels are ordered from the base (index 0, no actions) to the most severe.
* Escalation is immediate: a level is entered as soon as any of its triggers reaches
  its ``enter`` value (temperature, optionally forecast; window-averaged power;
  battery). Heat does not wait for a dwell timer.
* Relaxing is slow: the current level is left only when *all* its triggers are below
  their ``exit`` values *and* the level has been held for ``dwell_s``; then it steps
  down one level, and the next step down needs another dwell.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from edged.config.governor import GovernorConfig, LevelConfig, auto_levels, with_base
from edged.governor.sensors import TripPoint, first_passive_trip_c
from edged.governor.triggers import Inputs

log = logging.getLogger("edged.governor")


class Levels:
    """The configured (or auto) levels and the thresholds derived from them."""

    def __init__(
        self,
        cfg: GovernorConfig,
        trip_points: dict[str, list[TripPoint]],
        counts: Callable[[str], bool],
    ) -> None:
        self.cfg = cfg
        self.trip_c: float | None = None
        if cfg.levels is None:
            trip = first_passive_trip_c(trip_points, counts)
            self.trip_c = trip[1] if trip else None
            self.levels: tuple[LevelConfig, ...] = tuple(
                auto_levels(self.trip_c, cfg.auto_max_batch_size,
                            mpc=cfg.chosen_policy == "mpc"))
            if trip:
                log.info("governor: auto levels from %s passive trip %.1f °C", trip[0], trip[1])
            else:
                log.info("governor: no passive trip point; auto levels use the fallback")
        else:
            self.levels = tuple(with_base(list(cfg.levels)))
        thresholds = [lv.enter_c for lv in self.levels if lv.enter_c is not None]
        self.first_threshold_c: float | None = min(thresholds) if thresholds else None
        top_enters = [lv.enter_c for lv in self.levels[1:] if lv.enter_c is not None]
        #: the top temperature level's enter value: there a swap may spend its budget early
        self.hard_c: float | None = max(top_enters) if top_enters else None
        self.top = len(self.levels) - 1
        #: the most severe *temperature* level (a battery- or power-only level further
        #: down the list says nothing about heat): where a stale sensor under "hot" goes.
        self.hottest = max((i for i, lv in enumerate(self.levels) if lv.enter_c is not None),
                           default=self.top)

    @property
    def names(self) -> list[str]:
        return [lv.name for lv in self.levels]

    def triggered(
        self, index: int, inp: Inputs, *, holding: bool, forecast: bool = True
    ) -> str | None:
        """Why level ``index`` applies (enter values, or exit values when ``holding``).

        ``forecast=False`` looks at the measured temperature only.
        """
        lv, cfg = self.levels[index], self.cfg
        verb = "hold" if holding else "enter"
        t = inp.effective_temp if forecast else inp.temp
        if lv.enter_c is not None and t is not None:
            limit = lv.exit_c if holding and lv.exit_c is not None else lv.enter_c
            if t >= limit:
                if inp.forecast is not None and inp.temp is not None and inp.temp < limit:
                    return _forecast_text(inp, limit, cfg.forecast_s, f"{verb} {lv.name}")
                return f"{inp.temp_name} {inp.temp:.1f} °C ≥ {limit:.1f} ({verb} {lv.name})"
        if lv.enter_w is not None and inp.power is not None:
            limit = lv.exit_w if holding and lv.exit_w is not None else lv.enter_w
            if inp.power >= limit:
                return (f"power {inp.power:.1f} W (avg {cfg.power_window_s:g} s) ≥ "
                        f"{limit:.1f} ({verb} {lv.name})")
        if lv.battery_below is not None and inp.battery is not None:
            limit = lv.battery_below + (cfg.battery_hysteresis if holding else 0.0)
            if inp.battery < limit:
                return f"battery {inp.battery:.0%} < {limit:.0%} on battery ({verb} {lv.name})"
        return None

    def measured(self, inp: Inputs) -> tuple[int, str]:
        """The most severe level a measured trigger asks for (0, "" if none) and why."""
        target, why = 0, ""
        for i in range(1, len(self.levels)):
            text = self.triggered(i, inp, holding=False, forecast=False)
            if text is not None:
                target, why = i, text
        return target, why

    def forecast_wants(self, inp: Inputs, target: int, why: str) -> tuple[int, str]:
        """What the forecast adds to ``target``: at most one level, never the top one."""
        top = self.top
        cap = min(target + 1, top - 1) if top >= 2 else top
        wanted, text = target, why
        for i in range(target + 1, cap + 1):
            t = self.triggered(i, inp, holding=False)
            if t is not None:
                wanted, text = i, t
        return wanted, text


def _forecast_text(inp: Inputs, limit: float, horizon_s: float, action: str) -> str:
    assert inp.temp is not None and inp.forecast is not None
    curve = ""
    if inp.fit is not None:
        eq = inp.fit.equilibrium_c
        curve = (f" (fit τ {inp.fit.tau_s:.0f} s, equilibrium "
                 f"{'—' if eq is None else f'{eq:.1f} °C'})")
    return (
        f"{inp.temp_name} {inp.temp:.1f} °C rising {inp.slope:.2f} °C/s → "
        f"{inp.forecast:.1f} °C in {horizon_s:g} s{curve} ≥ {limit:.1f} ({action}, forecast)"
    )


class Hysteresis:
    """The automatic level: up at once to any target, down one level per ``dwell_s``."""

    def __init__(self, levels: Levels, dwell_s: float) -> None:
        self.levels = levels
        self.dwell_s = dwell_s
        self.index = 0
        self.since: float | None = None  # when the level was last changed

    def move(self, target: int, why: str, floor: int, fallback: str, inp: Inputs,
             now: float) -> str:
        """Go to ``target`` (not below ``floor`` while relaxing); the resulting reason.

        ``fallback`` explains a hold when neither ``why`` nor the level's own exit
        values do (the power budget's reason).
        """
        if self.since is None:
            self.since = now
        if target > self.index:
            self.index, self.since = target, now
            return why
        if self.index == 0:
            return why or inp.calm()
        if target == self.index:
            return why  # the current level's enter condition still holds
        cur = self.levels.levels[self.index]
        hold = self.levels.triggered(self.index, inp, holding=True)
        if hold is not None or self.index <= max(target, floor):
            return hold or why or fallback or f"at {cur.name}"
        remaining = self.dwell_s - (now - self.since)
        if remaining > 0:
            return f"{inp.calm()}; leaving {cur.name} after dwell ({remaining:.1f} s left)"
        self.index -= 1
        self.since = now
        return f"{inp.calm()} (exit {cur.name} after {self.dwell_s:g} s dwell)"
