"""MLServer's runtime for a peer (``edged.testing.peers``): one ONNX file run by ONNX Runtime.
It runs inside MLServer, in the MLServer peer's venv (``model-settings.json`` names it).

Why a runtime of our own: MLServer ships runtimes for scikit-learn, XGBoost, MLflow and
others, none for ONNX. This is the small class its docs tell a user to write. MLServer
does not check a request against the model's declared inputs, so a wrong dtype or shape
fails in ``session.run`` (HTTP 500 / gRPC INTERNAL, as MLServer answers any exception),
and so does a request of more rows than the model's ``max_rows`` parameter.
"""

import onnxruntime as ort
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


class OnnxRuntime(MLModel):
    async def load(self) -> bool:
        extra = self.settings.parameters.extra or {}
        so = ort.SessionOptions()
        so.intra_op_num_threads = int(extra.get("threads", 0))
        so.log_severity_level = 3
        self.max_rows = int(extra.get("max_rows", 0))
        self.session = ort.InferenceSession(self.settings.parameters.uri, so,
                                            providers=["CPUExecutionProvider"])
        self.output_names = [o.name for o in self.session.get_outputs()]
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        feeds = {i.name: NumpyCodec.decode_input(i) for i in payload.inputs}
        rows = max(len(a) for a in feeds.values())
        if self.max_rows and rows > self.max_rows:
            raise ValueError(f"{rows} rows; this model takes at most {self.max_rows}")
        outs = self.session.run(self.output_names, feeds)
        return InferenceResponse(
            model_name=self.name, id=payload.id,
            outputs=[NumpyCodec.encode_output(n, o) for n, o in
                     zip(self.output_names, outs, strict=True)])
