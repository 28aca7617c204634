"""The KServe v2 gRPC room: ``inference.GRPCInferenceService`` on the daemon's event loop.

Why tritonclient's generated modules: they are the messages Triton's own client sends,
including Triton's ModelConfig and ModelStatistics extensions that the Open Inference
Protocol's proto lacks (docs/kserve.md says why, with the pins). Outputs always travel in
``raw_output_contents``: tritonclient's ``as_numpy`` reads only those.
RPCs edged does not serve (repository, shared memory, trace, logging) answer
UNIMPLEMENTED from the generated base class.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import grpc
import grpc.aio
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc

from edged.errors import EdgedError, InvalidArgument
from edged.protocols.kserve.core import InferCall, KServeCore
from edged.protocols.kserve.tensors import as_wire, datatype, grpc_inputs

log = logging.getLogger("edged.kserve")

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


def _param(p: Any) -> Any:
    kind = p.WhichOneof("parameter_choice")
    return getattr(p, kind) if kind else None


class _Servicer(service_pb2_grpc.GRPCInferenceServiceServicer):
    def __init__(self, core: KServeCore) -> None:
        self.core = core

    async def _fail(self, context: grpc.aio.ServicerContext, err: EdgedError) -> None:
        await context.abort(CODES.get(err.status, grpc.StatusCode.INTERNAL), str(err))

    async def ServerLive(self, request: Any, context: Any) -> Any:
        return service_pb2.ServerLiveResponse(live=self.core.live)

    async def ServerReady(self, request: Any, context: Any) -> Any:
        return service_pb2.ServerReadyResponse(ready=self.core.ready)

    async def ModelReady(self, request: Any, context: Any) -> Any:
        return service_pb2.ModelReadyResponse(ready=self.core.model_ready(request.name))

    async def ServerMetadata(self, request: Any, context: Any) -> Any:
        return service_pb2.ServerMetadataResponse(**self.core.server_metadata())

    async def ModelMetadata(self, request: Any, context: Any) -> Any:
        try:
            md = self.core.model_metadata(request.name, request.version)
        except EdgedError as e:
            await self._fail(context, e)
        return json_format.ParseDict(md, service_pb2.ModelMetadataResponse())

    async def ModelConfig(self, request: Any, context: Any) -> Any:
        try:
            cfg = self.core.model_config(request.name, request.version)
        except EdgedError as e:
            await self._fail(context, e)
        return service_pb2.ModelConfigResponse(
            config=json_format.ParseDict(cfg, model_config_pb2.ModelConfig()))

    async def ModelStatistics(self, request: Any, context: Any) -> Any:
        try:
            stats = self.core.statistics(request.name, request.version)
        except EdgedError as e:
            await self._fail(context, e)
        return json_format.ParseDict({"model_stats": stats},
                                     service_pb2.ModelStatisticsResponse())

    async def ModelInfer(self, request: Any, context: Any) -> Any:
        received = time.monotonic()
        try:
            call = self._call(request, context, received)
        except EdgedError as e:
            self.core.refused("grpc", request.model_name, e, received)
            await self._fail(context, e)
        try:
            answer = await self.core.infer(call, "grpc")
        except EdgedError as e:
            await self._fail(context, e)
        resp = service_pb2.ModelInferResponse(model_name=answer.model, model_version="1",
                                              id=request.id)
        resp.parameters["variant"].string_param = answer.variant
        resp.parameters["batch"].int64_param = answer.timing["batch"]
        resp.parameters["queue_us"].int64_param = answer.timing["queue_us"]
        resp.parameters["compute_us"].int64_param = answer.timing["compute_us"]
        for key, value in answer.parameters.items():
            resp.parameters[key].string_param = value
        for name, arr in answer.outputs:
            out = resp.outputs.add()
            out.name = name
            out.datatype = datatype(arr.dtype)
            out.shape.extend(arr.shape)
            resp.raw_output_contents.append(as_wire(arr))
        return resp

    def _call(self, request: Any, context: Any, received: float) -> InferCall:
        limits = self.core.state.config.server.limits
        if request.model_version not in ("", "1"):
            self.core.model(request.model_name, request.model_version)  # raises
        if len(request.id) > limits.max_id_length:
            raise InvalidArgument(f"id is longer than {limits.max_id_length} characters")
        outputs = [o.name for o in request.outputs] or None
        if outputs is not None and len(set(outputs)) != len(outputs):
            raise InvalidArgument("an output is asked for twice")
        left = context.time_remaining()
        return InferCall(model=request.model_name, id=request.id,
                         inputs=grpc_inputs(request, limits), outputs=outputs,
                         parameters={k: _param(v) for k, v in request.parameters.items()},
                         client_deadline_s=left, received=received)


class KServeGrpcRoom:
    """One grpc.aio server on ``address``; started and stopped by the lifecycle."""

    def __init__(self, core: KServeCore, address: str) -> None:
        self.address = address
        limits = core.state.config.server.limits
        self._server = grpc.aio.server(options=[
            ("grpc.max_receive_message_length", limits.max_message_bytes),
            ("grpc.max_send_message_length", -1),
            ("grpc.so_reuseport", 0),
        ])
        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(_Servicer(core),
                                                                    self._server)
        self.port = 0

    async def start(self) -> None:
        try:
            self.port = self._server.add_insecure_port(self.address)
        except RuntimeError as e:  # grpc raises instead of returning 0 since 1.5x
            raise OSError(f"cannot bind {self.address}: {e}") from None
        if not self.port:
            raise OSError(f"cannot bind {self.address}")
        await self._server.start()
        log.info("kserve grpc listening on %s", self.address)

    async def stop(self, grace_s: float) -> None:
        """Refuse new calls; calls in flight get ``grace_s`` to finish."""
        await self._server.stop(grace_s)
