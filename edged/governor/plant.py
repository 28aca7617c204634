"""The simulated device: a ladder's rungs, a first-order thermal plant, its sensor.

Why a module of its own: the closed-loop simulator (``simulate.py``) runs policies on it
and the oracle (``oracle.py``) plans on it; both import it, neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rung:
    name: str
    power_w: float  # above idle, at full duty
    value: float  # work per second at full duty, relative to the heaviest (quality × rate)


@dataclass(frozen=True)
class Plant:
    """``τ·dT/dt = T_amb + R·P − T``: the board as ``--simulate`` fits it per trace."""

    ambient_c: float
    rise_per_w: float
    tau_s: float
    idle_w: float
    trip_c: float  # the device throttles itself at or above this
    drift_c: float = 0.0  # the ambient rises this much, linearly, over the run

    def ambient_at(self, t: float, duration: float) -> float:
        return self.ambient_c + (self.drift_c * t / duration if duration > 0 else 0.0)

    def equilibrium(self, power_w: float, ambient_c: float | None = None) -> float:
        return (self.ambient_c if ambient_c is None else ambient_c) + self.rise_per_w * power_w


@dataclass(frozen=True)
class Sensor:
    """What the policy reads of the plant: uniform noise of ±``noise_c`` (seeded), then
    quantised to ``quant_c`` (a Pi reads whole degrees), ``lag_s`` late."""

    noise_c: float = 0.0
    quant_c: float = 1.0
    lag_s: float = 0.0
    seed: int = 0
