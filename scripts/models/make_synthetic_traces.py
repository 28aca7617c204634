#!/usr/bin/env python3
"""Write the SYNTHETIC governor traces in examples/traces/ (deterministic, seeded).

Why synthetic: they were written when no public recording with a licence that allows
redistribution had been found; licensed real recordings now ship next to them, and
examples/traces/README.md also lists unlicensed ones used for evaluation and how to
fetch them. These files are generated, named ``synthetic-*`` and must never be
presented as recordings. The plant is a sum of two first-order responses — a fast die
(τ ≈ 4 s) on a slow heat sink (τ ≈ 150–200 s) — which is what makes a linear forecast
overshoot at a load step; readings are quantised like the real sensors (1 °C on a Pi,
tegrastats' 0.5 °C-ish on a Jetson) with seeded noise.

    python scripts/models/make_synthetic_traces.py  # rewrites examples/traces/{,power/}synthetic-*
"""

from __future__ import annotations

import math
import random
from datetime import datetime, timedelta
from pathlib import Path

OUT = Path(__file__).resolve().parents[2] / "examples" / "traces"


def two_pole(load: list[float], dt: float, ambient: float, fast_k: float, fast_tau: float,
             slow_k: float, slow_tau: float) -> list[float]:
    """Die temperature for a load profile (0..1): ambient + fast + slow first-order parts."""
    fast = slow = 0.0
    out = []
    for u in load:
        fast += (fast_k * u - fast) * (1 - math.exp(-dt / fast_tau))
        slow += (slow_k * u - slow) * (1 - math.exp(-dt / slow_tau))
        out.append(ambient + fast + slow)
    return out


def pi4_heatup(rng: random.Random) -> str:
    """Raspberry Pi 4-like: 60 s idle, 600 s four-thread load, 60 s cool-down, 1 s samples.

    Firmware-style throttling: once the die reaches 80 °C the clock is capped on some
    samples (soft limit) and the load's heat drops accordingly; ``throttled`` marks them.
    """
    load = [0.0] * 60 + [1.0] * 600 + [0.0] * 60
    temps: list[float] = []
    marks: list[int] = []
    fast = slow = 0.0
    for u in load:
        t_now = 48.5 + fast + slow
        capped = u > 0 and t_now >= 80.5 and rng.random() < 0.5
        eff = u * (0.75 if capped else 1.0)
        fast += (9.0 * eff - fast) * (1 - math.exp(-1 / 4.0))
        slow += (27.0 * eff - slow) * (1 - math.exp(-1 / 150.0))
        temps.append(48.5 + fast + slow + rng.gauss(0, 0.45))
        marks.append(int(capped))
    rows = ["# SYNTHETIC trace (not a recording): scripts/models/make_synthetic_traces.py",
            "t_s,cpu-thermal_c,throttled"]
    rows += [f"{i},{round(v)},{m}" for i, (v, m) in enumerate(zip(temps, marks, strict=True))]
    return "\n".join(rows) + "\n"


def orin_tegrastats(rng: random.Random) -> str:
    """Jetson Orin Nano-like tegrastats log: 60 s idle, 900 s GPU inference, 120 s idle."""
    load = [0.0] * 60 + [1.0] * 900 + [0.0] * 120
    tj = two_pole(load, 1.0, 47.0, 6.0, 3.0, 36.0, 200.0)
    start = datetime(2026, 1, 1, 12, 0, 0)
    lines = []
    for i, (u, t) in enumerate(zip(load, tj, strict=True)):
        vin = 5200 + 10100 * u + rng.gauss(0, 120)
        gpu = 700 + 7300 * u + rng.gauss(0, 90)
        soc = 1400 + 900 * u + rng.gauss(0, 40)
        temps = {"cpu": t - 1.2, "soc2": t - 2.5, "soc0": t - 2.0, "gpu": t - 0.4,
                 "tj": t, "soc1": t - 2.2}
        temp_txt = " ".join(f"{k}@{v + rng.gauss(0, 0.15):.3f}C" for k, v in temps.items())
        stamp = (start + timedelta(seconds=i)).strftime("%m-%d-%Y %H:%M:%S")
        cpu = ",".join(f"{int(5 + 30 * u + rng.random() * 5)}%@1510" for _ in range(6))
        lines.append(
            f"{stamp} RAM 3100/7620MB (lfb 40x4MB) SWAP 0/3810MB (cached 0MB) CPU [{cpu}] "
            f"GR3D_FREQ {int(99 * u)}% {temp_txt} VDD_IN {vin:.0f}mW/{vin:.0f}mW "
            f"VDD_CPU_GPU_CV {gpu:.0f}mW/{gpu:.0f}mW VDD_SOC {soc:.0f}mW/{soc:.0f}mW")
    return "\n".join(lines) + "\n"


def power_csv(name: str, what: str, demand: list[float], dt: float, idle_w: float,
              busy_w: float, noise_w: float, rng: random.Random) -> str:
    """A power trace (``t_s,total_w``): the board's input power for a demand (0..1)."""
    rows = [f"# SYNTHETIC trace (not a recording): scripts/models/make_synthetic_traces.py {name}",
            f"# {what}", "t_s,total_w"]
    for i, d in enumerate(demand):
        w = idle_w + busy_w * d + rng.gauss(0, noise_w)
        rows.append(f"{i * dt:g},{max(w, 0.0):.2f}")
    return "\n".join(rows) + "\n"


def drone_survey(rng: random.Random) -> str:
    """A drone's companion computer over a 20 min survey flight, 1 s samples: transit out
    (light detection), four survey legs (every frame) with turns between, transit back."""
    demand: list[float] = [0.3] * 120
    for leg in range(4):
        demand += [min(1.0, max(0.0, rng.gauss(0.9, 0.08))) for _ in range(200)]
        if leg < 3:
            demand += [0.4] * 50
    demand += [0.2] * (1200 - len(demand))
    return power_csv("drone_survey", "a drone's companion computer: 3 W idle, +7 W at full "
                     "detection load; 20 min survey flight", demand, 1.0, 3.0, 7.0, 0.15, rng)


def solar_camera(rng: random.Random) -> str:
    """A solar-powered camera over 2 h, 5 s samples: motion-gated detection (5 % of
    frames) with events (about one per 4 min, 30-180 s) when every frame is detected."""
    n, dt = 1440, 5.0
    demand = [0.05] * n
    t = rng.expovariate(1 / 240)
    while t < n * dt:
        length = rng.uniform(30, 180)
        for i in range(int(t // dt), min(n, int((t + length) // dt) + 1)):
            demand[i] = 1.0
        t += length + rng.expovariate(1 / 240)
    return power_csv("solar_camera", "a solar-powered camera: 2 W idle, +4 W detecting every "
                     "frame; 2 h of motion events", demand, dt, 2.0, 4.0, 0.05, rng)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "synthetic-pi4-heatup.csv").write_text(pi4_heatup(random.Random(4)))
    (OUT / "synthetic-orin-nano-tegrastats.log").write_text(orin_tegrastats(random.Random(8)))
    power = OUT / "power"  # power only: for the energy budget mode, not the thermal levels
    power.mkdir(exist_ok=True)
    (power / "synthetic-drone-survey.csv").write_text(drone_survey(random.Random(20)))
    (power / "synthetic-solar-camera.csv").write_text(solar_camera(random.Random(2)))
    print(f"wrote {OUT}/synthetic-pi4-heatup.csv, synthetic-orin-nano-tegrastats.log, "
          "power/synthetic-drone-survey.csv, power/synthetic-solar-camera.csv")


if __name__ == "__main__":
    main()
