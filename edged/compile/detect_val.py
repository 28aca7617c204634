"""Validate detector variants by mAP@0.5 on a labelled set (``edged compile --postprocess``).

Why mAP and not output differences: INT8 or a lower input resolution moves boxes and
scores a little everywhere; what matters is whether the detector still finds the
objects. Each variant runs the labelled images through the same letterbox,
preprocessing, decode and NMS as the daemon (``edged.detect``) at its own input size,
and is rejected when its mAP@0.5 is more than ``max_drop`` points below the original's.

The labelled set is either a ``.npz`` (no pickle) with ``images``: uint8 BGR
``[M, H, W, 3]`` and ``boxes``: ``[G, 6]`` rows of image index, x1, y1, x2, y2, class id
in the pixels of those images; or a folder of JPEG/PNG photos of any sizes with a
``boxes.csv`` (header ``file,x1,y1,x2,y2,class``; photos without rows are negatives).
The postprocess file is TOML with the keys of ``[models.postprocess]``, at the top
level or under ``[postprocess]``.
"""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from edged.backends.base import Backend
from edged.compile.data import Preprocess
from edged.config.postprocess import PostprocessConfig
from edged.config.schema import Table, raise_if_problems
from edged.detect.geometry import Transform, fit
from edged.detect.metrics_map import evaluate_map
from edged.detect.postprocess import Postprocessor
from edged.errors import ConfigError


def load_postprocess(path: Path) -> PostprocessConfig:
    """The detector's post-processing settings; ConfigError naming the key on a problem."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError([f"{path}: cannot read: {e}"]) from None
    t = Table(data, "", path)
    if isinstance(data.get("postprocess"), dict):
        t = t.table("postprocess")
    cfg = PostprocessConfig.from_table(t)
    raise_if_problems(t.problems)
    assert cfg is not None  # no problems means every required key was read
    return cfg


CSV_HEADER = ["file", "x1", "y1", "x2", "y2", "class"]


@dataclass(frozen=True)
class DetectionSet:
    images: list[np.ndarray]  # uint8 HxWx3 BGR, sizes may differ
    truth: list[np.ndarray]  # per image [G, 5]: x1, y1, x2, y2, class
    source: str


def load_detection_set(path: Path) -> DetectionSet:
    """Read the ``.npz`` or folder described in the module docstring; ValueError says what
    is wrong and where."""
    path = Path(path)
    if path.is_dir():
        return _load_folder(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            if "images" not in z or "boxes" not in z:
                raise ValueError(f"{path}: a detection set needs arrays 'images' and 'boxes' "
                                 f"(found {z.files})")
            images, boxes = z["images"], z["boxes"]
    except OSError as e:
        raise ValueError(f"{path}: cannot read: {e}") from e
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[3] != 3:
        raise ValueError(f"{path}: 'images' must be uint8 [M, H, W, 3] (BGR); got "
                         f"{images.dtype} {list(images.shape)}")
    boxes = np.asarray(boxes, np.float64)
    if boxes.ndim != 2 or boxes.shape[1] != 6:
        raise ValueError(f"{path}: 'boxes' must be [G, 6] (image, x1, y1, x2, y2, class); got "
                         f"{list(boxes.shape)}")
    index = boxes[:, 0].astype(np.int64)
    if boxes.shape[0] and (index.min() < 0 or index.max() >= images.shape[0]):
        raise ValueError(f"{path}: 'boxes' column 0 must index the {images.shape[0]} images")
    truth = [boxes[index == i, 1:] for i in range(images.shape[0])]
    return DetectionSet(list(images), truth, f"{path} ({images.shape[0]} images, "
                                             f"{boxes.shape[0]} boxes)")


def _load_folder(folder: Path) -> DetectionSet:
    table = folder / "boxes.csv"
    try:
        lines = table.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise ValueError(f"{folder}: a folder detection set needs boxes.csv: {e}") from None
    if not lines or [c.strip() for c in lines[0].split(",")] != CSV_HEADER:
        raise ValueError(f"{table}: the first line must be {','.join(CSV_HEADER)}")
    rows: dict[str, list[list[float]]] = {}
    for n, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        try:
            if len(cells) != 6:
                raise ValueError
            box = [float(c) for c in cells[1:5]] + [float(int(cells[5]))]
        except ValueError:
            raise ValueError(f"{table}:{n}: expected file,x1,y1,x2,y2,class (class an "
                             f"integer); got {line!r}") from None
        rows.setdefault(cells[0], []).append(box)
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    missing = sorted(set(rows) - {p.name for p in files})
    if missing:
        raise ValueError(f"{table}: names photos that are not in {folder}: {missing[:5]}")
    images, truth = [], []
    for p in files:
        img = cv2.imread(str(p), cv2.IMREAD_COLOR)
        if img is None:
            raise ValueError(f"{p}: not a readable image")
        images.append(img)
        truth.append(np.array(rows.get(p.name, []), np.float64).reshape(-1, 5))
    if not images:
        raise ValueError(f"{folder}: no .jpg/.jpeg/.png photos")
    count = sum(len(t) for t in truth)
    return DetectionSet(images, truth, f"{folder} ({len(images)} photos, {count} boxes)")


@dataclass
class MapValidation:
    """Same reporting surface as ``validate.Validation`` (summary, to_json, passed)."""

    samples: int
    map50_pct: float
    map50_95_pct: float
    reference_map50_pct: float
    drop_pct: float  # mAP@0.5 points lost against the original
    max_drop_pct: float
    passed: bool

    def to_json(self) -> dict[str, Any]:
        return {k: (float(f"{v:.6g}") if isinstance(v, float) else v)
                for k, v in asdict(self).items()}

    def summary(self) -> str:
        return (f"mAP@0.5 {self.map50_pct:.2f}% (original {self.reference_map50_pct:.2f}%, "
                f"drop {self.drop_pct:+.2f} pts), mAP@0.5:0.95 {self.map50_95_pct:.2f}%")


def _size(shape: Any, name: str, pre: Preprocess) -> tuple[int, int]:
    """(width, height) of an image input; a dynamic one comes from ``pre.size``."""
    hw = list(shape[2:4] if pre.layout == "NCHW" else shape[1:3])
    if len(hw) == 2 and all(d > 0 for d in hw):
        return int(hw[1]), int(hw[0])
    if pre.size is not None:
        return pre.size[1], pre.size[0]
    raise ValueError(f"the model input {name!r} has a dynamic size {list(shape)}: "
                     "give size [H, W] in --preprocess")


class DetectionCheck:
    """The labelled set, its preprocessing and the original model's mAP."""

    # Scores this low still count: mAP integrates over the whole precision/recall curve.
    VAL_CONF = 0.001

    def __init__(self, cfg: PostprocessConfig, data: DetectionSet, pre: Preprocess | None,
                 max_drop: float) -> None:
        self.cfg, self.data, self.max_drop = cfg, data, max_drop
        self.pre = pre or Preprocess()
        if self.pre.color == "auto":  # detectors are trained on RGB unless told otherwise
            self.pre.color = "rgb"
        self.reference_map50: float | None = None

    def inputs(self, name: str, dtype: Any, shape: Any) -> tuple[np.ndarray, list[Transform]]:
        """Every image letterboxed/stretched and preprocessed for an input of this spec."""
        w, h = _size(shape, name, self.pre)
        fitted, transforms = [], []
        for img in self.data.images:
            out, tf = fit(img, self.cfg.resize, w, h, self.cfg.pad_value)
            fitted.append(cv2.cvtColor(out, cv2.COLOR_BGR2RGB) if self.pre.color == "rgb"
                          else out)
            transforms.append(tf)
        raw = np.stack(fitted)
        if np.dtype(dtype) == np.uint8:  # e.g. TF OD API graphs take NHWC uint8
            x = raw if self.pre.layout == "NHWC" else raw.transpose(0, 3, 1, 2)
            return np.ascontiguousarray(x), transforms
        return self.pre.apply(raw, list(shape)).astype(np.dtype(dtype)), transforms

    def detect(self, be: Backend, batch: int) -> list[np.ndarray]:
        spec = be.inputs[0]
        x, transforms = self.inputs(spec.name, spec.dtype, spec.shape)
        pp = Postprocessor(self.cfg, be.outputs, _size(spec.shape, spec.name, self.pre))
        opts = [pp.parse_options({"conf": min(self.VAL_CONF, self.cfg.conf)})] * len(transforms)
        fixed = spec.shape[0]
        step = fixed if fixed > 0 else max(1, batch)
        dets: list[np.ndarray] = []
        for i in range(0, x.shape[0], step):
            chunk = x[i:i + step]
            n = chunk.shape[0]
            if n < step and fixed > 0:  # a static batch: pad, the padding rows are ignored
                chunk = np.concatenate((chunk, np.zeros((step - n, *chunk.shape[1:]),
                                                        chunk.dtype)))
            outs = be.run({spec.name: np.ascontiguousarray(chunk)})
            dets += pp.run(outs, transforms[i:i + n], opts[i:i + n])
        return dets

    def validate(self, be: Backend, batch: int) -> MapValidation:
        """mAP of ``be``; the first call (the original model) sets the reference."""
        r = evaluate_map(self.detect(be, batch), self.data.truth, max_det=self.cfg.max_det)
        map50 = r.map50 * 100.0
        if self.reference_map50 is None:
            self.reference_map50 = map50
        drop = self.reference_map50 - map50
        return MapValidation(samples=r.images, map50_pct=map50, map50_95_pct=r.map50_95 * 100,
                             reference_map50_pct=self.reference_map50, drop_pct=drop,
                             max_drop_pct=self.max_drop, passed=drop <= self.max_drop)
