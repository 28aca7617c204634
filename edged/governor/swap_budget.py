"""Swap budget: a minimum time between ladder changes, per model.

Why: every change of the ladder step is a variant swap (load, warm up, switch), and a
level that flaps near a threshold would otherwise swap on every flap. The budget lives
in the pure policy, so the Decision the daemon applies already only changes a ladder
step when the budget allows; the daemon needs no timing logic. Only a hard threshold
(``force``: the measured temperature at the top level's enter value, a stale sensor
under ``stale_policy = "hot"``, or an operator pin) spends it early.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class _Entry:
    step: int
    since: float | None


class SwapBudget:
    """``allow(key, want, now, force)`` → (step to apply, seconds until a change is allowed).

    Going lighter jumps straight to the wanted step; going back to heavier variants moves
    one rung per allowed change, so a hold never turns into a multi-rung jump upwards.
    """

    def __init__(self, min_interval_s: float) -> None:
        self.min_interval_s = min_interval_s
        self._entries: dict[str, _Entry] = {}
        self.changes: dict[str, int] = {}

    def allow(self, key: str, want: int, now: float, *, force: bool) -> tuple[int, float]:
        e = self._entries.setdefault(key, _Entry(0, None))
        if want < e.step:
            want = e.step - 1  # back up towards heavier one rung at a time, as levels relax
        if want == e.step:
            return e.step, 0.0
        waited = float("inf") if e.since is None else now - e.since
        left = self.min_interval_s - waited
        if left <= 0 or force:
            e.step, e.since = want, now
            self.changes[key] = self.changes.get(key, 0) + 1
            return want, 0.0
        return e.step, left

    def hold_left(self, key: str, now: float) -> float:
        """Seconds until ``key`` may change again (0: it may now)."""
        e = self._entries.get(key)
        if e is None or e.since is None:
            return 0.0
        return max(self.min_interval_s - (now - e.since), 0.0)

    def step(self, key: str) -> int:
        e = self._entries.get(key)
        return e.step if e else 0
