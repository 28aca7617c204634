"""Prometheus metrics for sensors and governor decisions (base units, ``edged_`` prefix).

Why not every rail: node_exporter's hwmon collector already exports INA3221 voltage and
current on JetPack 5+ and thermal zones/hwmon temperatures; what it lacks is rail
*power* (INA3221 has no ``power*_input``), the JetPack 4 IIO rails, RAPL watts, the Pi's
``get_throttled`` flags and edged's own decisions. Temperatures are exported anyway,
under the names the policy uses, so a dashboard can show exactly what the governor saw.
A sensor with no value in a sample has its gauge removed (no frozen last value) and
``edged_sensor_stale`` says why.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge

from edged.governor.decision import Decision
from edged.governor.sensors import Readings


class GovernorMetrics:
    def __init__(self, registry: CollectorRegistry, levels: Iterable[str] = ()) -> None:
        self.temperature = Gauge(
            "edged_sensor_temperature_celsius",
            "Temperature of each sensor the governor reads (thermal zone type, hwmon chip/label).",
            ["sensor"],
            registry=registry,
        )
        self.power = Gauge(
            "edged_sensor_power_watts",
            "Power per rail not exported by node_exporter (INA3221 V*I, JetPack 4 IIO, RAPL), "
            'plus rail="total".',
            ["rail"],
            registry=registry,
        )
        self.battery = Gauge(
            "edged_sensor_battery_ratio", "Battery charge, 0..1.", registry=registry
        )
        self.throttled = Gauge(
            "edged_sensor_throttled",
            "Throttle flags (Raspberry Pi get_throttled, NVML clock event reasons), 0/1.",
            ["flag"],
            registry=registry,
        )
        self.stale = Gauge(
            "edged_sensor_stale",
            "1 when a sensor that read fine before now fails (stale_policy applies).",
            ["sensor"],
            registry=registry,
        )
        self.level = Gauge(
            "edged_governor_level", "Current governor level index (0 = normal).", registry=registry
        )
        self.level_info = Gauge(
            "edged_governor_level_info",
            "1 for the current governor level.",
            ["level"],
            registry=registry,
        )
        self.level_seconds = Counter(
            "edged_governor_level_seconds",
            "Time spent on each governor level.",
            ["level"],
            registry=registry,
        )
        self.headroom = Gauge(
            "edged_thermal_headroom_ratio",
            "Hottest counted temperature / first throttling threshold (1.0 = at the threshold).",
            registry=registry,
        )
        self.power_total = Gauge(
            "edged_power_watts",
            "Total power averaged over power_window_s, as used for the power budget.",
            registry=registry,
        )
        self.energy_left = Gauge(
            "edged_energy_budget_left_joules",
            "[governor.energy]: what is left of the energy budget (NaN without one).",
            registry=registry,
        )
        self.mission_left = Gauge(
            "edged_energy_mission_left_seconds",
            "[governor.energy]: seconds left of the mission (NaN without a budget).",
            registry=registry,
        )
        self._levels: list[str] = list(levels)
        for name in self._levels:
            self.level_info.labels(level=name).set(0)
            self.level_seconds.labels(level=name)
        self._temps: set[str] = set()
        self._rails: set[str] = set()

    def update(self, readings: Readings, decision: Decision, dt: float) -> None:
        """Export one sample and decision; ``dt`` seconds are credited to the decision's level."""
        self._sync(self.temperature, self._temps, readings.temperatures)
        rails = dict(readings.power)
        if readings.total_power_w is not None:
            rails["total"] = readings.total_power_w
        self._sync(self.power, self._rails, rails)
        if readings.battery_ratio is not None:
            self.battery.set(readings.battery_ratio)
        else:
            self.battery.set(float("nan"))
        for flag, on in readings.throttled.items():
            self.throttled.labels(flag=flag).set(1 if on else 0)
        for name in readings.kinds:
            self.stale.labels(sensor=name).set(1 if name in readings.stale else 0)
        self.level.set(decision.index)
        if decision.level not in self._levels:
            self._levels.append(decision.level)
        for name in self._levels:
            self.level_info.labels(level=name).set(1 if name == decision.level else 0)
        if dt > 0:
            self.level_seconds.labels(level=decision.level).inc(dt)
        self.headroom.set(decision.headroom if decision.headroom is not None else float("nan"))
        self.power_total.set(decision.power_w if decision.power_w is not None else float("nan"))
        e = decision.energy or {}
        self.energy_left.set(e["left_wh"] * 3600 if "left_wh" in e else float("nan"))
        self.mission_left.set(e.get("mission_left_s", float("nan")))

    @staticmethod
    def _sync(gauge: Gauge, shown: set[str], values: dict[str, float]) -> None:
        for name, value in values.items():
            gauge.labels(name).set(value)
        for name in shown - values.keys():
            with contextlib.suppress(KeyError):
                gauge.remove(name)
        shown.clear()
        shown.update(values)
