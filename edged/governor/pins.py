"""An operator's level pin (``edged ctl level NAME|auto``): it overrides the automatic
level until released, while the automatic level keeps moving underneath (so releasing
it lands where the sensors say, and the reason shows both)."""

from __future__ import annotations


class LevelPin:
    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.index: int | None = None

    def set(self, level_name: str | None) -> None:
        """Hold ``level_name``; None returns to automatic control. Unknown names raise."""
        if level_name is None:
            self.index = None
            return
        if level_name not in self.names:
            raise ValueError(
                f"unknown governor level {level_name!r}; levels: {', '.join(self.names)}"
            )
        self.index = self.names.index(level_name)

    @property
    def name(self) -> str | None:
        return None if self.index is None else self.names[self.index]

    def apply(self, auto: int, reason: str) -> tuple[int, str]:
        """The level to act on and its reason, given the automatic level and its reason."""
        if self.index is None:
            return auto, reason
        return self.index, f"pinned by operator (automatic: {self.names[auto]}: {reason})"
