"""The KServe v2 endpoint's owner: binds, re-binds on reload, and closes its two servers.

Why a room apart from the gRPC and HTTP ones: the lifecycle starts and stops one thing,
and a reload that changes or removes ``[server.kserve]`` is applied here (the listeners
are not asyncio tasks but servers with their own start/stop). grpc and aiohttp are
imported only when an address is configured, so the daemon runs without the extra.
"""

from __future__ import annotations

import logging
from typing import Any

from edged.kserve.config import EXTRA_HINT, KServeConfig
from edged.server.kserve_support import KServeCore
from edged.server.state import ServerState

log = logging.getLogger("edged.kserve")

#: seconds a call in flight gets to finish when a listener closes (reload or stop)
CLOSE_GRACE_S = 2.0


class KServeRoom:
    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.core = KServeCore(state)
        self.cfg = KServeConfig()
        self._servers: dict[str, Any] = {}  # "grpc" | "http" -> KServeGrpc | KServeHttp

    @property
    def addresses(self) -> dict[str, str]:
        return {kind: f"{s.address} (port {s.port})" for kind, s in self._servers.items()}

    async def start(self, cfg: KServeConfig) -> None:
        """Bind what ``cfg`` asks; OSError / ImportError name the address or the extra."""
        self.cfg = cfg
        for kind in ("grpc", "http"):
            address = getattr(cfg, kind)
            if address:
                await self._open(kind, address)
        self.state.kserve_endpoints = self.addresses

    async def _open(self, kind: str, address: str) -> None:
        try:
            if kind == "grpc":
                from edged.server.kserve_grpc import KServeGrpc as cls
            else:
                from edged.server.kserve_http import KServeHttp as cls  # type: ignore[assignment]
        except ImportError as e:
            raise ImportError(f"[server.kserve] {kind}: the kserve extra is missing ({e}); "
                              f"{EXTRA_HINT}") from None
        server = cls(self.core, address)
        try:
            await server.start()
        except OSError as e:
            await server.stop(0)
            raise OSError(f"[server.kserve] {kind} = {address!r}: {e.strerror or e}") from None
        self._servers[kind] = server

    async def apply(self, cfg: KServeConfig) -> list[str]:
        """After a reload: close listeners whose address went or changed, open new ones.
        Returns problems (a new address that cannot be bound); the rest still applies."""
        problems = []
        for kind in ("grpc", "http"):
            new = getattr(cfg, kind)
            cur = self._servers.get(kind)
            if cur is not None and cur.address == new:
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
        self.cfg = cfg
        self.state.kserve_endpoints = self.addresses
        return problems

    async def stop(self) -> None:
        for server in self._servers.values():
            await server.stop(CLOSE_GRACE_S)
        self._servers.clear()
        self.state.kserve_endpoints = {}
        self.core.close()
