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
is idle for ``IDLE_LEAD_S`` and then busy to the end. The governor decides every
``TICK_S`` (its default ``interval_s``), also between the samples of a sparse trace.
Variant powers and values are a ladder of fractions of the heaviest (``DEFAULT_LADDER``).
All of this is a model, and ``docs/governor.md`` says so next to every figure it produces.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from edged.config.governor import GovernorConfig
from edged.governor.oracle import Oracle
from edged.governor.plant import Plant, Rung, Sensor
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
TICK_S = 1.0  # the governor's default interval_s


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


def demand_profile(trace: Trace, tick_s: float = TICK_S) -> list[tuple[float, float]]:
    """(t, demand 0..1) every ``tick_s`` or finer, times relative to the first sample.

    Why ticks, not the trace's samples: the governor decides every ``interval_s`` (1 s by
    default) whatever the recording's spacing (sbc-bench samples every 10–120 s); between
    two samples the load is the later one's.
    """
    t0 = trace.samples[0].timestamp
    times = [s.timestamp - t0 for s in trace.samples]
    power = [s.total_power_w for s in trace.samples]
    duty: list[float] | None = None
    if all(p is not None for p in power):
        arr = np.asarray(power, dtype=float)
        lo, hi = np.percentile(arr, 10), np.percentile(arr, 95)
        if hi - lo > 0.1 * max(hi, 1e-9):
            duty = [float(d) for d in np.clip((arr - lo) / (hi - lo), 0.0, 1.0)]
    out = [(times[0], duty[0] if duty else 0.0)]
    for k in range(1, len(times)):
        n = max(math.ceil((times[k] - times[k - 1]) / tick_s - 1e-9), 1)
        for j in range(1, n + 1):
            t = times[k - 1] + (times[k] - times[k - 1]) * j / n
            out.append((t, duty[k] if duty else 0.0 if t < IDLE_LEAD_S else 1.0))
    return out


@dataclass
class SimResult:
    policy: str
    peak_c: float
    seconds_on: dict[str, float]
    work: float
    throttled_s: float
    swaps: int
    series: list[tuple[float, float, int]]  # (t, temperature, rung)
    min_swap_gap_s: float | None = None  # the shortest time between two swaps

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "peak_c": round(self.peak_c, 2),
            "seconds_on": {k: round(v, 1) for k, v in self.seconds_on.items()},
            "work": round(self.work, 2),
            "throttled_s": round(self.throttled_s, 1),
            "swaps": self.swaps,
            "min_swap_gap_s": self.min_swap_gap_s,
        }


#: the sensor of ``--simulate``: the plant's temperature in whole degrees, at once
EXACT_1C = Sensor()

#: ``simulate``'s policy names: the governor's configured ``policy`` each one runs
POLICIES = {"plain": "levels", "predicted": "predicted", "mpc": "mpc"}


class _Readings:
    """The sensor between the plant and the policy: noise, quantisation, lag."""

    def __init__(self, sensor: Sensor) -> None:
        self.sensor = sensor
        self._rng = np.random.default_rng(sensor.seed)
        self._past: list[tuple[float, float]] = []

    def read(self, t: float, temp: float) -> float:
        s = self.sensor
        self._past.append((t, temp))
        while len(self._past) > 2 and self._past[1][0] <= t - s.lag_s:
            self._past.pop(0)
        seen = temp
        if s.lag_s > 0:  # the plant between the samples around t - lag (linear)
            seen = float(np.interp(t - s.lag_s, *zip(*self._past, strict=True)))
        if s.noise_c > 0:
            seen += float(self._rng.uniform(-s.noise_c, s.noise_c))
        return float(round(seen / s.quant_c) * s.quant_c) if s.quant_c > 0 else seen


def simulate(
    cfg: GovernorConfig,
    plant: Plant,
    ladder: Sequence[Rung],
    demand: Sequence[tuple[float, float]],
    policy: str,
    sensor: Sensor = EXACT_1C,
    schedule: Sequence[int] | None = None,
) -> SimResult:
    """Run one policy: a name of :data:`POLICIES`, ``fixed:N`` (always rung N), or
    ``schedule`` (the rung of each interval, e.g. the oracle's)."""
    fixed = int(policy.split(":", 1)[1]) if policy.startswith("fixed:") else None
    gcfg = replace(cfg, policy=POLICIES.get(policy, "levels"), predict=False,
                   limit_c=cfg.limit_c if cfg.limit_c is not None else plant.trip_c
                   ).at_trip(plant.trip_c)  # auto levels: where that policy places them
    clock = [0.0]
    gov = Governor(gcfg, clock=lambda: clock[0])
    sensed = _Readings(sensor)
    temp = plant.equilibrium(plant.idle_w)
    rung = 0 if fixed is None else fixed
    seconds = dict.fromkeys((r.name for r in ladder), 0.0)
    work = throttled_s = peak = 0.0
    swap_times: list[float] = []
    series: list[tuple[float, float, int]] = []
    t0, duration = demand[0][0], demand[-1][0] - demand[0][0]
    prev_t = t0
    for k, (t, duty) in enumerate(demand):
        dt = t - prev_t
        prev_t = t
        if schedule is not None:
            rung = schedule[k] if k else rung
        throttling = temp >= plant.trip_c
        scale = THROTTLE_FACTOR if throttling else 1.0
        power = plant.idle_w + duty * ladder[rung].power_w * scale
        if dt > 0:
            eq = plant.equilibrium(power, plant.ambient_at(t - t0, duration))
            temp = eq + (temp - eq) * math.exp(-dt / plant.tau_s)
            seconds[ladder[rung].name] += dt
            work += dt * duty * ladder[rung].value * scale
            throttled_s += dt if throttling else 0.0
        peak = max(peak, temp)
        series.append((t, temp, rung))
        if schedule is not None:
            if k and rung != series[-2][2]:
                swap_times.append(t - dt)
            continue
        clock[0] = t
        gov.observe_load(MODEL, rung, duty, t, ladder_len=len(ladder))
        reading = Readings(
            timestamp=t, wall_time=t, temperatures={ZONE: sensed.read(t, temp)},
            power={"VDD_IN": power}, total_power_w=power, kinds={ZONE: THERMAL, "VDD_IN": RAIL},
        )
        d = gov.step(reading, now=t)
        if fixed is None:
            want = min((d.variant_steps or {}).get(MODEL, d.ladder_steps), len(ladder) - 1)
            if want != rung:
                rung = want
                swap_times.append(t)
    gaps = np.diff(swap_times)
    return SimResult(policy, peak, seconds, work, throttled_s, len(swap_times), series,
                     round(float(gaps.min()), 1) if len(gaps) else None)


def run_all(
    cfg: GovernorConfig, plant: Plant, ladder: Sequence[Rung],
    demand: Sequence[tuple[float, float]], sensor: Sensor = EXACT_1C,
) -> dict[str, SimResult]:
    """Every policy of :data:`POLICIES`, always-heaviest, always-lightest and the oracle
    (``oracle.py``: the most work with 0 s above the limit under the same swap budget)."""
    runs = {name: simulate(cfg, plant, ladder, demand, name, sensor) for name in POLICIES}
    runs["heaviest"] = simulate(cfg, plant, ladder, demand, "fixed:0", sensor)
    runs["lightest"] = simulate(cfg, plant, ladder, demand, f"fixed:{len(ladder) - 1}", sensor)
    best = Oracle(plant, ladder, demand, cfg.swap_min_interval_s)
    runs["oracle"] = simulate(cfg, plant, ladder, demand, "oracle", sensor,
                              schedule=best.schedule())
    return runs


def share(work: float, oracle: float) -> float | None:
    """``work`` as a share of the oracle's (None when the oracle can do no work)."""
    return None if oracle <= 0 else round(work / oracle, 4)


def compare(
    cfg: GovernorConfig, plant: Plant, ladder: Sequence[Rung],
    demand: Sequence[tuple[float, float]],
) -> dict[str, Any]:
    """Every policy against the oracle, always-heaviest and always-lightest."""
    runs = run_all(cfg, plant, ladder, demand)
    heavy, light, best = runs["heaviest"].work, runs["lightest"].work, runs["oracle"].work

    def lost(w: float, ref: float) -> float | None:
        return None if ref <= 0 else round(100.0 * (ref - w) / ref, 1)

    return {
        "plant": vars(plant),
        "ladder": [vars(r) for r in ladder],
        "swap_min_interval_s": cfg.swap_min_interval_s,
        "runs": {
            k: r.to_dict() | {"share_of_oracle": share(r.work, best),
                              "seconds_above_limit": round(r.throttled_s, 1),
                              "work_lost_vs_heaviest_pct": lost(r.work, heavy),
                              "work_lost_vs_lightest_pct": lost(r.work, light)}
            for k, r in runs.items()
        },
        "_series": {k: r.series for k, r in runs.items()},
    }
