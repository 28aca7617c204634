"""`edged compile --postprocess`: detector variants validated by mAP@0.5 on a labelled set.

The detector is a real ONNX graph small enough to reason about: it scores each cell
of a 4x4 grid by the cell's mean brightness and proposes the cell itself as the box
(YOLOv8 layout ``[B, 5, 16]``, one class). Scenes are black frames with white squares
on cells, so the original finds every square (mAP 100) and a broken variant (boxes
shifted diagonally by 3/4 of a cell) finds none.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("pycocotools")

from onnx import TensorProto, helper  # noqa: E402

from edged.backends.support.sidecar import read_sidecar  # noqa: E402
from edged.compile.checks import open_for_timing  # noqa: E402
from edged.compile.detect_val import (  # noqa: E402
    DetectionCheck,
    load_detection_set,
    load_postprocess,
)
from edged.compile.options import CompileOptions, OptionError  # noqa: E402
from edged.compile.run import Result, run  # noqa: E402
from edged.compile.sources import DataError  # noqa: E402


def compile_int8(model: Path, out: Path, val: Path, post: Path) -> Result:
    return run(CompileOptions(model=model, out=out, steps=("int8",), val=val, postprocess=post,
                              bench_runs=3, max_batch=4, threads=1))


def cell_detector(path: Path, size: int = 32, shift: float = 0.0) -> Path:
    cell = size // 4
    ys, xs = np.divmod(np.arange(16), 4)
    boxes = np.stack([xs * cell + cell / 2 + shift, ys * cell + cell / 2 + shift,
                      np.full(16, cell), np.full(16, cell)]).astype(np.float32)[None]
    nodes = [
        helper.make_node("AveragePool", ["images"], ["pooled"], kernel_shape=[cell, cell],
                         strides=[cell, cell]),
        helper.make_node("ReduceMean", ["pooled"], ["gray"], axes=[1], keepdims=1),
        helper.make_node("Reshape", ["gray", "shape"], ["score"]),
        helper.make_node("Mul", ["score", "zero"], ["zeros"]),
        helper.make_node("Add", ["zeros", "boxes"], ["xywh"]),
        helper.make_node("Concat", ["xywh", "score"], ["output0"], axis=1),
    ]
    inits = [helper.make_tensor("shape", TensorProto.INT64, [3], [0, 1, 16]),
             helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
             helper.make_tensor("boxes", TensorProto.FLOAT, [1, 4, 16], boxes.ravel())]
    graph = helper.make_graph(
        nodes, "cells",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, size, size])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["batch", 5, 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def scenes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 black 64x64 frames (halved to the 32x32 input), white squares on 16-px cells."""
    rng = np.random.default_rng(3)
    images = np.zeros((12, 64, 64, 3), np.uint8)
    rows = []
    for i in range(12):
        for c in rng.choice(16, int(rng.integers(1, 4)), replace=False):
            y, x = divmod(int(c), 4)
            images[i, y * 16:(y + 1) * 16, x * 16:(x + 1) * 16] = 255
            rows.append([i, x * 16, y * 16, (x + 1) * 16, (y + 1) * 16, 0])
    d = tmp_path_factory.mktemp("det")
    np.savez(d / "val.npz", images=images, boxes=np.array(rows, np.float32))
    (d / "post.toml").write_text('[postprocess]\nkind = "detect"\ndecoder = "yolov8"\n'
                                 'labels = ["square"]\n')
    return d


def check(scenes: Path) -> DetectionCheck:
    return DetectionCheck(load_postprocess(scenes / "post.toml"),
                          load_detection_set(scenes / "val.npz"), None, max_drop=2.0)


def test_original_lower_resolution_and_broken_variants(scenes: Path, tmp_path: Path) -> None:
    c = check(scenes)
    ref = open_for_timing("onnxruntime", cell_detector(tmp_path / "ref.onnx"), 1, 4)
    v = c.validate(ref, 4)
    assert v.map50_pct == pytest.approx(100.0) and v.passed
    small = open_for_timing("onnxruntime", cell_detector(tmp_path / "s.onnx", size=16), 1, 4)
    v = c.validate(small, 4)  # letterboxed to its own 16x16 input, boxes mapped back
    assert v.map50_pct == pytest.approx(100.0) and v.passed
    broken = open_for_timing("onnxruntime", cell_detector(tmp_path / "b.onnx", shift=6.0), 1, 4)
    v = c.validate(broken, 4)  # IoU <= 1/4 with every square
    assert v.map50_pct == pytest.approx(0.0) and not v.passed
    assert v.drop_pct == pytest.approx(100.0) and "drop +100.00 pts" in v.summary()


def test_compile_int8_validated_by_map(scenes: Path, tmp_path: Path) -> None:
    model = cell_detector(tmp_path / "cells-fp32.onnx")
    out = tmp_path / "out"
    result = compile_int8(model, out, scenes / "val.npz", scenes / "post.toml")
    assert result.exit_code == 0 and result.outcomes == {"cells-int8.onnx": "ok"}, result.log
    assert any("mAP@0.5 100.00% (original 100.00%" in line for line in result.log)
    meta = read_sidecar(out / "cells-int8.onnx")
    assert meta["validation"]["passed"] and meta["validation"]["map50_pct"] == 100.0
    assert "letterboxed" in meta["target"]["calibration"]


def test_bad_detection_inputs(scenes: Path, tmp_path: Path) -> None:
    model = cell_detector(tmp_path / "cells-fp32.onnx")
    bad = tmp_path / "bad.toml"
    bad.write_text('kind = "detect"\ndecoder = "yolov8"\nconff = 0.3\n')
    out = tmp_path / "o"
    with pytest.raises(DataError, match=re.escape("conff: unknown key (did you mean 'conf'?)")):
        compile_int8(model, out, scenes / "val.npz", bad)
    np.savez(tmp_path / "nobox.npz", images=np.zeros((1, 8, 8, 3), np.uint8))
    with pytest.raises(DataError, match="needs arrays 'images' and 'boxes'"):
        compile_int8(model, out, tmp_path / "nobox.npz", scenes / "post.toml")
    with pytest.raises(OptionError, match="postprocess: needs val") as ei:
        CompileOptions(model=model, out=out, postprocess=scenes / "post.toml")
    assert ei.value.option == "postprocess"
    assert not (out / "cells-int8.onnx").exists()  # nothing built from bad inputs


def test_folder_of_photos_of_different_sizes(tmp_path: Path) -> None:
    import cv2

    photos = tmp_path / "photos"
    photos.mkdir()
    square = np.zeros((64, 64, 3), np.uint8)
    square[16:32, 32:48] = 255  # cell (row 1, col 2) of a 64x64 frame
    wide = np.zeros((64, 128, 3), np.uint8)  # letterboxed to 32x16 + 8-px bands
    wide[32:64, 96:128] = 255  # lands on input cell (row 2, col 3)
    cv2.imwrite(str(photos / "a.png"), square)
    cv2.imwrite(str(photos / "b.png"), wide)
    cv2.imwrite(str(photos / "empty.png"), np.zeros((40, 30, 3), np.uint8))
    (photos / "boxes.csv").write_text("file,x1,y1,x2,y2,class\na.png,32,16,48,32,0\n"
                                      "b.png,96,32,128,64,0\n")
    data = load_detection_set(photos)
    assert [img.shape for img in data.images] == [(64, 64, 3), (64, 128, 3), (40, 30, 3)]
    assert data.source.endswith("(3 photos, 2 boxes)")
    c = DetectionCheck(load_postprocess(_post(tmp_path)), data, None, max_drop=2.0)
    ref = open_for_timing("onnxruntime", cell_detector(tmp_path / "ref.onnx"), 1, 4)
    assert c.validate(ref, 4).map50_pct == pytest.approx(100.0)

    for text, error in [("f,x1\n", "first line must be file,x1,y1,x2,y2,class"),
                        ("file,x1,y1,x2,y2,class\na.png,1,2,3\n", "boxes.csv:2: expected"),
                        ("file,x1,y1,x2,y2,class\na.png,1,2,3,4,car\n", "class an integer"),
                        ("file,x1,y1,x2,y2,class\nz.png,1,2,3,4,0\n", "['z.png']")]:
        (photos / "boxes.csv").write_text(text)
        with pytest.raises(ValueError, match=re.escape(error)):
            load_detection_set(photos)


def _post(d: Path) -> Path:
    p = d / "post.toml"
    p.write_text('kind = "detect"\ndecoder = "yolov8"\n')
    return p


def test_compile_int8_of_the_trained_detector_keeps_its_map(tmp_path: Path) -> None:
    """The project's own YOLOv8-layout detector: INT8 (Conv only; the decode stays float)
    is accepted within 2 mAP points by edged compile's mAP validation."""
    root = Path(__file__).resolve().parent.parent / "models" / "digits-det"
    post = tmp_path / "post.toml"
    post.write_text('[postprocess]\nkind = "detect"\ndecoder = "yolov8"\nresize = "letterbox"\n')
    out = tmp_path / "out"
    result = compile_int8(root / "det-fp32.onnx", out, root / "val.npz", post)
    assert result.exit_code == 0, result.log
    meta = read_sidecar(out / "det-int8.onnx")
    assert meta["validation"]["passed"] and meta["validation"]["drop_pct"] <= 2.0, meta
    # 85, was 90: the detector trains on photographs too and scores 86.3 here (its card)
    assert meta["validation"]["map50_pct"] >= 85.0
    assert "Conv only" in meta["target"]["quantization"]
