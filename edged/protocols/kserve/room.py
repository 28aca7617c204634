"""The KServe v2 endpoint's owner: binds, re-binds on reload, and closes its two servers.

Why a room apart from the gRPC and HTTP servers: the lifecycle starts and stops one thing,
and a reload that changes or removes ``[server.kserve]`` is applied here (the listeners
are not asyncio tasks but servers with their own start/stop). grpc and aiohttp are
imported only when an address is configured, so the daemon runs without the extra.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from edged.config.file import Config
from edged.config.kserve import EXTRA_HINT, GRPC_SERVERS, KServeConfig
from edged.errors import StartupError
from edged.host.ports import Where, bind_failed
from edged.protocols.kserve.core import KServeCore
from edged.protocols.serving import Listener, Loop, Serving

log = logging.getLogger("edged.protocols.kserve")

#: seconds a call in flight gets to finish when a listener closes (reload or stop)
CLOSE_GRACE_S = 2.0


class KServeRoom:
    def __init__(self, state: Serving) -> None:
        self.state = state
        self.core = KServeCore(state)
        self.cfg = KServeConfig()
        self._file: str | None = None  # the config file, named when a port is taken
        self._servers: dict[str, Any] = {}  # "grpc" | "http" -> KServeGrpcServer | KServeHttpServer

    @property
    def addresses(self) -> dict[str, str]:
        return {kind: f"{s.address} (port {s.port})" for kind, s in self._servers.items()}

    async def start(self, config: Config) -> None:
        """Bind what ``[server.kserve]`` asks; the StartupError names the address or the
        missing extra."""
        cfg = self.cfg = config.server.kserve
        self._file = str(config.file)
        for kind in ("grpc", "http"):
            address = getattr(cfg, kind)
            if address:
                try:
                    await self._open(kind, address)
                except (OSError, ImportError) as e:
                    raise StartupError(str(e)) from None

    def loops(self) -> list[Loop]:
        return []  # grpc runs its own threads, aiohttp its server on the loop

    def listeners(self) -> list[Listener]:
        return [Listener(f"kserve-{kind}", f"{s.address} (port {s.port})", "every model")
                for kind, s in self._servers.items()]

    def status(self) -> dict[str, Any]:
        return {"kserve": self.addresses}

    async def _open(self, kind: str, address: str) -> None:
        try:
            if kind == "grpc":
                module, name = GRPC_SERVERS[self.cfg.grpc_server]
                cls = getattr(importlib.import_module(module), name)
            else:
                from edged.protocols.kserve.http_server import KServeHttpServer as cls  # type: ignore[assignment]
        except ImportError as e:
            raise ImportError(f"[server.kserve] {kind}: the kserve extra is missing ({e}); "
                              f"{EXTRA_HINT}") from None
        server = cls(self.core, address)
        try:
            await server.start()
        except OSError as e:
            await server.stop(0)
            where = Where(f"[server.kserve] {kind}", None, self._file)
            raise OSError(bind_failed(address, e, where)) from None
        self._servers[kind] = server

    async def apply(self, config: Config) -> list[str]:
        """After a reload: close listeners whose address went or changed, open new ones.
        Returns problems (a new address that cannot be bound); the rest still applies."""
        cfg = config.server.kserve
        moved_grpc = cfg.grpc_server != self.cfg.grpc_server  # the other server reopens it
        self.cfg = cfg
        problems = []
        for kind in ("grpc", "http"):
            new = getattr(cfg, kind)
            cur = self._servers.get(kind)
            if cur is not None and cur.address == new and not (kind == "grpc" and moved_grpc):
                continue
            if cur is not None:
                await cur.stop(CLOSE_GRACE_S)
                del self._servers[kind]
                log.info("kserve %s on %s closed by reload", kind, cur.address)
            if new:
                try:
                    await self._open(kind, new)
                except (OSError, ImportError) as e:
                    log.error("%s", e)
                    problems.append(str(e))
        return problems

    async def stop(self) -> None:
        for server in self._servers.values():
            await server.stop(CLOSE_GRACE_S)
        self._servers.clear()
        self.core.close()
