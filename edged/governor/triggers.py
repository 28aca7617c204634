"""From one :class:`Readings` to what the level triggers look at.

Which temperature sensors count (``sensors`` / ``ignore_sensors`` globs; thermal zones
first, hwmon and NVML only on a board without zones), what a stale one means under
``stale_policy``, the forecast on the hottest one, the window-average power and the
battery while unplugged. State across samples: last good values (``hold``), the
forecast's history and the power window.
"""

from __future__ import annotations

import fnmatch
import logging
from dataclasses import dataclass

from edged.config.governor import GovernorConfig
from edged.governor.forecast import FirstOrderForecast, Fit, LinearForecast
from edged.governor.power_budget import PowerWindow
from edged.governor.sensors import TEMPERATURE_KINDS, THERMAL, Readings

log = logging.getLogger("edged.governor")


@dataclass
class Inputs:
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

    def calm(self) -> str:
        """The reason text while no trigger applies."""
        parts = []
        if self.temp is not None:
            parts.append(f"{self.temp_name} {self.temp:.1f} °C")
        if self.power is not None:
            parts.append(f"{self.power:.1f} W")
        if self.battery is not None:
            parts.append(f"battery {self.battery:.0%}")
        return "below thresholds: " + (", ".join(parts) if parts else "no readings")


class SensorChoice:
    """Which sensors the policy counts, from the ``sensors`` / ``ignore_sensors`` globs."""

    def __init__(self, cfg: GovernorConfig) -> None:
        self.wanted = cfg.sensors
        self.ignored = cfg.ignore_sensors

    def counts(self, name: str) -> bool:
        if any(fnmatch.fnmatchcase(name, g) for g in self.ignored):
            return False
        return not self.wanted or any(fnmatch.fnmatchcase(name, g) for g in self.wanted)

    def counted(self, readings: Readings) -> list[str]:
        """Temperature sensors the policy looks at (present or not)."""
        temps = [n for n, k in readings.kinds.items() if k in TEMPERATURE_KINDS]
        temps = [n for n in temps if self.counts(n)]
        if self.wanted:
            return temps
        zones = [n for n in temps if readings.kinds[n] == THERMAL]
        return zones or temps  # no thermal zones at all (some x86): use hwmon/NVML


class InputReader:
    """``read(readings, now)`` per step -> :class:`Inputs`; keeps the cross-sample state."""

    def __init__(
        self, cfg: GovernorConfig, choice: SensorChoice, first_threshold_c: float | None
    ) -> None:
        self.cfg = cfg
        self.choice = choice
        self.first_threshold_c = first_threshold_c
        self._last_good: dict[str, float] = {}
        self._warned_no_sensor = False
        self._first_order = (
            FirstOrderForecast(cfg.forecast_window_s, cfg.forecast_s, cfg.forecast_settle_s)
            if cfg.forecast_s > 0 and cfg.forecast_model == "first_order"
            else None
        )
        self._linear = (
            LinearForecast(cfg.forecast_window_s)
            if cfg.forecast_s > 0 and self._first_order is None
            else None
        )
        self._power = PowerWindow(cfg.power_window_s)

    def read(self, r: Readings, now: float) -> Inputs:
        inp = Inputs()
        best = self._hottest(r, inp)
        if best is not None:
            inp.temp, inp.temp_name = best
            self._forecast(inp, now, best[0], r.total_power_w)
        inp.power = self._power.average(now, r.total_power_w)
        if r.battery_ratio is not None and r.battery_plugged is not True:
            inp.battery = r.battery_ratio
        return inp

    def _hottest(self, r: Readings, inp: Inputs) -> tuple[float, str] | None:
        """(°C, name) of the hottest counted sensor after ``stale_policy``; sets stale_hot."""
        policy = self.cfg.stale_policy
        best: tuple[float, str] | None = None
        for name in self.choice.counted(r):
            value = r.temperatures.get(name)
            if value is not None:
                self._last_good[name] = value
            elif name in r.stale:
                if policy == "hot" and inp.stale_hot is None:
                    inp.stale_hot = name
                elif policy == "hold":
                    value = self._last_good.get(name)
            if value is not None and (best is None or value > best[0]):
                best = (value, name)
        if (best is None and self.first_threshold_c is not None
                and not self._warned_no_sensor and not inp.stale_hot):
            self._warned_no_sensor = True
            wanted = ", ".join(self.cfg.sensors) if self.cfg.sensors else "any thermal zone"
            log.warning(
                "governor: no temperature sensor matches (%s); temperature levels idle", wanted
            )
        return best

    def _forecast(self, inp: Inputs, now: float, temp: float, power: float | None) -> None:
        if self._first_order is not None:
            inp.fit = self._first_order.update(now, temp, power)
            if inp.fit is not None and inp.fit.forecast_c > temp:
                inp.forecast, inp.slope = inp.fit.forecast_c, inp.fit.slope_c_per_s
        elif self._linear is not None:
            slope = self._linear.update(now, temp)
            if slope is not None:
                inp.slope = slope
                if slope > 0:
                    inp.forecast = temp + slope * self.cfg.forecast_s
