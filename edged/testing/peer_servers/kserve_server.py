"""KServe's ModelServer for a peer (``edged.testing.peers``): one ONNX file run by ONNX Runtime
as a ``kserve.Model``, served over KServe v2 gRPC and REST on loopback only. It runs in the
KServe peer's venv: ``python kserve_server.py SETTINGS.json --http_port P --grpc_port Q``.

Why the two patches before the server starts: ModelServer binds REST on ``0.0.0.0`` and
gRPC on ``[::]`` with no option to change either, and a peer on a shared machine must not
listen beyond loopback. Why ``max_rows``: ModelServer does not batch or check a request
against the model's metadata, so a request the model cannot run (a wrong dtype or shape,
more rows than ``max_rows``) fails inside ``predict`` and is answered HTTP 500 / gRPC
INTERNAL, as ModelServer answers any exception.
"""

import json
import sys
import uuid

import grpc.aio._server
import onnxruntime as ort
import uvicorn

LOOPBACK = "127.0.0.1"
_add_port = grpc.aio._server.Server.add_insecure_port
_Config = uvicorn.Config


def _loopback_port(self, address):
    return _add_port(self, f"{LOOPBACK}:{address.rsplit(':', 1)[1]}")


class _LoopbackConfig(_Config):
    def __init__(self, *args, **kwargs):
        kwargs["host"] = LOOPBACK
        super().__init__(*args, **kwargs)


grpc.aio._server.Server.add_insecure_port = _loopback_port
uvicorn.Config = _LoopbackConfig

import kserve  # noqa: E402  (after the patches: it binds through them)
from kserve.protocol.infer_type import InferOutput, InferResponse  # noqa: E402
from kserve.utils.numpy_codec import from_np_dtype  # noqa: E402

_ORT_TYPES = {"tensor(float)": "FP32", "tensor(float16)": "FP16", "tensor(double)": "FP64",
              "tensor(uint8)": "UINT8", "tensor(int8)": "INT8", "tensor(int32)": "INT32",
              "tensor(int64)": "INT64", "tensor(bool)": "BOOL"}


def _meta(args):
    return [{"name": a.name, "datatype": _ORT_TYPES.get(a.type, a.type),
             "shape": [d if isinstance(d, int) else -1 for d in a.shape]} for a in args]


class OnnxModel(kserve.Model):
    def __init__(self, settings):
        super().__init__(settings["name"])
        self.settings = settings
        self.load()

    def load(self):
        so = ort.SessionOptions()
        so.intra_op_num_threads = int(self.settings.get("threads", 0))
        so.log_severity_level = 3
        self.session = ort.InferenceSession(self.settings["onnx"], so,
                                            providers=["CPUExecutionProvider"])
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.ready = True
        return True

    def get_input_types(self):
        return _meta(self.session.get_inputs())

    def get_output_types(self):
        return _meta(self.session.get_outputs())

    async def predict(self, payload, headers=None, response_headers=None):
        feeds = {i.name: i.as_numpy() for i in payload.inputs}
        rows = max(len(a) for a in feeds.values())
        limit = int(self.settings.get("max_rows", 0))
        if limit and rows > limit:
            raise ValueError(f"{rows} rows; this model takes at most {limit}")
        outs = self.session.run(self.output_names, feeds)
        infer_outputs = []
        for name, o in zip(self.output_names, outs, strict=True):
            out = InferOutput(name, list(o.shape), from_np_dtype(o.dtype))
            out.set_data_from_numpy(o, binary_data=True)  # REST converts as the request asks
            infer_outputs.append(out)
        return InferResponse(response_id=payload.id or str(uuid.uuid4()), model_name=self.name,
                             infer_outputs=infer_outputs,
                             use_binary_outputs=payload.use_binary_outputs,
                             requested_outputs=payload.request_outputs)


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        model = OnnxModel(json.load(f))
    kserve.ModelServer().start([model])
