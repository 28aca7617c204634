"""What the server's modules share: the protocol rooms' ``Serving`` facts plus the daemon's.

Why one object: the lifecycle, control ops, reload, governor application and health all
read the same few facts (config, phase, registry); keeping them here, and nothing else,
means no module reaches into another's attributes. A protocol room is handed this object
as its ``Serving`` (``edged.protocols.serving``) and sees nothing of the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from edged import PROCESS_STARTED_AT
from edged.host.systemd import Notifier
from edged.protocols.serving import Room, Serving


@dataclass(kw_only=True)
class ServerState(Serving):
    #: command-line flags (Config.with_overrides kwargs), re-applied on every reload
    overrides: dict[str, Any] = field(default_factory=dict)
    notifier: Notifier = field(default_factory=Notifier.from_env)
    #: uptime and start-up time count from the process's start, not this object's
    started_at: float = PROCESS_STARTED_AT
    #: total power from the governor's last sample (energy metric); None without rails
    power_w: float | None = None
    control_endpoint: str = ""
    #: the protocol rooms, in the order they start (native, Frigate, KServe, offload)
    rooms: list[Room] = field(default_factory=list)
    #: the outcome of the last reload (status shows it)
    last_reload: dict[str, Any] | None = None

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
