"""What one ``accept_models`` endpoint holds between messages: the model it serves, its bounds.

Why a module of its own: the transfer's checks (``edged.protocols.frigate.transfer``), the
switch to a stored version (``edged.protocols.frigate.sent_switch``), the rung build
(``edged.protocols.frigate.sent_rungs``) and the handshake's answers
(``edged.protocols.frigate.sent``) all read and write the same endpoint under its one lock,
and none of them owns it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from edged.config.frigate import FrigateConfig
from edged.delivery.pace import OncePerMinute, Pace
from edged.delivery.rungs import FrameRing
from edged.protocols.frigate.store import StoredModel


@dataclass
class ServedModel:
    """What an ``accept_models`` endpoint serves now."""

    stored: StoredModel
    model_type: str
    #: the file the fp32 rung loads (the stored one, or its adapted graph)
    path: Path
    #: frames Frigate sent, for an INT8 rung (None: it has one, or none is wanted)
    ring: FrameRing | None = None
    rung_started: bool = False
    #: the other Frigate types the graph fits (a header naming one switches to it)
    fits: tuple[str, ...] = ()
    retyping: bool = False


@dataclass
class SentEndpoint:
    cfg: FrigateConfig
    address: str
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    served: ServedModel | None = None
    #: names whose serving model was logged, header model_types warned about (once each)
    logged: set[str] = field(default_factory=set)
    warned_types: set[str] = field(default_factory=set)
    #: new model files per client and minute (``transfers_per_minute``)
    pace: Pace | None = None
    #: a refusal is logged once per client and minute, not per message
    log_due: OncePerMinute = field(default_factory=OncePerMinute)
    #: what the last transfer's answer says of its class ids and Frigate's labelmap
    ids_note: str = ""

    def __post_init__(self) -> None:
        if self.pace is None:
            self.pace = Pace(self.cfg.transfers_per_minute)
