"""Load as a governor input: a model steps down its ladder while its answers come too
close to their deadlines, and back up when the heavier variant would keep them.

Why: a client that waits on a deadline gets nothing from a late answer. Frigate's plugin
keeps one request in flight per detector, gives up after 200 ms, shows no detection for
that frame and then resets its socket and repeats its handshake; eight such detectors
on a device that computes 70 frames a second wait ~115 ms each, and the tail crosses
200 ms. A checked lighter variant answers in time. The rule, every ``TICK_S`` for each
model whose ``[models.overload] step_down`` is on (the default for Frigate's models):

- **down** one rung when at least ``DOWN_SHARE`` of the answers of the last ``window_s``
  used ``down_at`` of their deadline or more (late and dropped ones count as all of it),
  from ``MIN_ANSWERS`` answers on: before Frigate's own timeouts fire, not after;
- **up** one rung, once the load's rung has been held ``dwell_s``, when the heavier
  variant would keep the window's 95th percentile under ``up_at``: the percentile scaled
  by the two variants' measured compute per row (closed-loop clients wait in proportion
  to it), or ``UNKNOWN_COST_RATIO`` where the heavier one never ran here; or when no
  request with a deadline came for a whole window.

Answers in the ``SETTLE_S`` after a change are not read (they waited through the swap).
The index asked for is one input of ``Governing.index_for``: the variant that runs is the
lightest of what the operator's pin, the governor's level and the load ask for, and the
swap itself is the governor's (loaded first, checked, then switched).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from edged.config.overload import OverloadConfig
from edged.model.model import Model
from edged.model.pipeline.pipeline import Pipeline

log = logging.getLogger("edged.server")

TICK_S = 0.5
SETTLE_S = 1.0
DOWN_SHARE = 0.25
MIN_ANSWERS = 20
UNKNOWN_COST_RATIO = 2.0


@dataclass
class _Asked:
    index: int = 0  # the ladder index the load asks for (0: the heaviest, no ask)
    since: float = 0.0
    reason: str = ""
    model: int = 0  # id() of the Model asked for: a model served anew starts afresh


def decide(cfg: OverloadConfig, uses: list[float], active: int, ladder_len: int,
           ratio: float, held_s: float, whole: bool = True) -> tuple[int, str] | None:
    """The index the load asks for now and why (None: as it is). ``uses``: the share of
    its deadline each answer of the window used; ``ratio``: the heavier variant's cost per
    row over the active one's; ``held_s``: time since the load's last change; ``whole``:
    the window read is a whole ``window_s`` (not cut short by the settling after a
    change), so that no answers in it means no requests, not too short a look."""
    if len(uses) >= MIN_ANSWERS and active < ladder_len - 1:
        late = sum(u >= cfg.down_at for u in uses) / len(uses)
        if late >= DOWN_SHARE:
            return active + 1, (f"{late:.0%} of {len(uses)} answers used {cfg.down_at:.0%} "
                                "or more of their deadline")
    if active == 0 or held_s < cfg.dwell_s:
        return None
    if not uses:
        return (active - 1, f"no request with a deadline for {cfg.window_s:g} s") if whole \
            else None
    p95 = float(np.percentile(uses, 95))
    if p95 * ratio < cfg.up_at:
        return active - 1, (f"p95 {p95:.0%} of the deadline; the heavier variant at "
                            f"{ratio:.2f}x the cost per row would use {p95 * ratio:.0%}")
    return None


class Overload:
    """What the load asks of each model (event loop only)."""

    def __init__(self) -> None:
        self._asked: dict[str, _Asked] = {}

    def index(self, model: str) -> int:
        a = self._asked.get(model)
        return a.index if a is not None else 0

    def reason(self, model: str) -> str:
        a = self._asked.get(model)
        return a.reason if a is not None else ""

    def describe(self, m: Model | Pipeline) -> dict[str, Any] | None:
        if not m.cfg.overload.step_down:
            return None
        a = self._asked.get(m.name, _Asked())
        names = m.variant_names
        return {"asks": names[min(a.index, len(names) - 1)] if a.index else None,
                "reason": a.reason or None}

    def tick(self, models: Iterable[Model | Pipeline],
             now: float) -> list[tuple[Model | Pipeline, str]]:
        """One step of the rule for every model; those whose ask changed, with why.

        A pipeline with ``[models.overload] step_down`` is read the same way: its
        answers' deadline use, and its step-down plan as the ladder (each step one
        stage's rung, or an optional stage shed, before the detector's)."""
        changed: list[tuple[Model | Pipeline, str]] = []
        seen = set()
        for m in models:
            seen.add(m.name)
            cfg = m.cfg.overload
            if not cfg.step_down or not m.ready or m.swapping or m.active_index is None:
                continue
            a = self._asked.get(m.name)
            if a is None or a.model != id(m):  # new, or served anew (reload, a sent ladder)
                a = self._asked[m.name] = _Asked(since=now, model=id(m))
            active = m.active_index
            if active < a.index:
                continue  # its swap has not happened (or was refused): nothing new to ask
            start = max(now - cfg.window_s, a.since + SETTLE_S)
            uses = m.usage.deadline_use(start)
            names = m.variant_names
            heavier = m.usage.cost_per_row(names[active - 1]) if active else None
            current = m.usage.cost_per_row(names[active])
            ratio = heavier / current if heavier and current else UNKNOWN_COST_RATIO
            got = decide(cfg, uses, active, len(names), ratio, now - a.since,
                         whole=start <= now - cfg.window_s)
            # Held lighter by the governor or a pin, the load may only ask for lighter still.
            if got is None or (active > a.index and got[0] < active):
                continue
            index, why = got
            log.info("overload: model=%s asks for %s (was %s): %s", m.name, names[index],
                     names[active], why)
            self._asked[m.name] = _Asked(index, now, why, id(m))
            changed.append((m, why))
        for name in set(self._asked) - seen:
            del self._asked[name]
        return changed
