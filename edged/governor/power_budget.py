"""Power over a window, and the power-budget controller that steps levels on it.

Why a window: inference power is bursty (a batch is a spike), so triggers and the
budget look at the mean over ``power_window_s``, believed only once power has been
seen for half a window (the burst of loading models at start-up is not sustained load).

The budget is a stepping controller: while the window average is over
``power_budget_w`` it goes one level further every ``power_window_s``; it relaxes one
level (after ``max(dwell_s, power_window_s)``) once the average is below
``power_budget_exit_w`` (default 90 % of the budget). Its index is a floor for the level.
"""

from __future__ import annotations

from collections import deque


class PowerWindow:
    """``add(now, watts)`` per sample; ``average(now)`` once half a window has been seen."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._power: deque[tuple[float, float]] = deque()
        self._since = 0.0

    def average(self, now: float, watts: float | None) -> float | None:
        """Add this sample's total power (None: not read) and return the window mean."""
        if watts is not None:
            if not self._power:
                self._since = now
            self._power.append((now, watts))
        while self._power and self._power[0][0] < now - self.window_s:
            self._power.popleft()
        if self._power and now - self._since >= self.window_s / 2:
            return sum(p for _, p in self._power) / len(self._power)
        return None


class PowerBudget:
    """The budget's own level index (0: within budget), stepped by :meth:`update`."""

    def __init__(
        self, budget_w: float | None, exit_w: float | None, window_s: float, dwell_s: float
    ) -> None:
        self.budget_w = budget_w
        self.exit_w = exit_w if exit_w is not None or budget_w is None else 0.9 * budget_w
        self.window_s = window_s
        self.relax_after_s = max(dwell_s, window_s)
        self.index = 0
        self._since: float | None = None

    def update(self, power: float | None, level_index: int, top: int, now: float) -> bool:
        """Advance on the window-average ``power``; True while the budget asks for a level.

        ``level_index`` is the current automatic level: stepping up starts from it, so the
        budget adds to heat rather than repeating it; ``top`` is the most severe level.
        """
        if self.budget_w is None or power is None:
            return False
        assert self.exit_w is not None
        waited = self._since is None or now - self._since >= self.window_s
        if power > self.budget_w:
            if waited and max(self.index, level_index) < top:
                self.index = max(self.index, level_index) + 1
                self._since = now
        elif (
            power < self.exit_w
            and self.index > 0
            and (self._since is None or now - self._since >= self.relax_after_s)
        ):
            self.index -= 1
            self._since = now
        return self.index > 0
