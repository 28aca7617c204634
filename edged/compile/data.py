"""Representative data for calibration and validation.

Why one loader: INT8 calibration and accuracy checks must see inputs exactly as the
daemon will feed them, i.e. after the model's own preprocessing. Accepted sources:

* ``.npz`` with ``x`` (and optionally ``y`` labels), or ``.npy`` holding ``x``;
  ``x`` is either already the model's input (float, ``[M, *input_shape[1:]]``) or raw
  uint8 images (``[M,H,W]`` or ``[M,H,W,C]``) that go through the preprocessing;
* a folder of images (png/jpg/bmp), decoded with OpenCV and preprocessed.

The preprocessing facts come from a ``model.json`` (``--preprocess``): a JSON object,
either top level or under ``"preprocess"``, with any of ``size`` [H, W] (or
``resize``), ``color`` ("gray"/"rgb"/"bgr", or ``grayscale: true``), ``scale``
(multiplier applied first; default 1/255 for uint8 data), ``mean``, ``std``
(per channel or scalar) and ``layout`` ("NCHW" default, or "NHWC").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

IMAGE_EXTS = {".png", ".jpg", ".jpeg", ".bmp", ".pgm", ".ppm"}


@dataclass
class Preprocess:
    """How raw uint8 images become model input (see module docstring)."""

    size: tuple[int, int] | None = None
    color: str = "auto"
    scale: float = 1.0 / 255.0
    mean: list[float] = field(default_factory=lambda: [0.0])
    std: list[float] = field(default_factory=lambda: [1.0])
    layout: str = "NCHW"

    @classmethod
    def from_json(cls, path: Path) -> Preprocess:
        try:
            doc = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: cannot read preprocessing facts: {e}") from e
        if isinstance(doc.get("preprocess"), dict):
            doc = doc["preprocess"]
        p = cls()
        size = doc.get("size", doc.get("resize"))
        if size is not None:
            size = [size, size] if isinstance(size, int) else size
            p.size = (int(size[0]), int(size[1]))
        if doc.get("grayscale") is True:
            p.color = "gray"
        color = doc.get("color", doc.get("channels"))
        if isinstance(color, str):
            p.color = color.lower().replace("grayscale", "gray")
        elif color == 1:
            p.color = "gray"
        elif color == 3:
            p.color = "rgb"
        if "scale" in doc:
            p.scale = float(doc["scale"])
        for key in ("mean", "std"):
            if key in doc:
                v = doc[key]
                setattr(p, key, [float(x) for x in (v if isinstance(v, list) else [v])])
        p.layout = str(doc.get("layout", "NCHW")).upper()
        return p

    def apply(self, images: np.ndarray, input_shape: list[int]) -> np.ndarray:
        """uint8 ``[M,H,W]``/``[M,H,W,C]`` -> float32 model input."""
        x = images.astype(np.float32)
        if x.ndim == 3:
            x = x[..., None]
        x = x * np.float32(self.scale)
        mean = np.asarray(self.mean, np.float32)
        std = np.asarray(self.std, np.float32)
        x = (x - mean) / std
        if self.layout == "NCHW":
            x = x.transpose(0, 3, 1, 2)
        want = [d for d in input_shape[1:]]
        if all(d > 0 for d in want) and list(x.shape[1:]) != want:
            raise ValueError(
                f"preprocessed images have shape {list(x.shape[1:])}, model wants {want}; "
                "check --preprocess (size/color/layout)"
            )
        return np.ascontiguousarray(x, dtype=np.float32)


@dataclass
class Dataset:
    x: np.ndarray  # model input, ready to feed
    y: np.ndarray | None  # int labels or None
    source: str
    synthetic: bool = False  # random inputs: only differences mean something


def _read_image(path: Path, pre: Preprocess, channels: int) -> np.ndarray:
    import cv2

    gray = pre.color == "gray" or (pre.color == "auto" and channels == 1)
    img = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE if gray else cv2.IMREAD_COLOR)
    if img is None:
        raise ValueError(f"{path}: not a readable image")
    if not gray and pre.color == "rgb":
        img = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
    if pre.size is not None:
        img = cv2.resize(img, (pre.size[1], pre.size[0]), interpolation=cv2.INTER_AREA)
    return img


def load_dataset(
    source: Path, input_spec: dict[str, Any], pre: Preprocess | None, limit: int | None = None
) -> Dataset:
    """Load ``source`` (npz/npy/folder) as model-ready input for ``input_spec``."""
    source = Path(source)
    shape = list(input_spec["shape"])
    pre = pre or Preprocess()
    y = None
    if source.is_dir():
        files = sorted(p for p in source.iterdir() if p.suffix.lower() in IMAGE_EXTS)
        if not files:
            raise ValueError(f"{source}: no images ({', '.join(sorted(IMAGE_EXTS))}) found")
        files = files[:limit] if limit else files
        channels = shape[1] if pre.layout == "NCHW" and len(shape) == 4 else shape[-1]
        if pre.size is None and len(shape) == 4:
            hw = shape[2:4] if pre.layout == "NCHW" else shape[1:3]
            if all(d > 0 for d in hw):
                pre.size = (hw[0], hw[1])
        raw = np.stack([_read_image(p, pre, channels) for p in files])
        return Dataset(pre.apply(raw, shape), None, f"{source} ({len(files)} images)")
    try:
        if source.suffix == ".npz":
            with np.load(source, allow_pickle=False) as z:
                if "x" not in z:
                    raise ValueError(f"{source}: .npz needs an array named 'x' (found {z.files})")
                x = z["x"]
                y = z.get("y", None)
        elif source.suffix == ".npy":
            x = np.load(source, allow_pickle=False)
        else:
            raise ValueError(f"{source}: expected a .npz, a .npy or a folder of images")
    except OSError as e:
        raise ValueError(f"{source}: cannot read: {e}") from e
    if limit:
        x = x[:limit]
        y = y[:limit] if y is not None else None
    if x.dtype == np.uint8:
        x = pre.apply(x, shape)
    else:
        x = np.ascontiguousarray(x, dtype=np.dtype(input_spec["dtype"]))
    if len(x.shape) != len(shape):
        raise ValueError(f"{source}: x has shape {list(x.shape)}, model input is {shape}")
    if y is not None:
        y = np.asarray(y).astype(np.int64).reshape(-1)
    return Dataset(x, y, f"{source} ({x.shape[0]} samples)")

