"""Task-level checks of a candidate against the reference (edged.verify), on crafted
results: what must pass (rows reordered, one box more at the threshold's edge) and what
must not (boxes moved, classes swapped, top-1 changed), with messages that say which
measure failed on which check input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edged.backends.base import TensorSpec
from edged.config.file import parse_config
from edged.config.verify import BY_PRECISION, ModelVerify, VariantVerify, tolerances
from edged.errors import ConfigError
from edged.verify import golden
from edged.verify.check_inputs import RecentInputs, fit_feeds, from_validation
from edged.verify.compare import VerifyRefused, compare_detections, compare_outputs, matched

INT8 = BY_PRECISION["int8"]
CONF = 0.4


def boxes(*rows: tuple[float, ...]) -> np.ndarray:
    return np.array(rows, np.float32).reshape(-1, 6)


REF = [boxes((0.1, 0.1, 0.4, 0.5, 0.9, 1), (0.5, 0.5, 0.9, 0.9, 0.8, 2),
             (0.6, 0.1, 0.8, 0.3, 0.7, 1)),
       boxes((0.2, 0.2, 0.6, 0.7, 0.95, 0)),
       boxes()]


def test_reordered_rows_are_the_same_result() -> None:
    cand = [r[::-1].copy() for r in REF]
    report = compare_detections("x", cand, REF, CONF, INT8)
    assert report["det.precision"] == 1.0 and report["det.recall"] == 1.0


def test_one_box_more_at_the_thresholds_edge_is_accepted() -> None:
    # the candidate scores one box just above conf that the reference scores just below
    ref = [np.vstack([REF[0], boxes((0.0, 0.6, 0.2, 0.9, 0.38, 3))]), *REF[1:]]
    cand = [np.vstack([REF[0], boxes((0.0, 0.61, 0.2, 0.9, 0.42, 3))]), *REF[1:]]
    report = compare_detections("x", cand, ref, CONF, INT8)
    assert report["det.precision"] == 1.0
    # and an extra box below the threshold is no box at all
    cand2 = [np.vstack([REF[0], boxes((0.7, 0.7, 0.8, 0.8, 0.3, 4))]), *REF[1:]]
    assert compare_detections("x", cand2, REF, CONF, INT8)["det.precision"] == 1.0


def test_moved_boxes_are_refused_naming_the_measure_and_the_input() -> None:
    cand = [r.copy() for r in REF]
    cand[0][:, [0, 2]] += 0.25  # every box of check input 0 moves right
    with pytest.raises(VerifyRefused, match=r"detection precision 0\.25 .*needs 0\.90.*"
                                            r"1 of 4 candidate boxes.*worst: check input 0"):
        compare_detections("variant 'x'", cand, REF, CONF, INT8)


def test_swapped_classes_are_refused() -> None:
    cand = [r.copy() for r in REF]
    cand[0][:, 5] = np.array([2, 1, 2])  # the first two boxes change class
    with pytest.raises(VerifyRefused, match="detection precision"):
        compare_detections("x", cand, REF, CONF, INT8)


def test_a_missing_box_costs_recall() -> None:
    cand = [REF[0][:1], REF[1], REF[2]]
    with pytest.raises(VerifyRefused, match=r"detection recall 0\.50 .*2 of 4 reference"):
        compare_detections("x", cand, REF, CONF, INT8)


def test_matching_is_one_to_one() -> None:
    a = boxes((0, 0, 1, 1, 0.9, 0), (0, 0, 1, 1, 0.8, 0))
    assert matched(a, a[:1], 0.5) == 1


def test_classifier_top1_change_is_refused_with_the_input() -> None:
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(8, 10)).astype(np.float32)
    cand = ref + rng.normal(0, 1e-3, ref.shape).astype(np.float32)
    report = compare_outputs("x", {"logits": cand}, {"logits": ref}, INT8, "int8")
    assert report["logits.top1"] == 1.0
    bad = cand.copy()
    bad[5] = -bad[5]
    with pytest.raises(VerifyRefused, match=r"top-1 agrees with the reference on 7/8 check "
                                            r"inputs .*needs 97% for int8.*check input 5"):
        compare_outputs("x", {"logits": bad}, {"logits": ref}, INT8, "int8")


def test_other_outputs_compare_by_relative_error() -> None:
    ref = np.linspace(0, 1, 24, dtype=np.float32).reshape(2, 3, 4)
    ok = ref + 0.05
    assert compare_outputs("x", {"y": ok}, {"y": ref}, INT8, "int8")["y.rel_err"] < 0.1
    with pytest.raises(VerifyRefused, match=r"strays 0\.05 .*check input 1 \(allowed 0\.001"):
        cand = ref.copy()
        cand[1] += 0.05
        compare_outputs("x", {"y": cand}, {"y": ref}, BY_PRECISION["fp32"], "fp32")


def test_limits_come_from_precision_then_model_then_variant() -> None:
    model = ModelVerify((("min_recall", 0.8), ("min_top1", 0.9)))
    variant = VariantVerify(True, (("min_recall", 0.7),))
    t = tolerances("int8", model, variant)
    assert (t.min_recall, t.min_top1, t.max_rel_err) == (0.7, 0.9, 0.1)


def _cfg(tmp: Path, variants: str, model: str = "") -> str:
    art = tmp / "m.onnx"
    art.write_bytes(b"")
    return f"""
[[models]]
name = "m"
{model}
[[models.variants]]
name = "a"
backend = "onnxruntime"
path = "{art}"
{variants}
"""


def test_config_reads_reference_verify_and_precision(tmp_path: Path) -> None:
    import tomllib

    text = _cfg(tmp_path, f"""
[[models.variants]]
name = "b"
backend = "onnxruntime"
path = "{tmp_path / 'm.onnx'}"
reference = true
precision = "int8"
[[models.variants]]
name = "c"
backend = "onnxruntime"
path = "{tmp_path / 'm.onnx'}"
verify = false
[[models.variants]]
name = "d"
backend = "onnxruntime"
path = "{tmp_path / 'm.onnx'}"
[models.variants.verify]
min_recall = 0.75
""", "[models.verify]\nmin_top1 = 0.95\nrecent_inputs = 4")
    cfg = parse_config(tomllib.loads(text), tmp_path / "c.toml")
    a, b, c, d = cfg.models[0].variants
    assert b.reference and b.precision == "int8" and not a.reference
    assert not c.verify.enabled and d.verify.overrides == (("min_recall", 0.75),)
    assert cfg.models[0].verify.recent_inputs == 4


@pytest.mark.parametrize(("extra", "variant", "message"), [
    ("", "reference = true\n", "only one variant may be the reference"),
    ("[models.verify]\nmin_top1 = 1.5", "", r"models\[0\]\.verify\.min_top1: must be from 0"),
    ("", "[models.variants.verify]\nmin_recal = 0.5", "min_recal"),
    ("", 'precision = "int4"', "precision: must be one of"),
    ("", "verify = 3", "verify: expected true or false or a table"),
])
def test_bad_verify_config_names_the_key(tmp_path: Path, extra: str, variant: str,
                                         message: str) -> None:
    import tomllib

    text = _cfg(tmp_path, f"""reference = true
[[models.variants]]
name = "b"
backend = "onnxruntime"
path = "{tmp_path / 'm.onnx'}"
{variant}""", extra)
    if "reference" not in message:
        text = text.replace("reference = true\n[[models", "[[models", 1)
    with pytest.raises(ConfigError, match=message):
        parse_config(tomllib.loads(text), tmp_path / "c.toml")


def test_fit_feeds_resizes_image_tensors_either_layout() -> None:
    nchw = np.random.default_rng(0).random((2, 3, 160, 160), dtype=np.float32)
    spec = TensorSpec("images", np.dtype(np.float32), (-1, 3, 128, 128))
    out = fit_feeds({"images": nchw}, [spec], "NCHW")
    assert out is not None and out["images"].shape == (2, 3, 128, 128)
    nhwc = np.zeros((1, 300, 300, 3), np.uint8)
    spec2 = TensorSpec("x", np.dtype(np.uint8), (-1, 200, 200, 3))
    assert fit_feeds({"x": nhwc}, [spec2], "NHWC")["x"].shape == (1, 200, 200, 3)  # type: ignore[index]
    # a tensor that is not an image of the same kind cannot be made to fit
    assert fit_feeds({"x": nhwc}, [TensorSpec("x", np.dtype(np.float32), (-1, 10))], None) is None
    assert fit_feeds({"y": nhwc}, [spec2], None) is None


def test_recent_inputs_are_bounded_and_restart_on_a_new_shape() -> None:
    ring = RecentInputs(capacity=3, max_bytes=10_000)
    for i in range(5):
        ring.add({"x": np.full((4, 10), i, np.float32)})
    snap = ring.snapshot()
    assert snap is not None and snap.count == 3 and snap.feeds["x"][:, 0].tolist() == [2, 3, 4]
    ring.add({"x": np.zeros((1, 20), np.float32)})  # another input size: start again
    assert len(ring) == 1
    big = RecentInputs(capacity=16, max_bytes=1000)
    big.add({"x": np.zeros((1, 100), np.float32)})  # 400 B x 16 > 1000 B: never kept
    assert big.snapshot() is None and big.nbytes == 0


def test_validation_data_from_model_json(tmp_path: Path) -> None:
    import json
    import shutil

    root = Path(__file__).resolve().parent.parent / "models" / "digits"
    art = tmp_path / "cnn-int8.onnx"
    shutil.copy(root / "cnn-int8.onnx", art)
    assert from_validation(art, TensorSpec("input", np.dtype(np.float32), (-1, 1, 28, 28)),
                           None) is None  # no model.json
    shutil.copy(root / "validation.npz", tmp_path / "validation.npz")
    (tmp_path / "model.json").write_text(json.dumps({"validation": "validation.npz"}))
    spec = TensorSpec("input", np.dtype(np.float32), (-1, 1, 28, 28))
    frames = from_validation(art, spec, lambda f: np.zeros((1, 1, 28, 28), np.float32) + f[0, 0])
    assert frames is not None and frames.count == 16 and "validation.npz" in frames.source
    # uint8 frames without preprocessing cannot become the float input
    assert from_validation(art, spec, None) is None


def test_golden_file_is_no_pickle_and_bounded(tmp_path: Path) -> None:
    art = tmp_path / "m.onnx"
    big = {"x": np.zeros((golden.MAX_BYTES // 4 + 1,), np.float32)}
    assert golden.write_golden(art, big, {}, "fp32") is None
    p = golden.write_golden(art, {"x": np.ones((2, 3), np.float32)},
                            {"y": np.ones((2, 3), np.float32)}, "int8")
    assert p is not None
    with np.load(p, allow_pickle=False) as z:
        assert {"in:x", "out:y", "meta"} <= set(z.files)
    assert golden.read_golden(art).precision == "int8"  # type: ignore[union-attr]
    golden.golden_path(art).write_bytes(b"not a zip")
    with pytest.raises(Exception, match="unreadable golden file"):
        golden.read_golden(art)
