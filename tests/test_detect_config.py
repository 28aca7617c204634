"""Bad detector configs, model outputs that do not fit the decoder, bad request options:
each fails with a message naming the key, the output or the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edged.config.postprocess import PostprocessConfig, read_labels_file
from edged.config.schema import Table
from edged.detect.labels import labels_from_metadata
from edged.detect.outputs import OutputMismatch, check_outputs
from edged.detect.postprocess import Postprocessor
from edged.errors import INVALID_ARGUMENT, ArtifactError, InvalidArgument

WHERE = "models[0].postprocess"


class Spec:
    def __init__(self, name: str, dtype: str, shape: tuple[int, ...]) -> None:
        self.name, self.dtype, self.shape = name, np.dtype(dtype), shape


def problems(data: dict[str, Any], base: Path | None = None) -> list[str]:
    t = Table(data, WHERE, "/etc/edged/edged.toml", base_dir=base)
    PostprocessConfig.from_table(t)
    return t.problems


def test_defaults() -> None:
    t = Table({"kind": "detect", "decoder": "ssd"}, WHERE, "x.toml")
    cfg = PostprocessConfig.from_table(t)
    assert not t.problems
    assert cfg is not None
    assert (cfg.conf, cfg.iou, cfg.max_det, cfg.agnostic) == (0.25, 0.45, 100, False)
    assert (cfg.box_format, cfg.box_order, cfg.nms, cfg.resize) == ("normalized", "yxyx",
                                                                     False, "letterbox")


@pytest.mark.parametrize(("data", "key", "text"), [
    ({"decoder": "yolov8"}, "kind", "missing"),
    ({"kind": "classify", "decoder": "yolov8"}, "kind", "must be one of 'detect'"),
    ({"kind": "detect"}, "decoder", "missing"),
    ({"kind": "detect", "decoder": "yolo9000"}, "decoder", "must be one of"),
    ({"kind": "detect", "decoder": "yolov8", "conf": 1.5}, "conf", "between 0 and 1"),
    ({"kind": "detect", "decoder": "yolov8", "iou": -0.1}, "iou", "between 0 and 1"),
    ({"kind": "detect", "decoder": "yolov8", "max_det": 0}, "max_det", "between 1 and 1000"),
    ({"kind": "detect", "decoder": "yolov8", "max_det": 2.5}, "max_det", "an integer"),
    ({"kind": "detect", "decoder": "yolov8", "agnostic": "yes"}, "agnostic", "true or false"),
    ({"kind": "detect", "decoder": "yolov8", "classes": [0, "car"]}, "classes[1]", "an integer"),
    ({"kind": "detect", "decoder": "yolov8", "classes": [-1]}, "classes", ">= 0"),
    ({"kind": "detect", "decoder": "yolov8", "resize": "crop"}, "resize", "'letterbox'"),
    ({"kind": "detect", "decoder": "yolov8", "box_format": "px"}, "box_format", "'pixels'"),
    ({"kind": "detect", "decoder": "yolov8", "box_order": "yxyx"}, "box_order",
     "end2end, ssd, yolonas, detection-output decoders only"),
    ({"kind": "detect", "decoder": "yolov8", "labels": []}, "labels", "must not be empty"),
    ({"kind": "detect", "decoder": "yolov5", "label_offset": 1}, "label_offset",
     "end2end, ssd, yolonas, detection-output decoders only"),
    ({"kind": "detect", "decoder": "yolov8", "outputs": ["a", "b", "c", "d"]}, "outputs",
     "only the 'ssd' decoder"),
    ({"kind": "detect", "decoder": "ssd", "outputs": ["a"]}, "outputs", "4 outputs"),
    ({"kind": "detect", "decoder": "yolov8", "conff": 0.3}, "conff", "did you mean 'conf'"),
    ({"kind": "detect", "decoder": "yolov8", "pad_value": 300}, "pad_value", "0..255"),
])
def test_bad_keys_name_the_key(data: dict[str, Any], key: str, text: str) -> None:
    found = problems(data)
    assert len(found) == 1, found
    assert found[0].startswith(f"/etc/edged/edged.toml: {WHERE}.{key}: ")
    assert text in found[0]


def test_labels_file_relative_to_the_config(tmp_path: Path) -> None:
    (tmp_path / "coco.txt").write_text("person\nbicycle\ncar\n\n")
    t = Table({"kind": "detect", "decoder": "yolov8", "labels_file": "coco.txt"}, WHERE,
              tmp_path / "edged.toml")
    cfg = PostprocessConfig.from_table(t)
    assert not t.problems
    assert cfg is not None and cfg.labels == ("person", "bicycle", "car")
    missing = problems({"kind": "detect", "decoder": "yolov8", "labels_file": "nope.txt"},
                       tmp_path)
    assert len(missing) == 1 and f"{WHERE}.labels_file" in missing[0] and "nope.txt" in missing[0]
    (tmp_path / "gap.txt").write_text("a\n\nb\n")
    gap = problems({"kind": "detect", "decoder": "yolov8", "labels_file": "gap.txt"}, tmp_path)
    assert len(gap) == 1 and "blank line(s) [2]" in gap[0]
    both = problems({"kind": "detect", "decoder": "yolov8", "labels_file": "coco.txt",
                     "labels": ["a"]}, tmp_path)
    assert len(both) == 1 and "either labels or labels_file" in both[0]


def test_read_labels_file_rejects_empty(tmp_path: Path) -> None:
    (tmp_path / "e.txt").write_text("\n\n")
    with pytest.raises(ValueError, match="is empty"):
        read_labels_file(tmp_path / "e.txt")


def test_labels_from_ultralytics_metadata_without_eval() -> None:
    names = "{0: 'person', 1: \"it's\", 2: 'traffic light'}"
    assert labels_from_metadata({"names": names}) == ("person", "it's", "traffic light")
    assert labels_from_metadata({"names": '["a", "b"]'}) == ("a", "b")
    assert labels_from_metadata({"names": '{"0": "a", "1": "b"}'}) == ("a", "b")
    assert labels_from_metadata({"stride": "32"}) is None
    for bad in ("{0: __import__('os').system('true')}", "{0: 'a', 2: 'b'}", "[1, 2]",
                "{0: 'a'} + x", "person"):
        with pytest.raises(ValueError, match="names"):
            labels_from_metadata({"names": bad})


@pytest.mark.parametrize(("decoder", "specs", "text"), [
    ("yolov8", [Spec("output0", "float32", (1, 8400, 84))],
     "looks like rows per candidate, [B, N, 5+C]"),
    ("yolov8", [Spec("output0", "float32", (1, 84))], "not a rank-3 float tensor"),
    ("yolov8", [Spec("output0", "int64", (1, 84, 8400))], "not a rank-3 float tensor"),
    ("yolov8", [], "has no outputs"),
    ("yolov5", [Spec("output", "float32", (1, 85, 25200))],
     "looks like columns per candidate, [B, 4+C, N] (decoder 'yolov8')"),
    ("end2end", [Spec("output0", "float32", (1, 300, 7))], "the last dim is 7, not 6"),
    ("yolox", [Spec("output", "float32", (1, 8400, 85))],
     "a 416x416 input has 3549 cells but the output has 8400 rows"),
    ("ssd", [Spec("a", "float32", (1,)), Spec("b", "float32", (1, 10, 4))],
     "the model has 2 outputs, not 4"),
    ("ssd", [Spec(n, "float32", (1, 10)) for n in ("num", "box", "score", "score2")],
     "2 output names contain 'score', so set postprocess.outputs"),
    ("ssd", [Spec("num", "float32", (1,)), Spec("boxes", "float32", (1, 10, 2)),
             Spec("scores", "float32", (1, 10)), Spec("classes", "float32", (1, 10))],
     "'boxes' (boxes) must be [B, N, 4]"),
    ("ssd", [Spec("num", "float32", (1,)), Spec("boxes", "float32", (1, 10, 4)),
             Spec("scores", "float32", (1, 20)), Spec("classes", "float32", (1, 10))],
     "disagree on N: [10, 20]"),
])
def test_check_outputs_says_expected_and_actual(decoder: str, specs: list[Spec],
                                                text: str) -> None:
    with pytest.raises(OutputMismatch) as e:
        check_outputs(decoder, specs, input_size=(416, 416))
    msg = str(e.value)
    assert text in msg
    assert f"do not fit decoder {decoder!r}" in msg and "Expected " in msg
    for s in specs:
        assert s.name in msg
    assert isinstance(e.value, ArtifactError)


def test_check_outputs_counts_classes_against_labels() -> None:
    spec = [Spec("output0", "float32", (1, 84, 8400))]
    assert check_outputs("yolov8", spec, input_size=(640, 640), num_labels=80) == ("output0",)
    with pytest.raises(OutputMismatch, match="80 class scores but 3 labels"):
        check_outputs("yolov8", spec, input_size=(640, 640), num_labels=3)


def test_ssd_outputs_named_in_config() -> None:
    specs = [Spec("Identity", "float32", (1, 10, 4)), Spec("Identity_1", "float32", (1, 10)),
             Spec("Identity_2", "float32", (1,)), Spec("Identity_3", "float32", (1, 10))]
    got = check_outputs("ssd", specs, input_size=(300, 300),
                        names=["Identity_2", "Identity", "Identity_3", "Identity_1"])
    assert got == ("Identity_2", "Identity", "Identity_3", "Identity_1")
    with pytest.raises(OutputMismatch, match=r"names \['nope'\]"):
        check_outputs("ssd", specs, input_size=(300, 300),
                      names=["nope", "Identity", "Identity_3", "Identity_1"])


def postprocessor() -> Postprocessor:
    t = Table({"kind": "detect", "decoder": "yolov8", "classes": [0, 2]}, WHERE, "x.toml")
    cfg = PostprocessConfig.from_table(t)
    assert cfg is not None
    return Postprocessor(cfg, [Spec("o", "float32", (1, 7, 100))], (640, 640))


def test_request_options() -> None:
    pp = postprocessor()
    d = pp.parse_options({"model": "det", "id": 3})  # unrelated header keys are ignored
    assert (d.conf, d.iou, d.max_det, d.classes) == (0.25, 0.45, 100, frozenset({0, 2}))
    o = pp.parse_options({"conf": 0, "iou": 1, "max_det": 5, "classes": [1]})
    assert (o.conf, o.iou, o.max_det, o.classes) == (0.0, 1.0, 5, frozenset({1}))


@pytest.mark.parametrize(("header", "field"), [
    ({"conf": 1.01}, "'conf'"), ({"conf": -0.1}, "'conf'"), ({"conf": "0.5"}, "'conf'"),
    ({"conf": True}, "'conf'"), ({"conf": float("nan")}, "'conf'"),
    ({"iou": 2}, "'iou'"), ({"iou": None}, "'iou'"),
    ({"max_det": 0}, "'max_det'"), ({"max_det": 1001}, "'max_det'"),
    ({"max_det": 3.0}, "'max_det'"), ({"max_det": False}, "'max_det'"),
    ({"classes": 1}, "'classes'"), ({"classes": [1, "2"]}, "'classes'"),
    ({"classes": [-1]}, "'classes'"), ({"classes": [True]}, "'classes'"),
    ({"classes": list(range(1001))}, "'classes'"),
])
def test_bad_request_options_are_invalid_argument(header: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidArgument) as e:
        postprocessor().parse_options(header)
    assert e.value.status == INVALID_ARGUMENT
    assert f"option {field}" in str(e.value)


def test_yolo_picks_the_layout_from_the_output_shape() -> None:
    t = Table({"kind": "detect", "decoder": "yolo"}, WHERE, "x.toml")
    cfg = PostprocessConfig.from_table(t)
    assert cfg is not None and not t.problems
    v8 = Postprocessor(cfg, [Spec("output0", "float32", (1, 84, 8400))], (640, 640))
    v5 = Postprocessor(cfg, [Spec("output", "float32", (1, 25200, 85))], (640, 640))
    assert (v8.decoder, v5.decoder) == ("yolov8", "yolov5")
    with pytest.raises(OutputMismatch, match=r"cannot tell YOLOv8 .* set decoder = 'yolov8'"):
        Postprocessor(cfg, [Spec("output0", "float32", (-1, 84, -1))], (640, 640))


def test_models_postprocess_in_the_daemon_config(tmp_path: Path) -> None:
    from edged.config.file import parse_config
    from edged.errors import ConfigError

    model = {"name": "det", "variants": [{"name": "fp32", "backend": "onnxruntime",
                                          "path": "det.onnx"}],
             "preprocess": {"width": 640, "height": 640},
             "postprocess": {"kind": "detect", "decoder": "yolov8", "conf": 0.4}}
    cfg = parse_config({"models": [model]}, tmp_path / "edged.toml")
    post = cfg.models[0].postprocess
    assert post is not None and post.decoder == "yolov8" and post.conf == 0.4
    bad = {**model, "postprocess": {"kind": "detect", "decoder": "yolov8", "iou": 3}}
    del bad["preprocess"]
    with pytest.raises(ConfigError) as e:
        parse_config({"models": [bad]}, tmp_path / "edged.toml")
    assert any("models[0].postprocess.iou: must be between 0 and 1" in p for p in e.value.problems)
    assert any("models[0].postprocess: a detector needs [models.preprocess]" in p
               for p in e.value.problems)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(max_size=12), min_size=1, max_size=8))
def test_ultralytics_names_round_trip(names: list[str]) -> None:
    """Whatever Python's str(dict) writes for the names, we read back, without eval."""
    assert labels_from_metadata({"names": str(dict(enumerate(names)))}) == tuple(names)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=80))
def test_metadata_parser_never_fails_otherwise(text: str) -> None:
    try:
        got = labels_from_metadata({"names": text})
    except ValueError:
        return
    assert got is not None and all(isinstance(n, str) for n in got)
