"""An operator's variant pins (``edged ctl swap MODEL VARIANT|auto``): which variant each
pinned model should run, who pinned it and when.

Why apart from ``governing`` (the one writer of swaps, which applies them): a pin is one
input to its rule, beside the governor's step and the load's; what is pinned, how far
down a model's ladder that asks, which pins outlive a reload and how status shows them
hold whatever the rule makes of it. (``edged.governor.pins`` is the level's pin.)
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from edged.config.file import Config
from edged.errors import NotFound
from edged.model.model import Model


@dataclass(frozen=True)
class VariantPin:
    """An operator's choice of variant for one model."""

    variant: str
    by: str
    at: float


class VariantPins:
    """The pinned variant of each model an operator pinned, by model name."""

    def __init__(self) -> None:
        self._pins: dict[str, VariantPin] = {}

    def pin(self, m: Model, variant: str, by: str) -> None:
        """Hold ``m`` on ``variant``; NotFound when its ladder has no such rung."""
        if variant not in m.variant_names:
            raise NotFound(f"model {m.name!r} has no variant {variant!r}: {m.variant_names}")
        self._pins[m.name] = VariantPin(variant, by, time.time())

    def release(self, name: str) -> None:
        self._pins.pop(name, None)

    def steps(self, name: str, variants: list[str]) -> int:
        """How far down its ladder (``variants``) model ``name``'s pin asks it to run:
        0 without a pin, or when the pinned variant is not on the ladder."""
        pin = self._pins.get(name)
        return variants.index(pin.variant) if pin is not None and pin.variant in variants else 0

    def keep(self, cfg: Config) -> None:
        """On a reload: drop the pins of models, or of variants, ``cfg`` no longer has."""
        for name, pin in list(self._pins.items()):
            mc = cfg.model(name)
            if mc is None or pin.variant not in [v.name for v in mc.variants]:
                del self._pins[name]

    def held(self, m: Model, want: int, level: str | None) -> str | None:
        """Why the pinned variant is not the one running, when the governor overrides it:
        ``want`` is the ladder index the rule gives ``m`` at governor ``level`` (None: the
        governor has decided nothing)."""
        pin = self._pins.get(m.name)
        if pin is None or level is None or pin.variant not in m.variant_names:
            return None
        if want > m.variant_names.index(pin.variant):
            return (f"governor level {level} needs at least "
                    f"{m.variant_names[want]}; the pin applies when it relaxes")
        return None

    def describe(self, name: str) -> dict[str, Any] | None:
        """Model ``name``'s pin as status shows it (None: not pinned)."""
        pin = self._pins.get(name)
        return asdict(pin) if pin is not None else None
