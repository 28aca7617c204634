"""What one governor step decides: the level, its actions and why.

Why its own module: the policy (``policy.py``) produces it, the daemon's governing module
(``edged/server/governing.py``) applies it, metrics and replays read it; none of them needs
the others to know its shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
    #: the energy budget's account and the step it asks for (``energy.py``); None: off.
    energy: dict[str, Any] | None = None

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
            "energy": self.energy,
        }
