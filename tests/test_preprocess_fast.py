"""A camera's colour frame takes the one-pass path (resize first, then one OpenCV call for
swap + scale + normalise + layout): its tensor equals the step-by-step reference (convert
the full frame, resize, normalise in numpy) for every colour order, layout, dtype and an
alpha channel."""

from __future__ import annotations

import itertools

import cv2
import numpy as np
import pytest

from edged.preprocess.preprocessor import PreprocessConfig, Preprocessor

CASES = list(itertools.product(("rgb", "bgr"), ("rgb", "bgr"), ("NCHW", "NHWC"),
                               ("float32", "float16", "uint8"), (3, 4)))


def reference(cfg: PreprocessConfig, img: np.ndarray, src: str) -> np.ndarray:
    x = img
    if x.shape[2] == 4:
        x = cv2.cvtColor(x, cv2.COLOR_BGRA2BGR if src == "bgr" else cv2.COLOR_RGBA2RGB)
    if cfg.color != src:
        x = cv2.cvtColor(x, cv2.COLOR_BGR2RGB)
    x = cv2.resize(x, (cfg.width, cfg.height), interpolation=cv2.INTER_LINEAR)
    out: np.ndarray = x
    if cfg.dtype != "uint8":
        mean, std = np.array(cfg.mean, np.float32), np.array(cfg.std, np.float32)
        out = ((x.astype(np.float32) * cfg.scale - mean) / std).astype(cfg.dtype)
    if cfg.layout == "NCHW":
        out = out.transpose(2, 0, 1)
    return np.ascontiguousarray(out)[None]


@pytest.mark.parametrize(("color", "src", "layout", "dtype", "channels"), CASES)
def test_one_pass_equals_step_by_step(color: str, src: str, layout: str, dtype: str,
                                      channels: int) -> None:
    cfg = PreprocessConfig(None, color, src, 224, 160, "linear", 1 / 255, (0.485, 0.456, 0.406),
                           (0.229, 0.224, 0.225), layout, dtype)
    img = np.random.default_rng(channels).integers(0, 256, (720, 1280, channels), np.uint8)
    got, want = Preprocessor(cfg).from_frame(img), reference(cfg, img, src)
    assert got.shape == want.shape and got.dtype == want.dtype
    tol = 0 if dtype == "uint8" else (2e-3 if dtype == "float16" else 1e-5)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), atol=tol)


def test_a_frame_already_at_size_is_not_resized() -> None:
    cfg = PreprocessConfig(None, "rgb", "bgr", 8, 4, "linear", 1.0, (0.0,) * 3, (1.0,) * 3,
                           "NCHW", "float32")
    img = np.arange(4 * 8 * 3, dtype=np.uint8).reshape(4, 8, 3)
    got = Preprocessor(cfg).from_frame(img)
    np.testing.assert_array_equal(got[0], img[:, :, ::-1].transpose(2, 0, 1).astype(np.float32))
