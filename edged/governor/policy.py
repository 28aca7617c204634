"""The governor: readings in, a level and its actions out.

Rules (docs/governor.md explains them for operators):

* Levels are ordered from the base (index 0, no actions) to the most severe.
* Escalation is immediate: a level is entered as soon as any of its triggers reaches
  its ``enter`` value (temperature, optionally forecast; window-averaged power;
  battery). Heat does not wait for a dwell timer.
* Relaxing is slow: the current level is left only when *all* its triggers are below
  their ``exit`` values (hysteresis) *and* the level has been held for ``dwell_s``; then
  the governor steps down one level, and the next step down needs another dwell. So a
  heavy variant is not swapped back in the moment the device cools by a degree.
* ``power_budget_w`` is a stepping controller: while the window-average power is over
  budget, go one level further every ``power_window_s``; relax (with dwell) once it is
  below ``power_budget_exit_w``.
* A counted temperature sensor that goes stale applies ``stale_policy``: ``hot`` (the
  most severe level: we are blind, so be safe), ``hold`` (use its last good value) or
  ``ignore``.
* ``pin(name)`` overrides everything until ``pin(None)``.
* The forecast (``forecast.py`` for ``first_order``) adds at most one level above what
  the measured temperature asks for, never the top one, and only after it persisted
  ``forecast_persist`` samples; relaxing needs the measurement and the forecast below
  ``exit_c``.
* The ladder step in the Decision moves only when the swap budget allows
  (``swap_budget.py``); with ``predict`` the step per model is the heavier of the
  level's and the predicted choice (``thermal_model.py``, fed by ``observe_load``).

``step`` is pure policy (no I/O) with time injected, so tests drive it with ramps.
"""

from __future__ import annotations

import fnmatch
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from edged.governor.config import GovernorConfig, LevelConfig, auto_levels, with_base
from edged.governor.forecast import FirstOrderForecast, Fit
from edged.governor.sensors import (
    TEMPERATURE_KINDS,
    THERMAL,
    Readings,
    Sensors,
    first_passive_trip_c,
)
from edged.governor.swap_budget import SwapBudget
from edged.governor.thermal_model import LoadBook, ThermalModel, choose_rung

log = logging.getLogger("edged.governor")


@dataclass(frozen=True)
class Decision:
    """What the daemon applies. ``changed`` is True when the level differs from the last one."""

    level: str
    index: int
    ladder_steps: int
    max_batch_size: int | None
    max_rate_hz: float | None
    shed_priority_above: int | None
    reason: str
    changed: bool
    pinned: bool = False
    #: hottest counted temperature / first temperature threshold (Android-style; 1.0 =
    #: at the first throttling threshold). None without temperatures or thresholds.
    headroom: float | None = None
    temperature_c: float | None = None
    #: total power averaged over power_window_s (what the budget and enter_w look at).
    power_w: float | None = None
    #: the ladder step the level (or prediction) asks for; ``ladder_steps`` differs from it
    #: while the swap budget holds the current step (``swap_hold_s`` seconds left).
    ladder_wanted: int | None = None
    swap_hold_s: float | None = None
    #: the first-order fit behind the forecast (forecast_model = "first_order").
    forecast: dict[str, Any] | None = None
    #: learned board response and per-model predicted equilibria (see thermal_model.py).
    prediction: dict[str, Any] | None = None
    #: per-model ladder step (level and predicted choice, after the swap budget); a model
    #: not listed follows ``ladder_steps``.
    variant_steps: dict[str, int] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "index": self.index,
            "ladder_steps": self.ladder_steps,
            "max_batch_size": self.max_batch_size,
            "max_rate_hz": self.max_rate_hz,
            "shed_priority_above": self.shed_priority_above,
            "reason": self.reason,
            "changed": self.changed,
            "pinned": self.pinned,
            "headroom": self.headroom,
            "temperature_c": self.temperature_c,
            "power_w": self.power_w,
            "ladder_wanted": self.ladder_wanted,
            "swap_hold_s": self.swap_hold_s,
            "forecast": self.forecast,
            "prediction": self.prediction,
            "variant_steps": self.variant_steps,
        }


@dataclass
class _Inputs:
    """What the triggers look at in one step."""

    temp: float | None = None  # hottest counted sensor (actual)
    temp_name: str = ""
    forecast: float | None = None  # temp + slope * forecast_s, only when rising
    slope: float = 0.0
    stale_hot: str | None = None  # name of a counted sensor that is stale under "hot"
    power: float | None = None  # window average
    battery: float | None = None  # ratio, only while on battery
    fit: Fit | None = None  # first-order forecast fit

    @property
    def effective_temp(self) -> float | None:
        if self.temp is None:
            return None
        return max(self.temp, self.forecast) if self.forecast is not None else self.temp


def linear_slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope (°C/s): a fit, not two points, so one noisy sample can't trigger."""
    n = len(points)
    mt = sum(p[0] for p in points) / n
    mv = sum(p[1] for p in points) / n
    den = sum((p[0] - mt) ** 2 for p in points)
    if den <= 0:
        return 0.0
    return sum((p[0] - mt) * (p[1] - mv) for p in points) / den


class Governor:
    """Sensors plus policy state. Thread-safe: ``sample`` in a worker, ``step``/``pin``/
    ``snapshot`` from anywhere."""

    def __init__(
        self,
        cfg: GovernorConfig,
        clock: Callable[[], float] = time.monotonic,
        sensors: Sensors | None = None,
    ) -> None:
        self.cfg = cfg
        self._clock = clock
        self.sensors = sensors or Sensors(cfg.sysfs_root, nvml=cfg.nvml, clock=clock)
        if cfg.levels is None:
            trip = first_passive_trip_c(self.sensors.trip_points(), self._counts_zone)
            self.trip_c: float | None = trip[1] if trip else None
            self.levels: tuple[LevelConfig, ...] = tuple(
                auto_levels(self.trip_c, cfg.auto_max_batch_size)
            )
            if trip:
                log.info("governor: auto levels from %s passive trip %.1f °C", trip[0], trip[1])
            else:
                log.info("governor: no passive trip point; auto levels use the fallback")
        else:
            self.trip_c = None
            self.levels = tuple(with_base(list(cfg.levels)))
        thresholds = [lv.enter_c for lv in self.levels if lv.enter_c is not None]
        self.first_threshold_c: float | None = min(thresholds) if thresholds else None
        self._lock = threading.RLock()
        self._sample_lock = threading.Lock()
        self._index = 0  # auto level
        self._since: float | None = None  # when the auto level was last changed
        self._pinned: int | None = None
        self._last: Decision = self._decision(0, "starting", changed=False, inputs=_Inputs())
        self._last_readings: Readings | None = None
        self._last_now: float | None = None
        self._seconds = dict.fromkeys((lv.name for lv in self.levels), 0.0)
        self._temps: deque[tuple[float, float]] = deque()
        self._power: deque[tuple[float, float]] = deque()
        self._power_since = 0.0
        self._last_good: dict[str, float] = {}
        self._budget_index = 0
        self._budget_since: float | None = None
        self._warned_no_sensor = False
        self._forecaster = (
            FirstOrderForecast(cfg.forecast_window_s, cfg.forecast_s, cfg.forecast_settle_s)
            if cfg.forecast_s > 0 and cfg.forecast_model == "first_order"
            else None
        )
        self._forecast_streak = 0
        self._swaps = SwapBudget(cfg.swap_min_interval_s)
        self._thermal = ThermalModel()
        self._book = LoadBook()
        self._ladder_len: dict[str, int] = {}
        self._rungs: dict[str, int] = {}  # last predicted rung per model
        top_enters = [lv.enter_c for lv in self.levels[1:] if lv.enter_c is not None]
        self._hard_c: float | None = max(top_enters) if top_enters else None

    # -- public API -------------------------------------------------------------------------
    @property
    def level_names(self) -> list[str]:
        return [lv.name for lv in self.levels]

    @property
    def decision(self) -> Decision:
        return self._last

    def sample(self) -> Readings:
        """Read all sensors (blocking file I/O; call from a thread). Never raises."""
        with self._sample_lock:  # Sensors keeps RAPL/staleness state: one sampler at a time
            readings = self.sensors.sample()
        with self._lock:
            self._last_readings = readings
        return readings

    def pin(self, level_name: str | None) -> None:
        """Hold a level by hand (operator action); None returns to automatic control."""
        with self._lock:
            if level_name is None:
                self._pinned = None
                return
            names = self.level_names
            if level_name not in names:
                raise ValueError(
                    f"unknown governor level {level_name!r}; levels: {', '.join(names)}"
                )
            self._pinned = names.index(level_name)

    def observe_load(
        self,
        model: str,
        variant_index: int,
        duty: float,
        now: float | None = None,
        ladder_len: int | None = None,
    ) -> None:
        """Report which variant of ``model`` is active and its compute duty cycle (0..1).

        The daemon calls this each governor tick (or on a swap); ``ladder_len`` is the
        model's number of variants. It feeds the per-variant power the prediction uses;
        ``now`` is accepted for symmetry with ``step`` (learning happens in ``step``).
        """
        del now
        with self._lock:
            self._book.observe(model, variant_index, duty)
            if ladder_len is not None:
                self._ladder_len[model] = ladder_len

    def step(self, readings: Readings, now: float | None = None) -> Decision:
        """One policy step on ``readings`` at time ``now`` (default: the governor clock)."""
        now = self._clock() if now is None else now
        with self._lock:
            if self._last_now is not None and now > self._last_now:
                self._seconds[self._last.level] += now - self._last_now
            self._last_now = now
            self._last_readings = readings
            if self._since is None:
                self._since = now
            inputs = self._inputs(readings, now)
            reason = self._advance(inputs, now)
            if self._pinned is not None:
                auto = self.levels[self._index].name
                index, reason = self._pinned, f"pinned by operator (automatic: {auto}: {reason})"
            else:
                index = self._index
            prediction = self._predict(inputs, readings, now)
            decision = self._decision(
                index, reason, changed=index != self._last.index, inputs=inputs,
                now=now, prediction=prediction,
            )
            if decision.changed:
                log.info("governor: %s -> %s: %s", self._last.level, decision.level, reason)
            self._last = decision
            return decision

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
                "pinned": None if self._pinned is None else self.levels[self._pinned].name,
                "automatic_level": self.levels[self._index].name,
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
            }

    def close(self) -> None:
        """Release sensor handles (NVML); the daemon calls this on reload and at stop."""
        self.sensors.close()
        log.info("governor closed: sensors released")

    # -- internals --------------------------------------------------------------------------
    def _counts_zone(self, name: str) -> bool:
        if any(fnmatch.fnmatchcase(name, g) for g in self.cfg.ignore_sensors):
            return False
        if self.cfg.sensors:
            return any(fnmatch.fnmatchcase(name, g) for g in self.cfg.sensors)
        return True

    def _counted(self, readings: Readings) -> list[str]:
        """Temperature sensors the policy looks at (present or not)."""
        temps = [n for n, k in readings.kinds.items() if k in TEMPERATURE_KINDS]
        temps = [
            n for n in temps if not any(fnmatch.fnmatchcase(n, g) for g in self.cfg.ignore_sensors)
        ]
        if self.cfg.sensors:
            return [n for n in temps if any(fnmatch.fnmatchcase(n, g) for g in self.cfg.sensors)]
        zones = [n for n in temps if readings.kinds[n] == THERMAL]
        return zones or temps  # no thermal zones at all (some x86): use hwmon/NVML

    def _inputs(self, r: Readings, now: float) -> _Inputs:
        cfg = self.cfg
        inp = _Inputs()
        best: tuple[float, str] | None = None
        for name in self._counted(r):
            value = r.temperatures.get(name)
            if value is not None:
                self._last_good[name] = value
            elif name in r.stale:
                if cfg.stale_policy == "hot" and inp.stale_hot is None:
                    inp.stale_hot = name
                elif cfg.stale_policy == "hold":
                    value = self._last_good.get(name)
            if value is not None and (best is None or value > best[0]):
                best = (value, name)
        if (
            best is None
            and self.first_threshold_c is not None
            and not self._warned_no_sensor
            and not inp.stale_hot
        ):
            self._warned_no_sensor = True
            wanted = ", ".join(cfg.sensors) if cfg.sensors else "any thermal zone"
            log.warning(
                "governor: no temperature sensor matches (%s); temperature levels idle", wanted
            )
        if best is not None:
            inp.temp, inp.temp_name = best
            if self._forecaster is not None:
                inp.fit = self._forecaster.update(now, best[0], r.total_power_w)
                if inp.fit is not None and inp.fit.forecast_c > best[0]:
                    inp.forecast, inp.slope = inp.fit.forecast_c, inp.fit.slope_c_per_s
            elif cfg.forecast_s > 0:
                self._temps.append((now, best[0]))
                while self._temps and self._temps[0][0] < now - cfg.forecast_window_s:
                    self._temps.popleft()
                pts = list(self._temps)
                if len(pts) >= 3 and pts[-1][0] - pts[0][0] >= cfg.forecast_window_s / 2:
                    inp.slope = linear_slope(pts)
                    if inp.slope > 0:
                        inp.forecast = inp.temp + inp.slope * cfg.forecast_s
        if r.total_power_w is not None:
            if not self._power:
                self._power_since = now
            self._power.append((now, r.total_power_w))
        while self._power and self._power[0][0] < now - cfg.power_window_s:
            self._power.popleft()
        # An average is only believed once power has been seen for half a window, so the
        # burst of loading models at start-up is not mistaken for sustained load.
        if self._power and now - self._power_since >= cfg.power_window_s / 2:
            inp.power = sum(p for _, p in self._power) / len(self._power)
        if r.battery_ratio is not None and r.battery_plugged is not True:
            inp.battery = r.battery_ratio
        return inp

    def _triggered(
        self, lv: LevelConfig, inp: _Inputs, *, holding: bool, forecast: bool = True
    ) -> str | None:
        """Why ``lv`` applies (enter values, or exit values when ``holding``), else None.

        ``forecast=False`` looks at the measured temperature only.
        """
        t = inp.effective_temp if forecast else inp.temp
        if lv.enter_c is not None and t is not None:
            limit = lv.exit_c if holding and lv.exit_c is not None else lv.enter_c
            if t >= limit:
                verb = "hold" if holding else "enter"
                if inp.forecast is not None and inp.temp is not None and inp.temp < limit:
                    curve = ""
                    if inp.fit is not None:
                        eq = inp.fit.equilibrium_c
                        curve = (f" (fit τ {inp.fit.tau_s:.0f} s, equilibrium "
                                 f"{'—' if eq is None else f'{eq:.1f} °C'})")
                    return (
                        f"{inp.temp_name} {inp.temp:.1f} °C rising {inp.slope:.2f} °C/s → "
                        f"{inp.forecast:.1f} °C in {self.cfg.forecast_s:g} s{curve} ≥ "
                        f"{limit:.1f} ({verb} {lv.name}, forecast)"
                    )
                return f"{inp.temp_name} {inp.temp:.1f} °C ≥ {limit:.1f} ({verb} {lv.name})"
        if lv.enter_w is not None and inp.power is not None:
            limit = lv.exit_w if holding and lv.exit_w is not None else lv.enter_w
            if inp.power >= limit:
                verb = "hold" if holding else "enter"
                return (
                    f"power {inp.power:.1f} W (avg {self.cfg.power_window_s:g} s) ≥ "
                    f"{limit:.1f} ({verb} {lv.name})"
                )
        if lv.battery_below is not None and inp.battery is not None:
            limit = lv.battery_below + (self.cfg.battery_hysteresis if holding else 0.0)
            if inp.battery < limit:
                verb = "hold" if holding else "enter"
                return f"battery {inp.battery:.0%} < {limit:.0%} on battery ({verb} {lv.name})"
        return None

    def _budget(self, inp: _Inputs, now: float) -> str | None:
        """Advance the power-budget controller; its index is a floor for the level."""
        cfg = self.cfg
        if cfg.power_budget_w is None or inp.power is None:
            return None
        top = len(self.levels) - 1
        waited = self._budget_since is None or now - self._budget_since >= cfg.power_window_s
        exit_w = cfg.power_budget_exit_w
        if exit_w is None:
            exit_w = 0.9 * cfg.power_budget_w
        relax_after = max(cfg.dwell_s, cfg.power_window_s)
        if inp.power > cfg.power_budget_w:
            if waited and max(self._budget_index, self._index) < top:
                self._budget_index = max(self._budget_index, self._index) + 1
                self._budget_since = now
        elif (
            inp.power < exit_w
            and self._budget_index > 0
            and (self._budget_since is None or now - self._budget_since >= relax_after)
        ):
            self._budget_index -= 1
            self._budget_since = now
        if self._budget_index == 0:
            return None
        return (
            f"power {inp.power:.1f} W (avg {cfg.power_window_s:g} s) vs budget "
            f"{cfg.power_budget_w:.1f} W (budget level {self.levels[self._budget_index].name})"
        )

    def _advance(self, inp: _Inputs, now: float) -> str:
        """Move the automatic level; returns the reason text for the resulting level."""
        top = len(self.levels) - 1
        # Escalation: the most severe level any measured trigger asks for, at once; the
        # forecast adds at most one level, never the top one, once it has persisted.
        target, why = 0, ""
        for i in range(1, len(self.levels)):
            text = self._triggered(self.levels[i], inp, holding=False, forecast=False)
            if text is not None:
                target, why = i, text
        target, why = self._forecast_target(inp, target, why)
        budget_why = self._budget(inp, now)
        if budget_why is not None and self._budget_index > target:
            target, why = self._budget_index, budget_why
        if inp.stale_hot is not None:
            # "Hot" means the most severe *temperature* level: a battery- or power-only
            # level further down the list says nothing about heat.
            hot = max((i for i, lv in enumerate(self.levels) if lv.enter_c is not None),
                      default=top)
            if hot > target:
                target, why = hot, f"sensor {inp.stale_hot} stale (stale_policy=hot)"
        if target > self._index:
            self._index, self._since = target, now
            return why
        if self._index == 0:
            return why or self._calm(inp)
        if target == self._index:
            return why  # the current level's enter condition still holds
        # Relaxing: all of this level's triggers below exit, held for dwell_s, one step.
        cur = self.levels[self._index]
        floor = max(target, self._budget_index)
        hold = self._triggered(cur, inp, holding=True)
        if hold is not None or self._index <= floor:
            return hold or why or budget_why or f"at {cur.name}"
        assert self._since is not None
        remaining = self.cfg.dwell_s - (now - self._since)
        if remaining > 0:
            return f"{self._calm(inp)}; leaving {cur.name} after dwell ({remaining:.1f} s left)"
        self._index -= 1
        self._since = now
        return f"{self._calm(inp)} (exit {cur.name} after {self.cfg.dwell_s:g} s dwell)"

    def _forecast_target(self, inp: _Inputs, target: int, why: str) -> tuple[int, str]:
        if inp.forecast is None:
            self._forecast_streak = 0
            return target, why
        top = len(self.levels) - 1
        cap = min(target + 1, top - 1) if top >= 2 else top
        wanted, text = target, why
        for i in range(target + 1, cap + 1):
            t = self._triggered(self.levels[i], inp, holding=False)
            if t is not None:
                wanted, text = i, t
        if wanted <= max(target, self._index):
            self._forecast_streak = 0
            return target, why
        self._forecast_streak += 1
        if self._forecast_streak < self.cfg.forecast_persist:
            return target, why
        return wanted, text

    def _calm(self, inp: _Inputs) -> str:
        parts = []
        if inp.temp is not None:
            parts.append(f"{inp.temp_name} {inp.temp:.1f} °C")
        if inp.power is not None:
            parts.append(f"{inp.power:.1f} W")
        if inp.battery is not None:
            parts.append(f"battery {inp.battery:.0%}")
        return "below thresholds: " + (", ".join(parts) if parts else "no readings")

    def _predict(self, inp: _Inputs, r: Readings, now: float) -> dict[str, Any] | None:
        """Learn the board and variant powers from this sample; predict equilibria."""
        book = self._book
        rails = r.total_power_w is not None
        book.learn(r.total_power_w)
        power = r.total_power_w if rails else (book.duty_total() if book.active else None)
        if inp.temp is None or power is None:
            return None
        self._thermal.add(now, inp.temp, power, "W" if rails else "duty")
        params = self._thermal.params()
        if params is None:
            return None
        limit = self.first_threshold_c
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

    def _ladder(
        self, want: int, inputs: _Inputs, now: float | None, prediction: dict[str, Any] | None
    ) -> tuple[int, float | None, dict[str, int] | None, int]:
        """Apply the predicted choice and the swap budget: (steps, hold s, per model, wanted)."""
        if now is None:
            return want, None, None, want
        force = (
            self._pinned is not None
            or inputs.stale_hot is not None
            or (self._hard_c is not None and inputs.temp is not None
                and inputs.temp >= self._hard_c)
        )
        if not (self.cfg.predict and self._book.active):
            steps, left = self._swaps.allow("*", want, now, force=force)
            return steps, (left if left > 0 else None), None, want
        # Predicted choice: each reporting model keeps its last predicted rung while the
        # model is (re)learning, and is budgeted on its own; the global step is their max.
        predicted = (prediction or {}).get("models", {})
        per_model: dict[str, int] = {}
        lefts: list[float] = []
        for name in sorted(self._book.active):
            if name in predicted:
                self._rungs[name] = predicted[name]["rung"]
            wanted = max(want, self._rungs.get(name, 0))
            per_model[name], left = self._swaps.allow(name, wanted, now, force=force)
            lefts.append(left)
        wanted = max(want, *self._rungs.values()) if self._rungs else want
        hold = max(lefts) if lefts and max(lefts) > 0 else None
        return max(per_model.values()), hold, per_model, wanted

    def _decision(
        self,
        index: int,
        reason: str,
        *,
        changed: bool,
        inputs: _Inputs,
        now: float | None = None,
        prediction: dict[str, Any] | None = None,
    ) -> Decision:
        lv = self.levels[index]
        headroom = None
        if inputs.temp is not None and self.first_threshold_c:
            headroom = inputs.temp / self.first_threshold_c
        steps, hold, per_model, wanted = self._ladder(lv.ladder_steps, inputs, now, prediction)
        return Decision(
            level=lv.name,
            index=index,
            ladder_steps=steps,
            max_batch_size=lv.max_batch_size,
            max_rate_hz=lv.max_rate_hz,
            shed_priority_above=lv.shed_priority_above,
            reason=reason,
            changed=changed,
            pinned=self._pinned is not None,
            headroom=None if headroom is None or math.isnan(headroom) else headroom,
            temperature_c=inputs.temp,
            power_w=inputs.power,
            ladder_wanted=wanted,
            swap_hold_s=hold,
            forecast=inputs.fit.to_dict() if inputs.fit is not None else None,
            prediction=prediction,
            variant_steps=per_model,
        )


def _level_dict(lv: LevelConfig) -> dict[str, Any]:
    return {k: v for k, v in vars(lv).items() if v is not None}
