"""The KServe v2 gRPC server on the daemon's event loop (``grpc.aio``): no thread per call.

Why it exists beside ``grpc_server`` (grpc's own handler threads): there, each call is
parsed on a handler thread and handed to the loop and back (two thread wake-ups a call,
and a GIL hand-off each); here the call's coroutine runs on the loop itself and calls
``KServeCore.begin`` directly, so a lone call computed inline (the express lane) never
leaves the loop. The price is that grpc.aio's own per-call Python runs on the loop too,
beside every other protocol's admission and replies. Which one serves is
``[server.kserve] grpc_server`` ("threads" or "loop"); docs/benchmarks.md has the
measurement that chose the default.

Everything a call means is shared with the threaded server: the same method handlers
(tritonclient's generated ones, ``ModelInfer`` on raw bytes) registered and bound the same
way (``register_and_bind``), the same metadata answers (``ANSWERS``), the same parsing
(``infer_call``) and the same reply bytes (``grpc_wire``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Any, NoReturn

import grpc

from edged.errors import EdgedError
from edged.protocols.kserve.core import InferAnswer, KServeCore, settle
from edged.protocols.kserve.grpc_server import (
    ANSWERS,
    CODES,
    infer_call,
    parse_request,
    register_and_bind,
    server_options,
)
from edged.protocols.kserve.grpc_wire import infer_response

log = logging.getLogger("edged.protocols.kserve")


class _LoopServicer:
    """Each RPC a coroutine on the daemon's loop: reads the daemon's state directly."""

    def __init__(self, core: KServeCore) -> None:
        self.core = core
        meta = core.meta
        for name, (fetch, build) in ANSWERS.items():
            setattr(self, name, self._unary(
                lambda r, fetch=fetch, build=build: build(fetch(meta, r))))

    def __getattr__(self, name: str) -> Any:
        """RPCs edged does not serve (repository, shared memory, trace, logging)."""
        async def unimplemented(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{name} is not served by edged")
        return unimplemented

    @staticmethod
    def _unary(answer: Any) -> Any:
        async def rpc(request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                return answer(request)
            except EdgedError as e:
                await _abort(context, e)
        return rpc

    async def ModelInfer(self, data: bytes, context: grpc.aio.ServicerContext) -> bytes:
        received = time.monotonic()
        request = None
        core = self.core
        try:
            request = parse_request(data)
            call = infer_call(core, request, context.time_remaining(), received,
                              core.meta.model)
        except EdgedError as e:
            core.refused("grpc", request.model_name if request else "", e, received)
            await _abort(context, e)
        fut: asyncio.Future[InferAnswer] = asyncio.get_running_loop().create_future()
        core.begin(call, "grpc", functools.partial(settle, fut))
        try:
            answer = await fut
        except EdgedError as e:
            await _abort(context, e)
        return infer_response(answer.model, request.id, answer.variant, answer.timing,
                              answer.parameters, answer.outputs)


async def _abort(context: grpc.aio.ServicerContext, err: EdgedError) -> NoReturn:
    await context.abort(CODES.get(err.status, grpc.StatusCode.INTERNAL), str(err))
    raise AssertionError("unreachable: abort raises")  # pragma: no cover


class KServeGrpcLoopServer:
    """One ``grpc.aio`` server on ``address`` on the running loop; started and stopped by
    the lifecycle. Calls in the batcher at once are bounded by admission, not threads."""

    def __init__(self, core: KServeCore, address: str) -> None:
        self.address = address
        self.core = core
        self._server = grpc.aio.server(options=server_options(core))
        self.port = 0

    async def start(self) -> None:
        self.port = register_and_bind(self._server, _LoopServicer(self.core), self.address)
        await self._server.start()
        log.info("kserve grpc (on the loop) listening on %s", self.address)

    async def stop(self, grace_s: float) -> None:
        """Refuse new calls; calls in flight get ``grace_s`` to finish."""
        await self._server.stop(grace_s)
