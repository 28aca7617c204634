"""A real ONNX model whose run time is set by a Loop trip count.

Why: queueing, deadlines, freshest-frame and watchdog tests need a backend that is
busy for a known while. This is a genuine ORT session (nothing mocked): a Loop of
MatMul+Tanh over a [N,64] input, run ``trip_count + int(max(x))`` times, so warm-up on
zeros costs only the base count and a test can ask for a long "hang" through its data.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: A small base trip count (warm-up is quick) and an input value that keeps the model
#: busy for about a second on any CPU: it loops ``trip_count + max(x)`` times.
BASE_TRIP = 2000
BUSY = 250000.0


def tanh_loop_body() -> onnx.GraphProto:
    """A Loop body of one Tanh on a [1] float carried value (``h_in`` → ``h_out``): the
    slowest-per-byte step a graph can wait on, for a model made slow by its trip count."""
    return helper.make_graph(
        [helper.make_node("Tanh", ["h_in"], ["h_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_in", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", TensorProto.FLOAT, [1])])


def make_slow_model(path: Path, trip_count: int) -> Path:
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((64, 64)) * 0.1).astype(np.float32)
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["h_in", "W"], ["mm"]),
            helper.make_node("Tanh", ["mm"], ["h_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_in", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", TensorProto.FLOAT, ["N", 64])],
    )
    graph = helper.make_graph(
        [
            helper.make_node("ReduceMax", ["x"], ["xmax"], keepdims=0),
            helper.make_node("Cast", ["xmax"], ["extra"], to=TensorProto.INT64),
            helper.make_node("Add", ["M0", "extra"], ["M"]),
            helper.make_node("Loop", ["M", "cond", "x"], ["y"], body=body),
        ],
        "slow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 64])],
        initializer=[
            numpy_helper.from_array(np.array(trip_count, dtype=np.int64), "M0"),
            numpy_helper.from_array(np.array(True), "cond"),
            numpy_helper.from_array(w, "W"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def measure(path: Path) -> float:
    """Seconds per batch-1 run in this process (for choosing a trip count)."""
    import onnxruntime as ort

    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = np.zeros((1, 64), np.float32)
    s.run(None, {"x": x})
    t = time.perf_counter()
    s.run(None, {"x": x})
    return time.perf_counter() - t
