"""One variant kept open and checked beside the active one: a swap to it is a switch.

Why: a model that walks its ladder for load (``[models.overload]``) swaps exactly when
its device is busiest, and opening and checking a session then takes the CPU its requests
are waiting for: the person detector with eight Frigate detectors on two cores lost 4-8
answers past Frigate's 200 ms at each swap. So for such a model the rung below the active
one is opened and checked in the background once it has loaded, and the variant a swap
leaves is kept: the step down and the step back up are both a switch of two pointers.
One rung is held at most (a pair's two members together), and only while memory allows
(twice its artifacts plus the swap headroom, the rule of a swap that holds both).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

import psutil

log = logging.getLogger("edged.model")


class Standby:
    def __init__(self, worker: Executor, headroom_bytes: int) -> None:
        self.worker = worker  # the model's worker: a backend closes after its batch
        self.headroom_bytes = headroom_bytes
        self._held: Any = None  # an open.Loaded

    @property
    def index(self) -> int | None:
        return self._held.index if self._held is not None else None

    def take(self, index: int) -> Any:
        """The held variant if it is ``index`` (no longer held), else None."""
        held = self._held
        if held is None or held.index != index:
            return None
        self._held = None
        return held

    def keep(self, loaded: Any) -> bool:
        """Hold ``loaded`` instead of what was held (closed); False, and ``loaded`` closed,
        when memory does not allow holding it."""
        self.close()
        size = sum(m.config.path.stat().st_size for m in (loaded, loaded.batch)
                   if m is not None and m.config.path.exists())
        if psutil.virtual_memory().available < 2 * size + self.headroom_bytes:
            self.worker.submit(loaded.close)
            return False
        self._held = loaded
        return True

    def close(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            self.worker.submit(held.close)

    async def fill(self, cfg: Any, index: int, open_checked: Callable[[int], Any]) -> None:
        """Open and check rung ``index`` of ``cfg`` (a ModelConfig) in the background and
        hold it, unless something is held or there is no such rung; a refusal is only
        logged (the swap that wants the rung says why again)."""
        if self._held is not None or index >= len(cfg.variants):
            return
        name = cfg.variants[index].name
        try:
            kept = self.keep(await asyncio.to_thread(open_checked, index))
        except Exception as e:
            log.warning("standby model=%s variant=%s not held: %s", cfg.name, name, e)
            return
        log.info("standby model=%s variant=%s %s", cfg.name, name,
                 "held: a swap to it is a switch" if kept else "not held: too little memory")
