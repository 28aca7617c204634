"""Triton's python-backend model for a peer (``edged.testing.peers``): one ONNX file run by
ONNX Runtime. It runs inside Triton's stub process, in the Triton peer's venv.

Why a python-backend model: the Triton that ``nvidia-pytriton`` bundles has no ONNX Runtime
backend, only the python one. Triton itself checks names, dtypes, shapes and
``max_batch_size`` against ``config.pbtxt`` and forms the batches (dynamic batching); this
stacks the requests Triton hands over into one ``session.run`` and splits the result.
"""

import json

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        so = ort.SessionOptions()
        so.intra_op_num_threads = int(params.get("threads", "0"))
        so.log_severity_level = 3
        self.session = ort.InferenceSession(params["onnx"], so,
                                            providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs()]

    def execute(self, requests):
        arrays = [{n: pb_utils.get_input_tensor_by_name(r, n).as_numpy() for n in self.inputs}
                  for r in requests]
        try:
            feeds = {n: np.concatenate([a[n] for a in arrays]) for n in self.inputs}
            outs = self.session.run(self.outputs, feeds)
        except Exception as e:  # the whole batch fails: each request gets the error
            err = pb_utils.TritonError(f"{type(e).__name__}: {e}")
            return [pb_utils.InferenceResponse(output_tensors=[], error=err) for _ in requests]
        responses = []
        start = 0
        for a in arrays:
            end = start + a[self.inputs[0]].shape[0]
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor(name, np.ascontiguousarray(o[start:end]))
                for name, o in zip(self.outputs, outs, strict=True)]))
            start = end
        return responses
