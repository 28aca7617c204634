"""Closed-loop simulation for ``edged governor replay --simulate``.

Why: a recorded trace shows what the policy *would have decided*, but not what its
decisions would have done to the temperature. Here a first-order plant
(``τ·dT/dt = T_amb + R·P − T``, readings quantised to 1 °C like a Pi's) is driven by
the power of the variant the governor chose, so the loop is closed: peak temperature,
time on each variant, and the work lost against always running the heaviest or the
lightest variant. The device's own throttling is modelled too: at or above ``trip_c``
the board halves its clocks (half the power, half the work), as firmware does.

The load follows the trace: with power rails the demand (0..1) is the trace's power
between its idle (10th percentile) and busy (95th percentile) levels; without rails it
is idle for ``IDLE_LEAD_S`` and then busy to the end. Variant powers and values are a
ladder of fractions of the heaviest (``DEFAULT_LADDER``). All of this is a model, and
``docs/governor.md`` says so next to every figure it produces.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from edged.config.governor import GovernorConfig
from edged.governor.policy import Governor
from edged.governor.sensors import RAIL, THERMAL, Readings
from edged.governor.trace import Trace

MODEL = "sim"
ZONE = "sim-thermal"
IDLE_LEAD_S = 60.0
TAU_S = 120.0
IDLE_W = 1.0
HEAVY_W = 5.0
OVER_TRIP_C = 5.0
THROTTLE_FACTOR = 0.5


@dataclass(frozen=True)
class Rung:
    name: str
    power_w: float  # above idle, at full duty
    value: float  # work per second at full duty, relative to the heaviest (quality × rate)


@dataclass(frozen=True)
class Plant:
    ambient_c: float
    rise_per_w: float
    tau_s: float
    idle_w: float
    trip_c: float  # the device throttles itself at or above this

    def equilibrium(self, power_w: float) -> float:
        return self.ambient_c + self.rise_per_w * power_w


#: (power fraction of the heaviest, value): e.g. fp32 → INT8 → lower input resolution.
DEFAULT_LADDER = ((1.0, 1.0), (0.5, 0.85), (0.25, 0.7))


def default_ladder(heavy_w: float) -> list[Rung]:
    return [Rung(f"rung{i}", heavy_w * p, v) for i, (p, v) in enumerate(DEFAULT_LADDER)]


def default_plant(trace: Trace, trip_c: float) -> Plant:
    """Ambient = the trace's coolest reading; R such that the heaviest rung settles
    ``OVER_TRIP_C`` above the trip (so always-heaviest does throttle); τ = ``TAU_S``."""
    temps = [max(s.temperatures.values()) for s in trace.samples if s.temperatures]
    ambient = min(temps) if temps else 40.0
    rise = (trip_c + OVER_TRIP_C - ambient) / (IDLE_W + HEAVY_W)
    return Plant(ambient, max(rise, 0.1), TAU_S, IDLE_W, trip_c)


def demand_profile(trace: Trace) -> list[tuple[float, float]]:
    """(t, demand 0..1) per trace sample, times relative to the first sample."""
    t0 = trace.samples[0].timestamp
    times = [s.timestamp - t0 for s in trace.samples]
    power = [s.total_power_w for s in trace.samples]
    if all(p is not None for p in power):
        arr = np.asarray(power, dtype=float)
        lo, hi = np.percentile(arr, 10), np.percentile(arr, 95)
        if hi - lo > 0.1 * max(hi, 1e-9):
            duty = np.clip((arr - lo) / (hi - lo), 0.0, 1.0)
            return list(zip(times, (float(d) for d in duty), strict=True))
    return [(t, 0.0 if t < IDLE_LEAD_S else 1.0) for t in times]


@dataclass
class SimResult:
    policy: str
    peak_c: float
    seconds_on: dict[str, float]
    work: float
    throttled_s: float
    swaps: int
    series: list[tuple[float, float, int]]  # (t, temperature, rung)

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "peak_c": round(self.peak_c, 2),
            "seconds_on": {k: round(v, 1) for k, v in self.seconds_on.items()},
            "work": round(self.work, 2),
            "throttled_s": round(self.throttled_s, 1),
            "swaps": self.swaps,
        }


def simulate(
    cfg: GovernorConfig,
    plant: Plant,
    ladder: Sequence[Rung],
    demand: Sequence[tuple[float, float]],
    policy: str,
) -> SimResult:
    """Run one policy: ``plain`` (levels), ``predicted`` (levels + predicted choice),
    or ``fixed:N`` (always rung N)."""
    fixed = int(policy.split(":", 1)[1]) if policy.startswith("fixed:") else None
    gcfg = replace(cfg, predict=policy == "predicted")
    clock = [0.0]
    gov = Governor(gcfg, clock=lambda: clock[0])
    temp = plant.equilibrium(plant.idle_w)
    rung = 0 if fixed is None else fixed
    seconds = dict.fromkeys((r.name for r in ladder), 0.0)
    work = throttled_s = peak = 0.0
    swaps = 0
    series: list[tuple[float, float, int]] = []
    prev_t = demand[0][0]
    for t, duty in demand:
        dt = t - prev_t
        prev_t = t
        throttling = temp >= plant.trip_c
        scale = THROTTLE_FACTOR if throttling else 1.0
        power = plant.idle_w + duty * ladder[rung].power_w * scale
        if dt > 0:
            eq = plant.equilibrium(power)
            temp = eq + (temp - eq) * math.exp(-dt / plant.tau_s)
            seconds[ladder[rung].name] += dt
            work += dt * duty * ladder[rung].value * scale
            throttled_s += dt if throttling else 0.0
        peak = max(peak, temp)
        series.append((t, temp, rung))
        clock[0] = t
        gov.observe_load(MODEL, rung, duty, t, ladder_len=len(ladder))
        reading = Readings(
            timestamp=t, wall_time=t, temperatures={ZONE: float(round(temp))},
            power={"VDD_IN": power}, total_power_w=power, kinds={ZONE: THERMAL, "VDD_IN": RAIL},
        )
        d = gov.step(reading, now=t)
        if fixed is None:
            want = (d.variant_steps or {}).get(MODEL, d.ladder_steps)
            want = min(want, len(ladder) - 1)
            if want != rung:
                rung, swaps = want, swaps + 1
    return SimResult(policy, peak, seconds, work, throttled_s, swaps, series)


def compare(
    cfg: GovernorConfig, plant: Plant, ladder: Sequence[Rung],
    demand: Sequence[tuple[float, float]],
) -> dict[str, Any]:
    """Plain vs predicted vs always-heaviest vs always-lightest, plus work lost."""
    runs = {
        "plain": simulate(cfg, plant, ladder, demand, "plain"),
        "predicted": simulate(cfg, plant, ladder, demand, "predicted"),
        "heaviest": simulate(cfg, plant, ladder, demand, "fixed:0"),
        "lightest": simulate(cfg, plant, ladder, demand, f"fixed:{len(ladder) - 1}"),
    }
    heavy, light = runs["heaviest"].work, runs["lightest"].work

    def lost(w: float, ref: float) -> float | None:
        return None if ref <= 0 else round(100.0 * (ref - w) / ref, 1)

    return {
        "plant": vars(plant),
        "ladder": [vars(r) for r in ladder],
        "runs": {
            k: r.to_dict() | {"work_lost_vs_heaviest_pct": lost(r.work, heavy),
                              "work_lost_vs_lightest_pct": lost(r.work, light)}
            for k, r in runs.items()
        },
        "_series": {k: r.series for k, r in runs.items()},
    }
