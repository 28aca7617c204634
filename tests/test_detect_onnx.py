"""A real ONNX model with Ultralytics-style metadata, run by ONNX Runtime, post-processed.

The graph passes its input through (Identity), so the test controls the exact
output tensor while labels, output names and shapes come from a real model file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from edged.config.postprocess import PostprocessConfig
from edged.config.schema import Table
from edged.detect.labels import onnx_metadata
from edged.detect.outputs import OutputMismatch
from edged.detect.postprocess import Postprocessor

onnx = pytest.importorskip("onnx")


class Spec:
    """A session output as the decoders see it (what backends.base.TensorSpec holds)."""

    def __init__(self, arg: ort.NodeArg) -> None:
        self.name = arg.name
        self.dtype = np.dtype("float32") if arg.type == "tensor(float)" else np.dtype("float16")
        self.shape = tuple(d if isinstance(d, int) else -1 for d in arg.shape)


def identity_model(path: Path, shape: list[int | str], names: str) -> Path:
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("images", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("output0", TensorProto.FLOAT, shape)
    graph = helper.make_graph([helper.make_node("Identity", ["images"], ["output0"])],
                              "det", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    helper.set_model_props(model, {"names": names, "stride": "32"})
    onnx.save(model, str(path))
    return path


def config(**kw: object) -> PostprocessConfig:
    t = Table({"kind": "detect", "decoder": "yolov8", **kw}, "models[0].postprocess", "e.toml")
    cfg = PostprocessConfig.from_table(t)
    assert cfg is not None and not t.problems
    return cfg


def test_labels_and_outputs_from_a_real_model(tmp_path: Path) -> None:
    path = identity_model(tmp_path / "det.onnx", ["batch", 6, 200], "{0: 'cat', 1: 'dog'}")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    specs = [Spec(o) for o in sess.get_outputs()]
    pp = Postprocessor(config(), specs, (320, 320), metadata=onnx_metadata(path))
    assert pp.labels_json() == {"0": "cat", "1": "dog"}

    frame = np.zeros((480, 640, 3), np.uint8)  # 640x480 -> 320x240 + 40 px bands
    _, tf = pp.fit(frame)
    x = np.zeros((2, 6, 200), np.float32)
    x[0, :, 10] = [160, 160, 100, 80, 0.1, 0.88]  # a dog in image 0, centred
    x[1, :, 0] = [10, 90, 40, 40, 0.7, 0.0]  # a cat at the left edge in image 1
    out = sess.run(None, {"images": x})
    dets = pp.run(dict(zip([o.name for o in sess.get_outputs()], out, strict=True)), [tf, tf])
    np.testing.assert_allclose(dets[0], [[220, 160, 420, 320, 0.88, 1]], atol=1e-4)
    np.testing.assert_allclose(dets[1], [[0, 60, 60, 140, 0.7, 0]], atol=1e-4)


def test_metadata_disagreeing_with_outputs_fails_at_load(tmp_path: Path) -> None:
    path = identity_model(tmp_path / "det.onnx", [1, 84, 8400], "{0: 'cat', 1: 'dog'}")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    with pytest.raises(OutputMismatch, match="80 class scores but 2 labels"):
        Postprocessor(config(), [Spec(o) for o in sess.get_outputs()], (640, 640),
                      metadata=onnx_metadata(path))


def test_transposed_export_is_named_at_load(tmp_path: Path) -> None:
    path = identity_model(tmp_path / "det.onnx", [1, 8400, 84], "{0: 'cat'}")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    with pytest.raises(OutputMismatch, match=r"output0 float32 \[1, 8400, 84\]"):
        Postprocessor(config(), [Spec(o) for o in sess.get_outputs()], (640, 640))
