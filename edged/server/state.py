"""What the rooms of the server share: one small object, passed to each of them.

Why one object: the lifecycle, inference path, control ops, reload, governor
application and health all read the same few facts (config, phase, registry); keeping
them here, and nothing else, means no room reaches into another's attributes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from typing import Any

from edged import PROCESS_STARTED_AT
from edged.config import Config
from edged.metrics import Metrics
from edged.registry import Registry
from edged.systemd import Notifier


class StartupError(Exception):
    """A one-line reason the daemon cannot start (exit code 1)."""


@dataclass
class ServerState:
    config: Config
    #: command-line flags (Config.with_overrides kwargs), re-applied on every reload
    overrides: dict[str, Any]
    metrics: Metrics
    notifier: Notifier
    registry: Registry
    #: starting -> serving -> draining -> stopped
    phase: str = "starting"
    ready: bool = False
    #: uptime and start-up time count from the process's start, not this object's
    started_at: float = PROCESS_STARTED_AT
    answered: int = 0
    #: total power from the governor's last sample (energy metric); None without rails
    power_w: float | None = None
    #: bound addresses, for status and logs
    endpoints: list[str] = field(default_factory=list)
    control_endpoint: str = ""
    #: [[server.frigate]] endpoints as bound: address -> model
    frigate_endpoints: dict[str, str] = field(default_factory=dict)
    #: the INT8 rung of a model Frigate sent, per endpoint (frigate_rungs writes it)
    frigate_rungs: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: [server.kserve] listeners as bound: "grpc"/"http" -> address
    kserve_endpoints: dict[str, str] = field(default_factory=dict)
    #: the outcome of the last reload (status shows it)
    last_reload: dict[str, Any] | None = None
    background: set[asyncio.Task[Any]] = field(default_factory=set)
    #: the offload room (edged.server.offload.Offload) every protocol room submits through
    offload: Any = None

    @property
    def serving(self) -> bool:
        return self.phase == "serving"

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """A short-lived task (decode, swap, reload) kept referenced until done.

        asyncio holds tasks weakly; the lifecycle cancels whatever is left at stop."""
        t = asyncio.get_running_loop().create_task(coro)
        self.background.add(t)
        t.add_done_callback(self.background.discard)

    @contextlib.asynccontextmanager
    async def loading(self) -> AsyncIterator[None]:
        """While models load: keep telling systemd to extend its start/reload timeout."""
        async def extend() -> None:
            while True:
                self.notifier.extend_timeout(30.0)
                await asyncio.sleep(10)

        t = asyncio.get_running_loop().create_task(extend())
        try:
            yield
        finally:
            t.cancel()


def swap_headroom_bytes(cfg: Config) -> int:
    return int(cfg.server.swap_memory_headroom_mb * (1 << 20))
