"""What every protocol room is given, and what the server asks of a room.

Why here, below the rooms and above the models: each protocol room (``native``,
``frigate``, ``kserve``) reads the same few facts (the config, the registry, the metrics,
whether the daemon serves) and admits requests through the same ``Admission``; the
server (``edged.server``) composes the rooms and drives them through ``Room`` alone, so
it knows no protocol and a protocol knows no other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import zmq.asyncio

from edged.config.file import Config
from edged.delivery.board import Board
from edged.delivery.store import VersionStore
from edged.metrics import Metrics
from edged.model.registry import Registry

if TYPE_CHECKING:
    from edged.model.contract import Prepared
    from edged.model.model import Model

#: a long-lived coroutine a room asks the lifecycle to run as a task, with its task name
Loop = tuple[str, Coroutine[Any, Any, None]]


class Offloader(Protocol):
    """Where a request may be computed instead of here (``protocols.kserve.offload``)."""

    def take(self, model: Model, prepared: Prepared, respond: Callable[[Any], None],
             arrival: float, priority: int, deadline: float | None) -> bool:
        """True when the request went elsewhere and ``respond`` will be called."""
        ...


@dataclass
class Serving:
    """The facts the rooms share; the server's ``ServerState`` is one of these."""

    config: Config
    metrics: Metrics
    registry: Registry
    #: starting -> serving -> draining -> stopped
    phase: str = "starting"
    ready: bool = False
    answered: int = 0
    #: where ``ipc://`` sockets live (``edged.host.runtime_dir``), resolved at start
    runtime_dir: Path | None = None
    #: the one ZeroMQ context of the process (the lifecycle terminates it last)
    zmq: zmq.asyncio.Context = field(default_factory=zmq.asyncio.Context)
    #: set by the lifecycle (the offload room; it takes nothing while ``[offload]`` is not
    #: configured): every room's requests may go
    offload: Offloader | None = None
    background: set[asyncio.Task[Any]] = field(default_factory=set)
    #: the one store of model versions (``edged.delivery.store``), opened by the lifecycle
    store: VersionStore | None = None
    #: what ``edged status`` and the metrics say of arriving versions, by either road
    #: (a delivered bundle, a model Frigate sends): ``edged.delivery.board``
    board: Board = field(init=False)

    def __post_init__(self) -> None:
        self.board = Board(self.metrics)

    @property
    def serving(self) -> bool:
        return self.phase == "serving"

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """A short-lived task (decode, swap, reload) kept referenced until done.

        asyncio holds tasks weakly; the lifecycle cancels whatever is left at stop."""
        t = asyncio.get_running_loop().create_task(coro)
        self.background.add(t)
        t.add_done_callback(self.background.discard)


@dataclass(frozen=True)
class Listener:
    """One bound address, as ``edged status`` lists it."""

    protocol: str  # "native", "frigate", "kserve-grpc", ...
    address: str
    #: what is served there, in a few words ("the model Frigate sends", a model name)
    serves: str = ""


class Room(Protocol):
    """A protocol's room as the lifecycle drives it: bind, run, reload, report, stop."""

    async def start(self, config: Config) -> None:
        """Bind what ``config`` asks (``StartupError`` naming the address on failure)."""
        ...

    def loops(self) -> list[Loop]:
        """The room's long-lived background loops, for the lifecycle to run as tasks."""
        ...

    async def apply(self, config: Config) -> list[str]:
        """A reloaded config: what the room can apply it does; returns problems."""
        ...

    def listeners(self) -> list[Listener]:
        ...

    def status(self) -> dict[str, Any]:
        """The room's own entries in the control ``status`` reply."""
        ...

    async def stop(self) -> None:
        ...
