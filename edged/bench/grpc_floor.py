"""The gRPC floor of ``edged bench --peer ... --floor``: the simplest KServe v2 gRPC server
anyone could write in Python around one ONNX Runtime session.

Why: against Triton, edged's KServe gRPC endpoint pays two costs Triton's C++ front end
does not: grpcio's Python server machinery per call (its polling thread, the hand-off to a
handler thread, the messages built as Python objects) and edged's own serving (admission,
batching, deadlines, metrics). This server pays the first and nothing else: a grpcio
thread-pool server (``grpc.server``, as edged's), whose handler parses the request's raw
tensors, runs the session under a lock (one call at a time: no batching, so nothing of
edged's work is in it) and answers the raw outputs. So in one run ``edged/floor`` is
edged's own cost and ``peer/floor`` says how far the peer is from what any Python gRPC
server can do.

It answers what tritonclient asks: metadata, config, readiness and ``ModelInfer``
(``raw_input_contents``; the outputs in ``raw_output_contents``). It runs as a child
process (``GrpcFloor``) so the bench can freeze it like the other servers.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
from pathlib import Path
from typing import Any

import numpy as np

from edged.bench.floor import floor_session
from edged.testing.harness import free_port

#: handler threads (as edged's KServe gRPC server)
THREADS = 16


def serve(model: str, port: int, name: str, max_batch_size: int, ready: Any) -> None:
    """The floor server (child process): runs until terminated."""
    import concurrent.futures

    import grpc
    from google.protobuf import json_format
    from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc

    from edged.protocols.kserve.tensors import datatype, triton_type

    sess = floor_session(Path(model))
    ins, outs = sess.get_inputs(), sess.get_outputs()
    dtypes = {i.name: _numpy_type(i.type) for i in ins}
    lock = threading.Lock()

    def dims(shape: list[Any]) -> list[int]:
        return [d if isinstance(d, int) else -1 for d in shape]

    class Servicer(service_pb2_grpc.GRPCInferenceServiceServicer):
        def ServerLive(self, request: Any, context: Any) -> Any:
            return service_pb2.ServerLiveResponse(live=True)

        def ServerReady(self, request: Any, context: Any) -> Any:
            return service_pb2.ServerReadyResponse(ready=True)

        def ModelReady(self, request: Any, context: Any) -> Any:
            return service_pb2.ModelReadyResponse(ready=request.name == name)

        def ModelMetadata(self, request: Any, context: Any) -> Any:
            def meta(t: Any) -> dict[str, Any]:
                return {"name": t.name, "datatype": datatype(_numpy_type(t.type)),
                        "shape": dims(t.shape)}
            return json_format.ParseDict(
                {"name": name, "versions": ["1"], "platform": "onnxruntime_onnx",
                 "inputs": [meta(i) for i in ins], "outputs": [meta(o) for o in outs]},
                service_pb2.ModelMetadataResponse())

        def ModelConfig(self, request: Any, context: Any) -> Any:
            def tensor(t: Any) -> dict[str, Any]:
                return {"name": t.name, "data_type": triton_type(_numpy_type(t.type)),
                        "dims": dims(t.shape)[1:]}
            return service_pb2.ModelConfigResponse(config=json_format.ParseDict(
                {"name": name, "platform": "onnxruntime_onnx",
                 "max_batch_size": max_batch_size,
                 "input": [tensor(i) for i in ins], "output": [tensor(o) for o in outs]},
                model_config_pb2.ModelConfig()))

        def ModelInfer(self, request: Any, context: Any) -> Any:
            feeds = {t.name: np.frombuffer(raw, dtypes[t.name]).reshape(tuple(t.shape))
                     for t, raw in zip(request.inputs, request.raw_input_contents,
                                       strict=True)}
            with lock:
                ys = sess.run(None, feeds)
            resp = service_pb2.ModelInferResponse(model_name=name, model_version="1",
                                                  id=request.id)
            for o, y in zip(outs, ys, strict=True):
                out = resp.outputs.add()
                out.name, out.datatype = o.name, datatype(y.dtype)
                out.shape.extend(y.shape)
                resp.raw_output_contents.append(y.tobytes())
            return resp

    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=THREADS),
                         options=[("grpc.so_reuseport", 0)])
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(Servicer(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    ready.put(port)
    server.wait_for_termination()


def _numpy_type(ort_type: str) -> np.dtype:
    """``tensor(float)`` -> float32, as ONNX Runtime names its element types."""
    return np.dtype({"tensor(float)": np.float32, "tensor(float16)": np.float16,
                     "tensor(double)": np.float64, "tensor(uint8)": np.uint8,
                     "tensor(int8)": np.int8, "tensor(int32)": np.int32,
                     "tensor(int64)": np.int64, "tensor(bool)": np.bool_}[ort_type])


class GrpcFloor:
    """The gRPC floor as a child process serving ``model`` as ``name`` on loopback."""

    def __init__(self, model: Path, name: str, max_batch_size: int) -> None:
        ctx = mp.get_context("spawn")
        ready = ctx.Queue()
        self.port = free_port()
        self.proc = ctx.Process(target=serve, daemon=True,
                                args=(str(model), self.port, name, max_batch_size, ready))
        self.proc.start()
        try:
            ready.get(timeout=120)
        except Exception:
            self.close()
            raise RuntimeError("the gRPC floor server did not start within 120 s") from None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc.pid is not None
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc.is_alive()

    def close(self) -> None:
        """Stop it, frozen or not (a SIGTERM to a stopped process waits for SIGCONT)."""
        if self.proc.is_alive():
            os.kill(self.pid, signal.SIGCONT)
            self.proc.terminate()
        self.proc.join(5)

    def __enter__(self) -> GrpcFloor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
