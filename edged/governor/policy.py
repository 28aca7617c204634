"""The governor: readings in, a level and its actions out.

Rules (docs/governor.md explains them for operators); each part is its own object:

* levels and hysteresis (``levels.py``): escalation at once, relaxing one level per
  ``dwell_s`` once every trigger of the level is below its ``exit`` value;
* what the triggers look at (``triggers.py``): counted sensors, ``stale_policy``
  (``hot``: the most severe temperature level, we are blind; ``hold``: the last good
  value; ``ignore``), the window-average power, the battery while unplugged;
* the forecast (``forecast.py``) adds at most one level above what the measured
  temperature asks for, never the top one, and only after it persisted
  ``forecast_persist`` samples; relaxing needs measurement and forecast below ``exit_c``;
* the power budget (``power_budget.py``): a stepping controller whose level is a floor;
* the operator's pin (``pins.py``) overrides everything until released;
* the ladder step moves only when the swap budget allows; with ``predict`` the step per
  model is the lighter of the level's and the predicted choice (``prediction.py``); with
  ``policy = "mpc"`` (the default with the auto levels) it is the planner's (``mpc.py``);
* an energy budget over a mission (``energy.py``) asks for a ladder step of its own; the
  lighter of it and the level's applies.

``step`` is pure policy (no I/O: the sampler in ``sensors/`` reads, the daemon's
governing module calls both) with time injected, so tests drive it with ramps.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from edged.config.governor import FALLBACK_TRIP_C, GovernorConfig, LevelConfig
from edged.governor.decision import Decision
from edged.governor.energy import EnergyPlan
from edged.governor.forecast import ForecastGate
from edged.governor.levels import Hysteresis, Levels
from edged.governor.pins import LevelPin
from edged.governor.power_budget import PowerBudget
from edged.governor.prediction import Predictor
from edged.governor.sensors import Readings, TripPoint
from edged.governor.triggers import InputReader, Inputs, SensorChoice

log = logging.getLogger("edged.governor")

class Governor:
    """Policy state. Thread-safe: ``step``/``pin``/``observe_load``/``snapshot`` from anywhere.

    ``trip_points`` (``Sensors.trip_points()``) are only read for ``levels = "auto"``;
    without them the auto levels use the fallback trip. ``energy_from``: the energy plan
    of the governor this one replaces (on reload).
    """

    def __init__(
        self,
        cfg: GovernorConfig,
        clock: Callable[[], float] = time.monotonic,
        trip_points: dict[str, list[TripPoint]] | None = None,
        energy_from: EnergyPlan | None = None,
    ) -> None:
        self.cfg = cfg
        self._clock = clock
        choice = SensorChoice(cfg)
        self._levels = Levels(cfg, trip_points or {}, choice.counts)
        self._lock = threading.RLock()
        self._auto = Hysteresis(self._levels, cfg.dwell_s)
        self._pin = LevelPin(self._levels.names)
        self._inputs = InputReader(cfg, choice, self._levels.first_threshold_c)
        self._forecast_gate = ForecastGate(cfg.forecast_persist)
        self._budget = PowerBudget(cfg.power_budget_w, cfg.power_budget_exit_w,
                                   cfg.power_window_s, cfg.dwell_s)
        #: what ``mpc`` keeps the temperature below, and where a swap spends its budget early
        self.limit_c = (cfg.limit_c if cfg.limit_c is not None
                        else self._levels.trip_c or FALLBACK_TRIP_C)
        self._predictor = Predictor(cfg.chosen_policy, cfg.swap_min_interval_s, self.limit_c)
        self.energy = EnergyPlan(cfg.energy, cfg.swap_min_interval_s)
        if energy_from is not None:  # a reload does not refill the energy budget
            self.energy.carry_over(energy_from)
        self._ladder_len = 1 + max(lv.ladder_steps for lv in self._levels.levels)
        self._last: Decision = self._decision(0, "starting", changed=False, inputs=Inputs())
        self._last_readings: Readings | None = None
        self._last_now: float | None = None
        self._seconds = dict.fromkeys(self._levels.names, 0.0)

    @property
    def levels(self) -> tuple[LevelConfig, ...]:
        return self._levels.levels

    @property
    def level_names(self) -> list[str]:
        return self._levels.names

    @property
    def trip_c(self) -> float | None:
        """The passive trip the auto levels came from (None: configured or fallback)."""
        return self._levels.trip_c

    @property
    def first_threshold_c(self) -> float | None:
        return self._levels.first_threshold_c

    @property
    def decision(self) -> Decision:
        return self._last

    def pin(self, level_name: str | None) -> None:
        """Hold a level by hand (operator action); None returns to automatic control."""
        with self._lock:
            self._pin.set(level_name)

    def observe_load(
        self,
        model: str,
        variant_index: int,
        duty: float,
        now: float | None = None,
        ladder_len: int | None = None,
        rows: int | None = None,
    ) -> None:
        """Report which variant of ``model`` is active and its compute duty cycle (0..1).

        The daemon calls this each governor tick (or on a swap); ``ladder_len`` is the
        model's number of variants. It feeds the per-variant power the prediction uses;
        ``now`` is accepted for symmetry with ``step`` (learning happens in ``step``);
        ``rows`` computed since the last report feed the energy budget's cost per step.
        """
        del now
        with self._lock:
            self._predictor.observe(model, variant_index, duty, ladder_len)
            if ladder_len is not None:
                self._ladder_len = max(self._ladder_len, ladder_len)
            if rows is not None:
                self.energy.observe_rows(rows)

    def step(self, readings: Readings, now: float | None = None) -> Decision:
        """One policy step on ``readings`` at time ``now`` (default: the governor clock)."""
        now = self._clock() if now is None else now
        with self._lock:
            if self._last_now is not None and now > self._last_now:
                self._seconds[self._last.level] += now - self._last_now
            self._last_now = now
            self._last_readings = readings
            inputs = self._inputs.read(readings, now)
            reason = self._advance(inputs, now)  # moves the automatic level first
            index, reason = self._pin.apply(self._auto.index, reason)
            self.energy.update(now, readings.total_power_w, self._last.ladder_steps,
                               self._ladder_len)
            prediction = self._predictor.predict(inputs.temp, readings.total_power_w, now,
                                                 self.first_threshold_c)
            decision = self._decision(
                index, reason, changed=index != self._last.index, inputs=inputs,
                now=now, prediction=prediction,
            )
            if decision.changed:
                log.info("governor: %s -> %s: %s", self._last.level, decision.level, reason)
            self._last = decision
            return decision

    def set_energy(self, budget_wh: float | None, mission_s: float | None,
                   off: bool = False) -> dict[str, Any] | None:
        """An operator's energy budget and mission from now (``off``: no budget); the
        budget then in force (``InvalidArgument`` when nothing would be)."""
        with self._lock:
            now = self._clock()
            if off:
                self.energy.off()
            else:
                self.energy.set(budget_wh, mission_s, now)
            return self.energy.snapshot(now)

    def snapshot(self) -> dict[str, Any]:
        """JSON-safe state for ``edged status`` and the health reply."""
        with self._lock:
            d = self._last
            return {
                "level": d.level,
                "index": d.index,
                "reason": d.reason,
                # The pinned level's name (None = automatic): truthy, and pin(snapshot["pinned"])
                # restores it, e.g. across a config reload.
                "pinned": self._pin.name,
                "automatic_level": self.levels[self._auto.index].name,
                "headroom": d.headroom,
                "temperature_c": d.temperature_c,
                "power_w": d.power_w,
                "forecast": d.forecast,
                "prediction": d.prediction,
                "swap_budget": {"ladder_wanted": d.ladder_wanted, "hold_s": d.swap_hold_s,
                                "min_interval_s": self.cfg.swap_min_interval_s},
                "actions": {
                    "ladder_steps": d.ladder_steps,
                    "max_batch_size": d.max_batch_size,
                    "max_rate_hz": d.max_rate_hz,
                    "shed_priority_above": d.shed_priority_above,
                },
                "levels": [_level_dict(lv) for lv in self.levels],
                "trip_c": self.trip_c,
                "seconds_per_level": dict(self._seconds),
                "readings": self._last_readings.to_dict() if self._last_readings else None,
                "energy": self.energy.snapshot(self._last_now),
            }

    def _advance(self, inp: Inputs, now: float) -> str:
        """Move the automatic level; returns the reason text for the resulting level."""
        levels = self._levels
        target, why = levels.measured(inp)
        target, why = self._forecast_target(inp, target, why)
        budget_why = ""
        if self._budget.update(inp.power, self._auto.index, levels.top, now):
            assert inp.power is not None and self._budget.budget_w is not None
            budget_why = (
                f"power {inp.power:.1f} W (avg {self.cfg.power_window_s:g} s) vs budget "
                f"{self._budget.budget_w:.1f} W "
                f"(budget level {self.levels[self._budget.index].name})"
            )
            if self._budget.index > target:
                target, why = self._budget.index, budget_why
        if inp.stale_hot is not None and levels.hottest > target:
            target, why = levels.hottest, f"sensor {inp.stale_hot} stale (stale_policy=hot)"
        return self._auto.move(target, why, self._budget.index, budget_why, inp, now)

    def _forecast_target(self, inp: Inputs, target: int, why: str) -> tuple[int, str]:
        """The forecast's level once it has persisted; else the measured ``target``."""
        if inp.forecast is None:
            self._forecast_gate.reset()
            return target, why
        wanted, text = self._levels.forecast_wants(inp, target, why)
        if wanted <= max(target, self._auto.index):
            self._forecast_gate.reset()
            return target, why
        if not self._forecast_gate.passes():
            return target, why
        return wanted, text

    def _decision(
        self,
        index: int,
        reason: str,
        *,
        changed: bool,
        inputs: Inputs,
        now: float | None = None,
        prediction: dict[str, Any] | None = None,
    ) -> Decision:
        lv = self.levels[index]
        headroom = None
        if inputs.temp is not None and self.first_threshold_c:
            headroom = inputs.temp / self.first_threshold_c
        want = lv.ladder_steps
        # what even mpc's plan may not undercut: a pin, a stale sensor under "hot" (blind,
        # act safe) and the energy budget's step
        floor = want if self._pin.index is not None or inputs.stale_hot is not None else 0
        energy = self.energy if now is not None and self.energy.active else None
        if energy is not None and energy.step > want and self._pin.index is None:
            want, floor, reason = energy.step, energy.step, f"{reason}; {energy.why}"
        steps, hold, per_model, wanted = want, None, None, want
        if now is not None:  # the "starting" decision spends no swap budget
            # While mpc plans, only the limit itself spends the swap budget early (the
            # plan runs above the top level's enter value by design); until then, as levels.
            hard_c = self.limit_c if self._predictor.planning else self._levels.hard_c
            force = (self._pin.index is not None or inputs.stale_hot is not None
                     or (hard_c is not None and inputs.temp is not None
                         and inputs.temp >= hard_c)
                     or (energy is not None and energy.urgent))
            steps, hold, per_model, wanted = self._predictor.ladder(want, now, force,
                                                                    prediction, floor)
        return Decision(
            level=lv.name,
            index=index,
            ladder_steps=steps,
            max_batch_size=lv.max_batch_size,
            max_rate_hz=lv.max_rate_hz,
            shed_priority_above=lv.shed_priority_above,
            reason=reason,
            changed=changed,
            pinned=self._pin.index is not None,
            headroom=None if headroom is None or math.isnan(headroom) else headroom,
            temperature_c=inputs.temp,
            power_w=inputs.power,
            ladder_wanted=wanted,
            swap_hold_s=hold,
            forecast=inputs.fit.to_dict() if inputs.fit is not None else None,
            prediction=prediction,
            variant_steps=per_model,
            energy=None if energy is None else energy.snapshot(now),
        )


def _level_dict(lv: LevelConfig) -> dict[str, Any]:
    return {k: v for k, v in vars(lv).items() if v is not None}
