"""The ``[governor.energy]`` table: an energy budget over a mission of known length.

Why a table of its own: a battery device (a drone, a camera on a solar cell) does not
ask "stay under N watts" but "finish this mission on this much energy, doing the most
work"; the two keys say exactly that. Both are required once the table is there, so a
half-configured mode is refused at start (``edged check``) instead of guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

from edged.config.schema import Table, positive


@dataclass(frozen=True)
class EnergyConfig:
    """``budget_wh`` watt-hours for ``mission_s`` seconds from start; both None = off."""

    budget_wh: float | None = None
    mission_s: float | None = None

    @property
    def enabled(self) -> bool:
        return self.budget_wh is not None and self.mission_s is not None

    @classmethod
    def from_table(cls, t: Table) -> EnergyConfig:
        """Parse ``[governor.energy]``; absent or empty means no energy budget."""
        if not t.data:
            t.done()
            return cls()
        budget = t.get("budget_wh", float, check=positive)
        mission = t.get("mission_s", float, check=positive)
        t.done()
        return cls(budget_wh=budget, mission_s=mission)
