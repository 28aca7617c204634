"""Artifacts that are broken on disk or wrong at run time, for fault tests.

Real files and a real ONNX model, nothing mocked: the daemon must meet each fault the
way it would on a device.
"""

from __future__ import annotations

import random
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from support.paths import MODELS

GOOD = MODELS / "cnn-fp32.onnx"
BROKEN_KINDS = ("missing", "empty", "truncated", "corrupt", "directory")


def broken_artifact(tmp: Path, kind: str) -> Path:
    """A model path in ``tmp`` that is ``kind`` (one of :data:`BROKEN_KINDS`)."""
    p = tmp / f"{kind}.onnx"
    data = GOOD.read_bytes()
    if kind == "missing":
        return p
    if kind == "empty":
        p.write_bytes(b"")
    elif kind == "truncated":
        p.write_bytes(data[: len(data) // 2])
    elif kind == "corrupt":
        p.write_bytes(random.Random(6).randbytes(len(data)))
    elif kind == "directory":
        p.mkdir()
    return p


def make_batch_collapsing_model(path: Path, item: tuple[int, ...] = (4,)) -> Path:
    """A real ONNX model whose output has 1 row whatever the batch: ReduceMean over axis 0
    with keepdims. Loads and warms up fine; wrong only when a batch has > 1 row.
    ``item``: an input row's shape (``(1, 2, 2)``: a grey 2x2 image, NCHW)."""
    graph = helper.make_graph(
        [helper.make_node("ReduceMean", ["x"], ["y"], axes=[0], keepdims=1)],
        "collapse",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *item])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, *item])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path
