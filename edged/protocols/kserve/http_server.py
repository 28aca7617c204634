"""The KServe v2 HTTP/REST server: ``/v2/...`` on aiohttp, on the daemon's event loop.

Tensors come as JSON ``data`` or through the binary-tensor extension (a JSON header of
``Inference-Header-Content-Length`` bytes, then each input's ``binary_data_size`` bytes),
and go back the way the request asks (``binary_data_output``, per output ``binary_data``).
Every error is a JSON ``{"error": ...}`` body with edged's message, the body-size limit
included (aiohttp's own 413 is plain text, which tritonclient cannot read).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
from aiohttp import web

from edged.errors import EdgedError, InvalidArgument, ResourceExhausted
from edged.protocols.kserve.core import InferAnswer, InferCall, KServeCore
from edged.protocols.kserve.tensors import as_wire, datatype, http_inputs

log = logging.getLogger("edged.protocols.kserve")

HEADER_LENGTH = "Inference-Header-Content-Length"
STATUS = {
    "INVALID_ARGUMENT": 400, "NOT_FOUND": 404, "RESOURCE_EXHAUSTED": 429,
    "DEADLINE_EXCEEDED": 504, "DROPPED": 409, "UNAVAILABLE": 503,
    "UNSUPPORTED_VERSION": 400, "INTERNAL": 500,
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(err: EdgedError, status: int | None = None) -> web.Response:
    return web.json_response({"error": str(err)}, status=status or STATUS.get(err.status, 500))


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """EdgedError -> its status; aiohttp's own HTTP errors -> JSON bodies too."""
    try:
        return await handler(request)
    except EdgedError as e:
        return _error(e)
    except web.HTTPRequestEntityTooLarge:
        return _too_large(request)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        return web.json_response({"error": e.reason}, status=e.status)


def _too_large(request: web.Request) -> web.Response:
    limit = request.app["max_bytes"]
    return _error(ResourceExhausted(f"the request body exceeds the limit of {limit} bytes "
                                    "([server.limits] max_message_bytes)"), 413)


class KServeHttpServer:
    """One aiohttp site on ``address``; started and stopped by the lifecycle."""

    def __init__(self, core: KServeCore, address: str) -> None:
        self.core = core
        self.address = address
        limits = core.state.config.server.limits
        app = web.Application(client_max_size=limits.max_message_bytes,
                              middlewares=[_errors])
        app["max_bytes"] = limits.max_message_bytes
        r = app.router
        r.add_get("/v2/health/live", self.live)
        r.add_get("/v2/health/ready", self.ready)
        r.add_get("/v2", self.server_metadata)
        r.add_get("/v2/models/stats", self.statistics)  # before {model} matches "stats"
        for base in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
            r.add_get(base, self.model_metadata)
            r.add_get(base + "/ready", self.model_ready)
            r.add_get(base + "/config", self.model_config)
            r.add_get(base + "/stats", self.statistics)
            r.add_post(base + "/infer", self.infer)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        self.port = 0

    async def start(self) -> None:
        from edged.config.kserve import split_hostport

        hp = split_hostport(self.address)
        assert hp is not None  # checked at config load
        await self._runner.setup()
        site = web.TCPSite(self._runner, hp[0], hp[1], reuse_address=True)
        try:
            await site.start()
        except OSError:
            await self._runner.cleanup()
            raise
        self.port = self._runner.addresses[0][1] if self._runner.addresses else hp[1]
        log.info("kserve http listening on %s", self.address)

    async def stop(self, grace_s: float) -> None:
        await self._runner.shutdown()
        await self._runner.cleanup()

    # -- health and metadata ----------------------------------------------------------
    async def live(self, request: web.Request) -> web.Response:
        ok = self.core.meta.live
        return web.json_response({"live": ok}, status=200 if ok else 503)

    async def ready(self, request: web.Request) -> web.Response:
        ok = self.core.meta.ready
        return web.json_response({"ready": ok}, status=200 if ok else 503)

    async def server_metadata(self, request: web.Request) -> web.Response:
        return web.json_response(self.core.meta.server_metadata())

    async def model_ready(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        self.core.meta.model(name, request.match_info.get("version", ""))  # 404 when unknown
        ok = self.core.meta.model_ready(name)
        return web.json_response({"name": name, "ready": ok}, status=200 if ok else 400)

    async def model_metadata(self, request: web.Request) -> web.Response:
        return web.json_response(self.core.meta.model_metadata(
            request.match_info["model"], request.match_info.get("version", "")))

    async def model_config(self, request: web.Request) -> web.Response:
        return web.json_response(self.core.meta.model_config(
            request.match_info["model"], request.match_info.get("version", "")))

    async def statistics(self, request: web.Request) -> web.Response:
        return web.json_response({"model_stats": self.core.meta.statistics(
            request.match_info.get("model", ""), request.match_info.get("version", ""))})

    # -- inference ----------------------------------------------------------------------
    async def infer(self, request: web.Request) -> web.Response:
        received = time.monotonic()
        name = request.match_info["model"]
        try:
            call, params, outs = await self._call(request, name, received)
        except EdgedError as e:
            self.core.refused("http", name, e, received)
            raise
        answer = await self.core.infer(call, "http")
        default_binary = params.get("binary_data_output") is True
        per_output = {o["name"]: (o.get("parameters") or {}).get("binary_data")
                      for o in outs or []}
        return _reply(answer, call.id, default_binary, per_output)

    async def _call(self, request: web.Request, name: str, received: float
                    ) -> tuple[InferCall, dict[str, Any], list[dict[str, Any]] | None]:
        """The request body -> InferCall (JSON header, then binary tensors if any)."""
        self.core.meta.model(name, request.match_info.get("version", ""))
        limits = self.core.state.config.server.limits
        if (request.content_length or 0) > limits.max_message_bytes:
            raise web.HTTPRequestEntityTooLarge(limits.max_message_bytes,
                                                request.content_length or 0)  # unread
        body = memoryview(await request.read())
        header_len = request.headers.get(HEADER_LENGTH)
        if header_len is not None:
            if not header_len.isdigit() or int(header_len) > len(body):
                raise InvalidArgument(f"{HEADER_LENGTH} {header_len!r} is not a length within "
                                      f"the {len(body)}-byte body")
            n = int(header_len)
        else:
            n = len(body)
        if n > limits.max_header_bytes:
            raise InvalidArgument(f"the JSON part is {n} bytes; the limit is "
                                  f"{limits.max_header_bytes}: send tensors with the binary "
                                  "tensor extension")
        try:
            doc = json.loads(bytes(body[:n]))
        except (ValueError, UnicodeDecodeError) as e:
            raise InvalidArgument(f"the request is not JSON: {e}") from None
        if not isinstance(doc, dict):
            raise InvalidArgument("the request must be a JSON object")
        rid = doc.get("id", "")
        if not isinstance(rid, str) or len(rid) > limits.max_id_length:
            raise InvalidArgument(f"id must be a string of at most {limits.max_id_length} "
                                  "characters")
        params = doc.get("parameters") or {}
        outs = doc.get("outputs")
        if not isinstance(params, dict) or (outs is not None and not (
                isinstance(outs, list) and all(isinstance(o, dict) and isinstance(
                    o.get("name"), str) for o in outs))):
            raise InvalidArgument("'parameters' must be an object and 'outputs' a list of "
                                  "{\"name\": ...} objects")
        asked = [o["name"] for o in outs] if outs else None
        call = InferCall(model=name, id=rid, inputs=http_inputs(doc, body[n:], limits),
                         outputs=asked, parameters=params, received=received)
        return call, params, outs


def _reply(answer: InferAnswer, rid: str, default_binary: bool,
           per_output: dict[str, Any]) -> web.Response:
    outputs: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for name, arr in answer.outputs:
        o: dict[str, Any] = {"name": name, "datatype": datatype(arr.dtype),
                             "shape": list(arr.shape)}
        binary = per_output.get(name)
        if binary if isinstance(binary, bool) else default_binary:
            blob = as_wire(arr)
            o["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            o["data"] = _json_data(arr)
        outputs.append(o)
    doc = {"model_name": answer.model, "model_version": "1", "id": rid,
           "parameters": {"variant": answer.variant, **answer.timing, **answer.parameters},
           "outputs": outputs}
    head = json.dumps(doc, separators=(",", ":")).encode()
    if not blobs:
        return web.Response(body=head, content_type="application/json")
    return web.Response(body=b"".join([head, *blobs]),
                        headers={HEADER_LENGTH: str(len(head)),
                                 "Content-Type": "application/octet-stream"})


def _json_data(arr: np.ndarray) -> list[Any]:
    return arr.reshape(-1).tolist()
