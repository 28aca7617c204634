"""The hand-written ``ModelInferResponse`` bytes against tritonclient's own message classes.

Why: the gRPC endpoint writes its replies from prebuilt parts (``grpc_wire``), not through
the protobuf classes; if a part were mis-encoded, tritonclient (and Triton's tools) would
read a different answer or none. Each reply here is decoded by the generated class and
compared field by field with what edged meant to send.
"""

from __future__ import annotations

import numpy as np
import pytest

service_pb2 = pytest.importorskip("tritonclient.grpc.service_pb2",
                                  reason="the kserve extra is not installed")
from tritonclient.grpc import InferResult  # noqa: E402

from edged.protocols.kserve.grpc_wire import infer_response, varint  # noqa: E402

CASES = [
    ("digits", "a-1", "cnn-fp32", {"batch": 8, "queue_us": 0, "compute_us": 312},
     {}, [("logits", np.arange(20, dtype=np.float32).reshape(2, 10))]),
    ("person", "", "ssdlite-int8", {"batch": 1, "queue_us": 1 << 40, "compute_us": 7},
     {"labels": '{"columns":["x1"],"labels":["person"]}'},
     [("detections", np.zeros((0, 6), np.float32)), ("scores", np.float64(0.5) * np.ones(()))]),
    ("m\u00e9t\u00e9o", "\u2603" * 40, "", {"batch": 300, "queue_us": 5, "compute_us": 0},
     {"empty": ""}, [("u8", np.arange(300, dtype=np.uint8).reshape(3, 100)),
                     ("be", np.arange(4, dtype=">i8")), ("b", np.array([True, False]))]),
]


@pytest.mark.parametrize("case", CASES, ids=["logits", "detections", "odd-names-and-types"])
def test_a_reply_decodes_to_what_was_meant(case: tuple) -> None:
    model, id_, variant, timing, params, outputs = case
    msg = service_pb2.ModelInferResponse.FromString(
        infer_response(model, id_, variant, timing, params, outputs))
    assert (msg.model_name, msg.model_version, msg.id) == (model, "1", id_)
    got = {k: getattr(v, v.WhichOneof("parameter_choice")) for k, v in msg.parameters.items()}
    assert got == {"variant": variant, **timing, **params}
    assert [o.name for o in msg.outputs] == [n for n, _ in outputs]
    result = InferResult(msg)
    for name, arr in outputs:
        out = result.get_output(name)
        assert list(out.shape) == list(arr.shape)
        back = result.as_numpy(name)
        assert back.dtype == arr.dtype.newbyteorder("=")
        np.testing.assert_array_equal(back, arr)


@pytest.mark.parametrize("n", [0, 1, 127, 128, 300, 1 << 35, (1 << 63) - 1, -1])
def test_varints_match_protobufs(n: int) -> None:
    msg = service_pb2.InferParameter(int64_param=n)
    assert msg.SerializeToString() == b"\x10" + varint(n)
