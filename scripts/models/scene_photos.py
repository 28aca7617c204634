"""Photographs that Python packages ship, split *by photograph* between the digit
detector's training and the scene evaluation set, and digit signs laid over them.

Why split by photograph: a figure measured on crops of the photographs a detector was
trained on says how well it remembers those backgrounds, not how it does on a camera's.
So every photograph is either a training one (``make_detector_model.py`` composes its
training scenes on them) or an evaluation one (``make_scene_eval.py`` composes
``models/scenes-eval`` on them), never both; a stereo pair counts as one photograph.

Training (16): scikit-image's astronaut, camera, coffee, motorcycle_left and
motorcycle_right (one stereo pair), hubble_deep_field, ihc, retina, brick, grass,
gravel, moon, page, text, clock_motion, cell.
Evaluation (6): scikit-image's chelsea, rocket, coins; scikit-learn's china and flower;
matplotlib's grace_hopper.

Only the build venvs import this (numpy, OpenCV and the three packages' data files);
the daemon and the tests read the committed outputs.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import cv2
import numpy as np

#: name -> (package, file inside the package)
PHOTOS: dict[str, tuple[str, str]] = {
    "astronaut": ("skimage", "data/astronaut.png"),
    "camera": ("skimage", "data/camera.png"),
    "coffee": ("skimage", "data/coffee.png"),
    "motorcycle_left": ("skimage", "data/motorcycle_left.png"),
    "motorcycle_right": ("skimage", "data/motorcycle_right.png"),
    "hubble_deep_field": ("skimage", "data/hubble_deep_field.jpg"),
    "ihc": ("skimage", "data/ihc.png"),
    "retina": ("skimage", "data/retina.jpg"),
    "brick": ("skimage", "data/brick.png"),
    "grass": ("skimage", "data/grass.png"),
    "gravel": ("skimage", "data/gravel.png"),
    "moon": ("skimage", "data/moon.png"),
    "page": ("skimage", "data/page.png"),
    "text": ("skimage", "data/text.png"),
    "clock_motion": ("skimage", "data/clock_motion.png"),
    "cell": ("skimage", "data/cell.png"),
    "chelsea": ("skimage", "data/chelsea.png"),
    "rocket": ("skimage", "data/rocket.jpg"),
    "coins": ("skimage", "data/coins.png"),
    "china": ("sklearn", "datasets/images/china.jpg"),
    "flower": ("sklearn", "datasets/images/flower.jpg"),
    "grace_hopper": ("matplotlib", "mpl-data/sample_data/grace_hopper.jpg"),
}
TRAIN_PHOTOS = ("astronaut", "camera", "coffee", "motorcycle_left", "motorcycle_right",
                "hubble_deep_field", "ihc", "retina", "brick", "grass", "gravel", "moon",
                "page", "text", "clock_motion", "cell")
EVAL_PHOTOS = ("chelsea", "rocket", "coins", "china", "flower", "grace_hopper")
assert not set(TRAIN_PHOTOS) & set(EVAL_PHOTOS), "a photograph on both sides"


def photo(name: str) -> np.ndarray:
    """One photograph as float32 RGB [H,W,3] in 0..1 (grey ones repeated to 3 channels)."""
    package, rel = PHOTOS[name]
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise SystemExit(f"photograph {name!r} needs the {package} package installed")
    path = Path(spec.origin).parent / rel
    bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if bgr is None:
        raise SystemExit(f"cannot read {path}")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB).astype(np.float32) / 255.0


def photo_crop(rng: np.random.Generator, img: np.ndarray, width: int, height: int,
               zoom: tuple[float, float]) -> np.ndarray:
    """A random ``width`` x ``height`` view of ``img``: scaled so it covers the view
    ``zoom`` times over (1 = just covers it), cropped at a random place, maybe mirrored.
    The window is cut from the photograph first and only it is resized (cheap)."""
    h, w = img.shape[:2]
    s = max(width / w, height / h) * rng.uniform(*zoom)
    sw, sh = min(w, max(1, round(width / s))), min(h, max(1, round(height / s)))
    x = int(rng.integers(0, w - sw + 1))
    y = int(rng.integers(0, h - sh + 1))
    interp = cv2.INTER_AREA if s < 1 else cv2.INTER_LINEAR
    view = cv2.resize(img[y:y + sh, x:x + sw], (width, height), interpolation=interp)
    return np.ascontiguousarray(view[:, ::-1] if rng.random() < 0.5 else view)


def lay_sign(img: np.ndarray, digit: np.ndarray | None, x: int, y: int, cell: int,
             rng: np.random.Generator) -> tuple[tuple[int, int, int, int],
                                                tuple[float, float, float, float] | None]:
    """A flat sign (a plate, maybe framed) with ``digit`` (8x8, 0..1; None: a blank
    sign) scaled to a ``cell`` px square whose corner is at (x, y), in place.

    Why signs: a digit seen by a camera is painted on something (a plate, a door, a
    shirt), dark on light or light on dark, with a plate edge around it that is not a
    digit. Returns the plate's extent (x1, y1, x2, y2; it reaches past the cell by a
    random margin, clipped to the image) and the tight box of the ink (alpha > 0.25),
    None for a blank sign.
    """
    h, w = img.shape[:2]
    mx, my = (round(cell * m) for m in rng.uniform(0.08, 0.4, 2))
    px1, py1 = max(x - mx, 0), max(y - my, 0)
    px2, py2 = min(x + cell + mx, w), min(y + cell + my, h)
    dark_ink = rng.random() < 0.5
    tint = rng.uniform(-0.12, 0.12, 3)
    plate = (rng.uniform(0.65, 1.0) if dark_ink else rng.uniform(0.0, 0.35)) + tint
    ink = (rng.uniform(0.0, 0.25) if dark_ink else rng.uniform(0.75, 1.0)) + tint / 2
    ph, pw = py2 - py1, px2 - px1
    shade = np.linspace(1 - rng.uniform(0, 0.2), 1, pw, dtype=np.float32)[None, :, None]
    region = img[py1:py2, px1:px2]
    region[:] = np.clip(plate, 0, 1).astype(np.float32) * shade
    if rng.random() < 0.3:  # a frame in the ink's colour just inside the plate's edge
        t = max(1, cell // 16)
        cv2.rectangle(region, (t, t), (pw - 1 - t, ph - 1 - t),
                      tuple(float(c) for c in np.clip(ink, 0, 1)), t)
    if digit is None:
        return (px1, py1, px2, py2), None
    alpha = cv2.resize(digit, (cell, cell), interpolation=cv2.INTER_LINEAR)
    x2, y2 = min(x + cell, w), min(y + cell, h)
    alpha = alpha[: y2 - y, : x2 - x]
    sub = img[y:y2, x:x2]
    sub[:] = sub * (1 - alpha[..., None]) + np.clip(ink, 0, 1).astype(np.float32) * alpha[..., None]
    ys, xs = np.nonzero(alpha > 0.25)
    box = (float(x + xs.min()), float(y + ys.min()), float(x + xs.max() + 1),
           float(y + ys.max() + 1))
    return (px1, py1, px2, py2), box


def blur(img: np.ndarray, sigma: float) -> np.ndarray:
    """Gaussian blur of ``sigma`` px (0: unchanged): focus and motion soften a sign."""
    return img if sigma <= 0 else cv2.GaussianBlur(img, (0, 0), sigma)


def free_spot(rng: np.random.Generator, taken: list[tuple[int, int, int, int]], w: int, h: int,
              cell: int, margin: float = 0.45) -> tuple[int, int] | None:
    """A corner (x, y) for a ``cell`` px sign whose plate (up to ``margin`` x cell each
    side) overlaps none of ``taken`` (plates, x1 y1 x2 y2); None after 30 tries."""
    m = int(cell * margin)
    for _ in range(30):
        x = int(rng.integers(0, max(1, w - cell + 1)))
        y = int(rng.integers(0, max(1, h - cell + 1)))
        a = (x - m, y - m, x + cell + m, y + cell + m)
        if all(a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1] for b in taken):
            return x, y
    return None
