"""The KServe v2 gRPC server: ``inference.GRPCInferenceService`` on grpc's own threads.

Why grpc's threads and not ``grpc.aio`` on the event loop: with ``grpc.aio`` the library's
own per-call work (HTTP/2 framing, its Cython callbacks, the socket writes) runs on the
event loop, which also admits, batches and answers every protocol's requests; profiled
on a small model under 8 clients it was two thirds of the loop's time, and the loop was
the bottleneck. With the thread-pool server that work runs in grpc's C-core threads and
a handler thread parses the call; the loop only admits and answers (``KServeCore.begin``,
one hand-off each way).

Why tritonclient's generated modules: they are the messages Triton's own client sends,
including Triton's ModelConfig and ModelStatistics extensions that the Open Inference
Protocol's proto lacks (docs/kserve.md says why, with the pins). Outputs always travel in
``raw_output_contents``: tritonclient's ``as_numpy`` reads only those.
RPCs edged does not serve (repository, shared memory, trace, logging) answer
UNIMPLEMENTED from the generated base class.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable
from typing import Any, NoReturn

import grpc
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc

from edged.errors import EdgedError, InvalidArgument
from edged.host.thread_names import name_os_thread
from edged.protocols.kserve.core import InferAnswer, InferCall, KServeCore
from edged.protocols.kserve.grpc_wire import infer_response
from edged.protocols.kserve.metadata import KServeMetadata
from edged.protocols.kserve.tensors import grpc_inputs

log = logging.getLogger("edged.protocols.kserve")

#: the service tritonclient's generated code names
SERVICE = "inference.GRPCInferenceService"

#: handler threads of the gRPC server: calls that can wait in the batcher at once
GRPC_THREADS = 16

#: edged status -> gRPC code (DROPPED: a newer frame of the same stream replaced it)
CODES = {
    "INVALID_ARGUMENT": grpc.StatusCode.INVALID_ARGUMENT,
    "NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "RESOURCE_EXHAUSTED": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "DEADLINE_EXCEEDED": grpc.StatusCode.DEADLINE_EXCEEDED,
    "DROPPED": grpc.StatusCode.ABORTED,
    "UNAVAILABLE": grpc.StatusCode.UNAVAILABLE,
    "UNSUPPORTED_VERSION": grpc.StatusCode.INVALID_ARGUMENT,
    "INTERNAL": grpc.StatusCode.INTERNAL,
}


#: the RPCs answered from ``KServeCore.meta``: name -> (what to read of the daemon, on the
#: loop; the response message built from it). Both gRPC servers answer from this table.
ANSWERS: dict[str, tuple[Callable[[KServeMetadata, Any], Any], Callable[[Any], Any]]] = {
    "ServerLive": (lambda m, r: m.live, lambda v: service_pb2.ServerLiveResponse(live=v)),
    "ServerReady": (lambda m, r: m.ready, lambda v: service_pb2.ServerReadyResponse(ready=v)),
    "ModelReady": (lambda m, r: m.model_ready(r.name),
                   lambda v: service_pb2.ModelReadyResponse(ready=v)),
    "ServerMetadata": (lambda m, r: m.server_metadata(),
                       lambda v: service_pb2.ServerMetadataResponse(**v)),
    "ModelMetadata": (lambda m, r: m.model_metadata(r.name, r.version),
                      lambda v: json_format.ParseDict(v, service_pb2.ModelMetadataResponse())),
    "ModelConfig": (lambda m, r: m.model_config(r.name, r.version),
                    lambda v: service_pb2.ModelConfigResponse(
                        config=json_format.ParseDict(v, model_config_pb2.ModelConfig()))),
    "ModelStatistics": (lambda m, r: m.statistics(r.name, r.version),
                        lambda v: json_format.ParseDict({"model_stats": v},
                                                        service_pb2.ModelStatisticsResponse())),
}


def server_options(core: KServeCore) -> list[tuple[str, Any]]:
    """The channel options both gRPC servers take: the request size limit, no reply limit,
    no port sharing (a second daemon on the same port must fail to bind)."""
    limits = core.state.config.server.limits
    return [("grpc.max_receive_message_length", limits.max_message_bytes),
            ("grpc.max_send_message_length", -1),
            ("grpc.so_reuseport", 0)]


def register_and_bind(server: Any, servicer: Any, address: str) -> int:
    """Register ``servicer``'s method handlers (``method_handlers``) on ``server`` and bind
    ``address``: the port, or the OSError naming the address."""
    handlers = method_handlers(servicer)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_registered_method_handlers(SERVICE, handlers)
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as e:  # grpc raises instead of returning 0 since 1.5x
        raise OSError(f"cannot bind {address}: {e}") from None
    if not port:
        raise OSError(f"cannot bind {address}")
    return int(port)


def _param(p: Any) -> Any:
    kind = p.WhichOneof("parameter_choice")
    return getattr(p, kind) if kind else None


class _Servicer(service_pb2_grpc.GRPCInferenceServiceServicer):
    """Each RPC on a grpc handler thread; what reads or changes the daemon runs on its
    event loop (``_on_loop``), infer through ``KServeCore.begin``."""

    def __init__(self, core: KServeCore, loop: asyncio.AbstractEventLoop) -> None:
        self.core = core
        self.loop = loop
        for name, (fetch, build) in ANSWERS.items():
            setattr(self, name, self._answer(name, fetch, build))

    def _answer(self, name: str, fetch: Callable[..., Any], build: Callable[[Any], Any]
                ) -> Callable[[Any, Any], Any]:
        """The RPC ``name``: ``fetch`` on the loop (liveness here: it answers while the
        loop is busy), ``build`` on this thread."""
        meta = self.core.meta
        if name == "ServerLive":
            return lambda request, context: build(fetch(meta, request))
        return lambda request, context: build(self._on_loop(context, fetch, meta, request))

    def _on_loop(self, context: grpc.ServicerContext | None, fn: Callable[..., Any],
                 *args: Any) -> Any:
        """``fn(*args)`` called on the event loop; an EdgedError ends the RPC with its code
        (raised as it is without a ``context``)."""
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            try:
                fut.set_result(fn(*args))
            except BaseException as e:
                fut.set_exception(e)

        self.loop.call_soon_threadsafe(run)
        try:
            return fut.result()
        except EdgedError as e:
            if context is None:
                raise
            _abort(context, e)

    def ModelInfer(self, data: bytes, context: Any) -> bytes:
        """The raw-bytes handler (``method_handlers``): the request parsed once, here, and the
        reply written from prebuilt parts (``grpc_wire``), no message objects between."""
        received = time.monotonic()
        request = None
        try:
            request = parse_request(data)
            call = infer_call(self.core, request, context.time_remaining(), received,
                              lambda name, version: self._on_loop(
                                  None, self.core.meta.model, name, version))
        except EdgedError as e:
            self.loop.call_soon_threadsafe(self.core.refused, "grpc",
                                           request.model_name if request else "", e, received)
            _abort(context, e)
        fut: concurrent.futures.Future[InferAnswer | EdgedError] = concurrent.futures.Future()
        self.core.arriving.append(None)  # seen by the express lane before begin runs
        self.loop.call_soon_threadsafe(self.core.begin, call, "grpc", fut.set_result, True)
        answer = fut.result()
        if isinstance(answer, EdgedError):
            _abort(context, answer)
        return infer_response(answer.model, request.id, answer.variant, answer.timing,
                              answer.parameters, answer.outputs)


def infer_call(core: KServeCore, request: Any, left: float | None, received: float,
               check_version: Callable[[str, str], Any]) -> InferCall:
    """A parsed ``ModelInferRequest`` -> the call ``KServeCore.begin`` takes: the checks
    that need nothing of the daemon's state but its config (``check_version``: asks the
    loop about a version other than "" or "1", raising its EdgedError)."""
    limits = core.state.config.server.limits
    if request.model_version not in ("", "1"):
        check_version(request.model_name, request.model_version)
    if len(request.id) > limits.max_id_length:
        raise InvalidArgument(f"id is longer than {limits.max_id_length} characters")
    outputs = [o.name for o in request.outputs] or None
    if outputs is not None and len(set(outputs)) != len(outputs):
        raise InvalidArgument("an output is asked for twice")
    return InferCall(model=request.model_name, id=request.id,
                     inputs=grpc_inputs(request, limits), outputs=outputs,
                     parameters={k: _param(v) for k, v in request.parameters.items()},
                     client_deadline_s=left, received=received)


def parse_request(data: bytes) -> Any:
    """The raw ``ModelInfer`` body as a ``ModelInferRequest`` (parsed once, here)."""
    try:
        return service_pb2.ModelInferRequest.FromString(data)
    except DecodeError:
        raise InvalidArgument("the request is not a ModelInferRequest message") from None


class _Recorder:
    """Stands in for a server to catch the generated code's method handlers."""

    def __init__(self) -> None:
        self.handlers: dict[str, grpc.RpcMethodHandler] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass

    def add_registered_method_handlers(self, service: str,
                                       handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        self.handlers = dict(handlers)


def method_handlers(servicer: Any) -> dict[str, grpc.RpcMethodHandler]:
    """The service's method handlers as tritonclient's generated code makes them, but
    ``ModelInfer`` without a (de)serialiser: its handler takes and returns bytes."""
    rec = _Recorder()
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, rec)
    if "ModelInfer" not in rec.handlers:  # tritonclient's generated code changed its calls
        raise RuntimeError("tritonclient's generated service registered no ModelInfer handler")
    rec.handlers["ModelInfer"] = grpc.unary_unary_rpc_method_handler(servicer.ModelInfer)
    return rec.handlers


def _abort(context: grpc.ServicerContext, err: EdgedError) -> NoReturn:
    context.abort(CODES.get(err.status, grpc.StatusCode.INTERNAL), str(err))
    raise AssertionError("unreachable: abort raises")  # pragma: no cover


class KServeGrpcServer:
    """One thread-pool grpc server on ``address``; started and stopped by the lifecycle.

    ``threads`` handler threads: each holds one call from its arrival to its answer
    (waiting, not computing, while the call is queued and batched), so this many calls
    can be in the batcher at once; more wait in grpc until one is answered."""

    def __init__(self, core: KServeCore, address: str, threads: int = GRPC_THREADS) -> None:
        self.address = address
        self.core = core
        self._server = grpc.server(
            concurrent.futures.ThreadPoolExecutor(max_workers=threads,
                                                  thread_name_prefix="edged-grpc",
                                                  initializer=name_os_thread),
            options=server_options(core))
        self.port = 0

    async def start(self) -> None:
        self.port = register_and_bind(
            self._server, _Servicer(self.core, asyncio.get_running_loop()), self.address)
        self._server.start()
        log.info("kserve grpc listening on %s", self.address)

    async def stop(self, grace_s: float) -> None:
        """Refuse new calls; calls in flight get ``grace_s`` to finish (their answers come
        from the loop, which goes on meanwhile)."""
        stopped = self._server.stop(grace_s)
        await asyncio.to_thread(stopped.wait)
