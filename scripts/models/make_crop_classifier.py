#!/usr/bin/env python3
"""Build the digit reader for a pipeline's crops: ``models/digits-crops/``.

Why this exists: the shipped ``digits`` classifier was trained on scikit-learn's light
digits on black, and reads the crops of ``digits-det``'s boxes worse than the detector
classifies them itself (docs/pipelines.md, "The shipped pipeline"). A pipeline's second
stage is only worth running if it reads those crops well, so this one is trained on
**crops as the pipeline makes them**:

1. scenes from the generator that made ``digits-det``'s data
   (``make_detector_model.make_scene``, imported, with the same 75/25 digit split: only
   training digits in training scenes; ``models/digits-det/val.npz`` and its held-out
   scenes are never used for training);
2. each digit's box jittered as the detector's boxes are off: the shift and scale
   errors of ``det-fp32``'s boxes are measured on training scenes at build time, and
   the jitter is drawn from them (widened by ``JITTER_GAIN``);
3. a share of the scenes enlarged first, as a camera frame is larger than the
   detector's input (the crop is then shrunk by the pipeline's ``fit`` step);
4. cropped by ``edged.model.pipeline.crops.cut`` with the stage options in ``STAGE``
   (padding, square, contrast) and turned into the model's tensor by edged's own
   ``Preprocessor`` with ``PREPROCESS``: the daemon's code, so training and serving
   crops are the same pixels.

Outputs (heaviest first, the governor's ladder): ``cnn-fp32.onnx`` and ``cnn-int8.onnx``
(ORT static quantization as ``edged compile`` does it), plus ``validation.npz`` (held-out
crops), ``samples/``, ``model.json`` (I/O, preprocessing, the stage's crop options,
accuracy) and ``README.md``. Golden files: ``scripts/models/make_golden.py`` afterwards.

Torch is a build-time tool only; edged never imports it. Run in a throwaway venv::

    python3 -m venv /tmp/torchvenv
    /tmp/torchvenv/bin/pip install torch==2.13.0 onnx onnxruntime numpy scikit-learn \\
        opencv-python-headless pycocotools tqdm
    /tmp/torchvenv/bin/python scripts/models/make_crop_classifier.py
    /tmp/torchvenv/bin/python scripts/models/make_crop_classifier.py --eval-only  # no torch
    .venv/bin/python scripts/models/make_golden.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import onnx
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import make_detector_model as det  # noqa: E402  (the scene generator, the split, the decode)
from builder_support import build_and_publish, export_torch, save_checked  # noqa: E402
from builder_support import cost as builder_cost  # noqa: E402

from edged.backends.onnxruntime import OnnxRuntimeBackend  # noqa: E402
from edged.backends.support.isa import cpu_name  # noqa: E402
from edged.compile.bench import measure  # noqa: E402
from edged.compile.ort_steps import to_int8_static  # noqa: E402
from edged.config.pipelines import StageConfig  # noqa: E402
from edged.config.preprocess import PreprocessConfig  # noqa: E402
from edged.config.runtimes import OnnxRuntimeOptions  # noqa: E402
from edged.config.schema import Table  # noqa: E402
from edged.model.pipeline.crops import cut, select  # noqa: E402
from edged.preprocess.preprocessor import Preprocessor  # noqa: E402

OUT_DIR = ROOT / "models" / "digits-crops"
DETECTOR = ROOT / "models" / "digits-det" / "det-fp32.onnx"
SEED = det.SEED  # the digit split is the detector's (and the digits classifier's)
TRAIN_SEED = SEED + 100  # training scenes (the detector's own were seeded SEED)
TEST_SEED = SEED + 101  # held-out crop scenes (val.npz's scenes are SEED + 1)
JITTER_SEED = SEED + 102  # training scenes the detector's box errors are measured on
SIZE = 28
LABELS = [str(i) for i in range(10)]
INPUT_NAME = "input"
OUTPUT_NAME = "logits"
BATCH_DIM = "N"
OPSET = 17
#: the stage options the model is trained for: a pipeline stage using it must cut its
#: crops the same way (model.json "crops"; examples/pipelines/digits-reader.toml)
STAGE = {"padding": 0.1, "square": True, "contrast": "border"}
#: the model's [models.preprocess]: what the stage's crops become (model.json "preprocess")
PREPROCESS = {"color": "gray", "width": SIZE, "height": SIZE, "scale": 1.0 / 255.0,
              "layout": "NCHW", "dtype": "float32"}
#: the detector's measured box errors are widened by this before drawing the jitter: the
#: detector is worse on scenes it was not trained on, and a camera's boxes wander more
JITTER_GAIN = 1.5
#: share of the scenes enlarged before cropping (a camera frame is larger than the
#: detector's 160x160 input), and by how much
UPSCALE_P = 0.3
UPSCALE = (1.5, 8.0)
N_TRAIN_SCENES = 6000
COPIES = 2  # jittered crops per training digit
N_TEST_SCENES = 800  # held-out crop scenes (held-out digits): the accuracy figure
#: held-out crops kept in validation.npz (the first of them): textured crops compress
#: poorly, and the model's folder should stay a few hundred KB
N_VALIDATION = 512
N_JITTER_SCENES = 400
N_CALIB = 512  # training crops that calibrate INT8
MIN_ACCURACY = 0.95
MAX_INT8_DROP = 0.01
VARIANTS = ("cnn-fp32", "cnn-int8")  # ladder order, heaviest first
CHANNELS = (16, 32, 64)


# --------------------------------------------------------------------------- crops


def stage() -> StageConfig:
    """The pipeline stage the crops are cut for (only its crop options matter here)."""
    return StageConfig(name="digit", model="digits-crops", padding=STAGE["padding"],
                       square=STAGE["square"], contrast=STAGE["contrast"])


def preprocessor() -> Preprocessor:
    """The daemon's preprocessing for a model whose [models.preprocess] is PREPROCESS."""
    problems: list[str] = []
    cfg = PreprocessConfig.from_table(Table(dict(PREPROCESS), "preprocess", __file__, problems))
    if problems:
        raise ValueError(problems)
    return Preprocessor(cfg)


def crop_pixels(frame_bgr: np.ndarray, box: np.ndarray, st: StageConfig,
                pre: Preprocessor) -> np.ndarray:
    """One box's crop as the pipeline feeds it: ``cut`` (with the model's size as its
    ``fit``), then the model's preprocessing. Returned as uint8 [SIZE, SIZE] (the tensor
    times 255, exact: the preprocessing only divides by 255 after resizing uint8)."""
    crop = cut(frame_bgr, box, st, (SIZE, SIZE))
    x = pre.from_frame(crop, source_color="bgr")[0, 0]  # the frame's order (grey: either)
    return np.rint(x * 255.0).astype(np.uint8)


def to_input(x_u8: np.ndarray) -> np.ndarray:
    """uint8 [M,28,28] -> float32 [M,1,28,28]: what PREPROCESS makes of a crop."""
    return (x_u8.astype(np.float32) / 255.0)[:, None]


@dataclass(frozen=True)
class Jitter:
    """How far the detector's boxes are from the true ones, relative to the true box:
    centre shift (fraction of width, height) and log scale (width, height); mean and
    standard deviation of each, and how many digits they were measured on."""

    mean: tuple[float, float, float, float]
    std: tuple[float, float, float, float]
    matched: int
    digits: int
    wrong_class: int


def iou_one(dets: np.ndarray, box: np.ndarray) -> np.ndarray:
    x1 = np.maximum(dets[:, 0], box[0])
    y1 = np.maximum(dets[:, 1], box[1])
    x2 = np.minimum(dets[:, 2], box[2])
    y2 = np.minimum(dets[:, 3], box[3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area = (dets[:, 2] - dets[:, 0]) * (dets[:, 3] - dets[:, 1])
    return inter / (area + (box[2] - box[0]) * (box[3] - box[1]) - inter)


def measure_jitter(digits: np.ndarray, labels: np.ndarray) -> Jitter:
    """``det-fp32``'s box errors on training scenes (conf 0.25, the pipeline's; each true
    digit's best box at IoU >= 0.5)."""
    imgs, boxes, classes = det.make_scenes(N_JITTER_SCENES, JITTER_SEED, digits, labels)
    sess = det.session(DETECTOR)
    dets: list[np.ndarray] = []
    for i in range(0, len(imgs), 32):
        (out,) = sess.run(None, {det.INPUT_NAME: det.to_input(imgs[i:i + 32], det.SIZE)})
        dets += det.detections(out, det.SIZE, 0.25)
    rel, wrong, n = [], 0, 0
    for d, bs, cs in zip(dets, boxes, classes, strict=True):
        for g, c in zip(bs, cs, strict=True):
            n += 1
            if not len(d):
                continue
            m = iou_one(d, g)
            k = int(m.argmax())
            if m[k] < 0.5:
                continue
            wrong += int(d[k, 5] != c)
            gw, gh = g[2] - g[0], g[3] - g[1]
            rel.append(((d[k, 0] + d[k, 2] - g[0] - g[2]) / 2 / gw,
                        (d[k, 1] + d[k, 3] - g[1] - g[3]) / 2 / gh,
                        np.log((d[k, 2] - d[k, 0]) / gw), np.log((d[k, 3] - d[k, 1]) / gh)))
    r = np.asarray(rel, np.float64)
    mean = tuple(float(v) for v in r.mean(0))
    std = tuple(float(v) for v in r.std(0))
    return Jitter(mean, std, len(r), n, wrong)  # type: ignore[arg-type]


def jittered(rng: np.random.Generator, box: np.ndarray, j: Jitter) -> np.ndarray:
    """``box`` moved and scaled as a detector's box might be: each error drawn from a
    normal of the measured mean and JITTER_GAIN x the measured spread, cut at 3 sigma."""
    z = np.clip(rng.standard_normal(4), -3, 3)
    dx, dy, sw, sh = (m + JITTER_GAIN * s * v for m, s, v in zip(j.mean, j.std, z, strict=True))
    w, h = box[2] - box[0], box[3] - box[1]
    cx, cy = (box[0] + box[2]) / 2 + dx * w, (box[1] + box[3]) / 2 + dy * h
    w, h = w * np.exp(sw), h * np.exp(sh)
    return np.array([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], np.float32)


def make_crops(n_scenes: int, seed: int, digits: np.ndarray, labels: np.ndarray, j: Jitter,
               copies: int) -> tuple[np.ndarray, np.ndarray]:
    """``copies`` jittered crops of every digit of ``n_scenes`` scenes (160x160, 2-5
    digits, as the detector's held-out scenes; some enlarged as a camera frame), as the
    pipeline feeds them: uint8 [M,28,28] and labels [M]."""
    rng = np.random.default_rng(seed)
    st, pre = stage(), preprocessor()
    xs, ys = [], []
    for _ in range(n_scenes):
        img, boxes, classes = det.make_scene(rng, digits, labels)
        frame = np.ascontiguousarray(img[..., ::-1])  # BGR: what a client's frame decodes to
        scale = 1.0
        if rng.random() < UPSCALE_P:
            scale = float(rng.uniform(*UPSCALE))
            frame = cv2.resize(frame, None, fx=scale, fy=scale, interpolation=cv2.INTER_LINEAR)
        for b, c in zip(boxes, classes, strict=True):
            for _k in range(copies):
                xs.append(crop_pixels(frame, jittered(rng, b, j) * scale, st, pre))
                ys.append(int(c))
    return np.stack(xs), np.asarray(ys, np.int64)


# -------------------------------------------------------------------------- model


def build_net():  # -> torch.nn.Module (torch imported lazily)
    """conv c0 -> conv c0 -> maxpool -> conv c1 -> conv c1 -> maxpool -> conv c2 -> conv c2
    -> global average pool -> dropout -> linear 10 (3x3 convs, BN+ReLU, folded at export).

    Why this size: a crop of a textured scene needs more than the digits classifier's
    ``small`` rung, and far less than its 50 M MAC ``cnn``; a few M MACs and under
    100 k parameters keep the stage cheap next to the detector."""
    from torch import nn

    def block(cin: int, cout: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]

    c0, c1, c2 = CHANNELS
    return nn.Sequential(
        *block(1, c0), *block(c0, c0), nn.MaxPool2d(2),
        *block(c0, c1), *block(c1, c1), nn.MaxPool2d(2),
        *block(c1, c2), *block(c2, c2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.1), nn.Linear(c2, 10),
    )  # fmt: skip


def train(x_u8: np.ndarray, y: np.ndarray, epochs: int, seed: int):
    """AdamW, one-cycle LR, label smoothing; the crops already carry the jitter, and each
    epoch adds a random shift of up to 1 pixel and a brightness/contrast wobble."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    rng = np.random.default_rng(seed)
    net = build_net()
    x = to_input(x_u8)
    batch = 128
    steps = epochs * int(np.ceil(len(x) / batch))
    opt = torch.optim.AdamW(net.parameters(), lr=3e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=steps)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.05)
    t0 = time.perf_counter()
    for epoch in range(epochs):
        net.train()
        order = rng.permutation(len(x))
        total = 0.0
        for start in range(0, len(x), batch):
            idx = order[start:start + batch]
            xb = shifted(x[idx], rng)
            # border contrast scales the farthest pixel to 1: only a wobble under it
            xb = np.clip(xb * rng.uniform(0.85, 1.0, (len(idx), 1, 1, 1)), 0, 1)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(net(torch.from_numpy(xb.astype(np.float32))), torch.from_numpy(y[idx]))
            loss.backward()
            opt.step()
            sched.step()
            total += loss.item() * len(idx)
        print(f"  epoch {epoch + 1:2d}/{epochs} loss {total / len(x):.4f}  "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
    return net.eval()


def shifted(x: np.ndarray, rng: np.random.Generator, max_shift: int = 1) -> np.ndarray:
    """Each image moved by up to ``max_shift`` pixels (edge pixels repeated)."""
    n = len(x)
    pad = np.pad(x, ((0, 0), (0, 0), (max_shift,) * 2, (max_shift,) * 2), mode="edge")
    dy = rng.integers(0, 2 * max_shift + 1, n)
    dx = rng.integers(0, 2 * max_shift + 1, n)
    out = np.empty_like(x)
    for i in range(n):
        out[i] = pad[i, :, dy[i]:dy[i] + SIZE, dx[i]:dx[i] + SIZE]
    return out


def export_onnx(net, path: Path) -> None:
    model = export_torch(net, path, (1, 1, SIZE, SIZE), INPUT_NAME, OUTPUT_NAME, BATCH_DIM,
                         OPSET, "edged digit reader for pipeline crops; see "
                         "models/digits-crops/README.md")
    save_checked(model, path)


def quantize_int8(src: Path, dst: Path, calib_u8: np.ndarray) -> None:
    """``edged compile``'s static INT8 (QDQ, per-channel weights, U8 activations, MinMax),
    7-bit weights as the digits classifier's (x86 CPUs without VNNI saturate 8-bit
    products in ORT's int8 kernels)."""
    to_int8_static(src, dst, INPUT_NAME, to_input(calib_u8), batch=32, progress=False,
                   reduce_range=True, pre_process="no_symbolic")
    model = onnx.load(str(dst))
    model.doc_string = "edged digit reader for pipeline crops, int8 QDQ; see " \
                       "models/digits-crops/README.md"
    save_checked(model, dst)


# ------------------------------------------------------------------------ evaluate


def session(path: Path, threads: int = 0) -> ort.InferenceSession:
    """The daemon's CPU session (``threads`` 0 lets ORT choose)."""
    return OnnxRuntimeBackend(path, OnnxRuntimeOptions(threads=threads)).session


def predict(path: Path, x_u8: np.ndarray) -> np.ndarray:
    sess = session(path)
    out = [sess.run([OUTPUT_NAME], {INPUT_NAME: to_input(x_u8[i:i + 256])})[0].argmax(1)
           for i in range(0, len(x_u8), 256)]
    return np.concatenate(out)


def check_io(path: Path) -> None:
    """Fail loudly unless the file has the documented I/O and a working dynamic batch."""
    sess = session(path)
    (inp,), (out,) = sess.get_inputs(), sess.get_outputs()
    assert (inp.name, inp.type) == (INPUT_NAME, "tensor(float)"), inp
    assert (out.name, out.type) == (OUTPUT_NAME, "tensor(float)"), out
    assert isinstance(inp.shape[0], str) and inp.shape[1:] == [1, SIZE, SIZE], inp.shape
    assert isinstance(out.shape[0], str) and out.shape[1:] == [10], out.shape
    for n in (1, 8):
        (y,) = sess.run([OUTPUT_NAME], {INPUT_NAME: np.zeros((n, 1, SIZE, SIZE), np.float32)})
        assert y.shape == (n, 10) and y.dtype == np.float32, y.shape


@dataclass(frozen=True)
class OnBoxes:
    """The stage on the detector's own boxes of val.npz's held-out scenes: of the digits a
    read box finds (IoU >= 0.5, its best-scored such box), how many the detector's class
    and the stage's label get right."""

    scenes: int
    matched: int
    detector_right: int
    stage_right: dict[str, int]


def on_detector_boxes(out: Path) -> OnBoxes:
    """The pipeline in process: ``det-fp32`` on ``models/digits-det/val.npz`` (BGR, as
    stored), its boxes at conf 0.25 (at most 16 a frame, the example's stage), cropped
    and preprocessed as the daemon does, read by each variant. Evaluation only: those
    scenes are never trained on."""
    images_rgb, gt_boxes, gt_cls = det.read_val(det.OUT_DIR / "val.npz")
    sess = det.session(DETECTOR)
    (y,) = sess.run(None, {det.INPUT_NAME: det.to_input(images_rgb, det.SIZE)})
    dets = det.detections(y, det.SIZE, 0.25)
    st = StageConfig(name="digit", model="digits-crops", min_score=0.25, max_crops=16,
                     padding=STAGE["padding"], square=STAGE["square"],
                     contrast=STAGE["contrast"])
    pre = preprocessor()
    crops, det_cls, truth = [], [], []
    for img, d, bs, cs in zip(images_rgb, dets, gt_boxes, gt_cls, strict=True):
        frame = np.ascontiguousarray(img[..., ::-1])
        rows = select(d, st)
        d = d[rows]
        for g, c in zip(bs, cs, strict=True):
            if not len(d):
                continue
            hits = np.flatnonzero(iou_one(d, g) >= 0.5)
            if not hits.size:
                continue
            k = hits[np.argmax(d[hits, 4])]
            crops.append(crop_pixels(frame, d[k], st, pre))
            det_cls.append(int(d[k, 5]))
            truth.append(int(c))
    x, t = np.stack(crops), np.asarray(truth)
    stage_right = {v: int((predict(out / f"{v}.onnx", x) == t).sum()) for v in VARIANTS}
    return OnBoxes(len(images_rgb), len(t), int((np.asarray(det_cls) == t).sum()), stage_right)


def measure_latencies(out: Path) -> dict[str, dict[str, float]]:
    """Batch-1 p50/p90 and batch-16 median per variant, 1 intra-op thread, timed by
    ``edged.compile.bench`` (what ``edged compile`` records for a ladder)."""
    res = {}
    for v in VARIANTS:
        be = OnnxRuntimeBackend(out / f"{v}.onnx", OnnxRuntimeOptions(threads=1))
        s1 = measure(be, 1, runs=400)
        s16 = measure(be, 16, runs=100)
        res[v] = {"median": s1.latency_ms_p50, "p90": s1.latency_ms_p90,
                  "b16": 16000.0 / s16.throughput_per_s}
    return res


# ------------------------------------------------------------------------ samples


def write_samples(out: Path, x: np.ndarray, y: np.ndarray, right: np.ndarray) -> list[str]:
    """One held-out crop per class as the model sees it (28x28 grey PNG, after the stage's
    crop and contrast), named ``digit<label>_<index>.png`` with ``index`` its row in
    validation.npz; picked among crops every variant reads right: smoke tests of the
    preprocessing, not an accuracy measure."""
    sdir = out / "samples"
    sdir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    names = []
    for label in range(10):
        i = int(rng.choice(np.flatnonzero((y == label) & right)))
        name = f"digit{label}_{i:03d}.png"
        cv2.imwrite(str(sdir / name), x[i])
        names.append(name)
    return names


# ------------------------------------------------------------------------- report


def model_json(acc: dict[str, float]) -> dict:
    """Machine-readable facts; ``crops`` are the stage options a pipeline must use."""
    return {
        "input": INPUT_NAME,
        "output": OUTPUT_NAME,
        "labels": LABELS,
        "preprocess": {
            "color": PREPROCESS["color"], "size": [SIZE, SIZE], "scale": PREPROCESS["scale"],
            "mean": [0.0], "std": [1.0], "layout": PREPROCESS["layout"],
            "dtype": PREPROCESS["dtype"],
        },
        # the [[models.stages]] crop options the model was trained on
        "crops": dict(STAGE),
        "accuracy": {v: round(acc[v], 4) for v in VARIANTS},
        # read by `edged compile` (edged/config/modeljson.py): validation and calibration
        "validation": "validation.npz",
    }


@dataclass
class Report:
    """Everything the README quotes, from this build."""

    acc: dict[str, float]  # all held-out crops
    acc_val: dict[str, float]  # validation.npz's (model.json's)
    sizes: dict[str, int]
    lat: dict[str, dict[str, float]]
    n_train: int
    n_test: int
    epochs: int
    train_s: float
    params: int
    macs: int
    jitter: Jitter
    boxes: OnBoxes
    samples: list[str]
    validation_bytes: int


def readme(r: Report) -> str:
    """README text with this run's numbers, so prose and files cannot drift apart."""
    import sklearn
    import torch

    pct = lambda a, b: f"{100 * a / max(b, 1):.1f}"  # noqa: E731
    rows = "\n".join(
        f"| `{v}.onnx` | {r.acc[v] * 100:.2f} % | {r.acc_val[v] * 100:.2f} % "
        f"| {pct(r.boxes.stage_right[v], r.boxes.matched)} % "
        f"| {r.sizes[v] / 1024:.0f} KiB | {r.lat[v]['median']:.3f} | {r.lat[v]['p90']:.3f} "
        f"| {r.lat[v]['b16']:.2f} |"
        for v in VARIANTS
    )
    j = r.jitter
    c0, c1, c2 = CHANNELS
    det_right = pct(r.boxes.detector_right, r.boxes.matched)
    header = ("| variant | held-out crops | validation.npz | crops of the detector's boxes | size "
              "| batch-1 ms | p90 ms | batch-16 ms |")
    samples = ", ".join(f"`{s}`" for s in r.samples)
    return f"""# digits-crops: a digit reader for the crops of digits-det's boxes

A digit classifier (labels `0`..`9`) trained on **crops as a pipeline stage makes them**
from the scenes `models/digits-det` was made for: the second stage of the shipped
pipeline `digits-reader` (`examples/pipelines/digits-reader.toml`, docs/pipelines.md).
Two variants form its ladder, heaviest first: `cnn-fp32` → `cnn-int8`.

*This file, `model.json`, the `.onnx` files, `validation.npz` and `samples/` are all
written by `scripts/models/make_crop_classifier.py`; edit the script, not the outputs.
The `*.golden.npz` files are written by `scripts/models/make_golden.py`.*

## The stage it is made for

The model reads what this stage hands it, and nothing else:

```toml
[[models.stages]]
model = "digits-crops"
padding = {STAGE['padding']:g}
square = {str(STAGE['square']).lower()}
contrast = "{STAGE['contrast']}"
activation = "softmax"   # the output is logits
```

with the model's `[models.preprocess]` `color = "gray"`, `width = {SIZE}`, `height = {SIZE}`,
`scale = 1/255`, `layout = "NCHW"` (the same facts are `crops` and `preprocess` in
`model.json`). Other crop options give it other pixels than it learned.

## Interface

- Input `{INPUT_NAME}`: float32 `[N,1,{SIZE},{SIZE}]`, `N` dynamic: the crop after
  `contrast = "border"` (one grey channel: each pixel's colour distance from the crop's
  border colour, the farthest 255), resized to {SIZE}x{SIZE} (`INTER_LINEAR`), times 1/255.
- Output `{OUTPUT_NAME}`: float32 `[N,10]`; argmax is the digit, softmax the scores.

## Data

Scenes from `scripts/models/make_detector_model.py`'s generator (`make_scene`, imported,
not copied): 160x160, a textured background (smooth noise, a gradient, blurred shapes,
some with pixel noise), {det.VAL_OBJECTS[0]}-{det.VAL_OBJECTS[1]} scikit-learn digits scaled to
{det.CELL_RANGE[0]}-{det.CELL_RANGE[1]} px in an ink colour far from the local background, as
`models/digits-det/val.npz`'s scenes. The digits are split 75/25 exactly as for `digits` and
`digits-det` (stratified, seed {SEED}): training scenes hold training digits only, held-out
scenes held-out digits only, and neither `val.npz` nor its scenes are used for training.

- **Box jitter.** A pipeline crops the detector's boxes, not the true ones. `det-fp32`'s
  errors were measured at build time on {N_JITTER_SCENES} *training* scenes (conf 0.25; of
  {j.digits} digits, {j.matched} found at IoU >= 0.5): centre shift {j.std[0]:.3f} x the
  width and {j.std[1]:.3f} x the height (standard deviations), log scale {j.std[2]:.3f}
  (width) and {j.std[3]:.3f} (height). Each training digit's true box is moved and scaled
  by normal draws of those means and {JITTER_GAIN:g}x those spreads (cut at 3 sigma),
  {COPIES} draws per digit.
- **Camera-sized frames.** {UPSCALE_P:.0%} of the scenes are enlarged {UPSCALE[0]:g}-{UPSCALE[1]:g}x
  before cropping, as a camera frame is larger than the detector's input: the crop then
  goes through the pipeline's shrink step (`cut`'s `fit`, `INTER_AREA` to twice the
  model's size) before the model's resize.
- **The crop itself** is edged's: `edged.model.pipeline.crops.cut` with the stage options
  above (the box's own pixels, squared and padded with the box's border colour, never with
  what lies around the box: docs/pipelines.md, "How a crop is cut"), then
  `edged.preprocess.Preprocessor` with the model's `[models.preprocess]`, from the BGR frame
  a client would send: training and serving crops are the same pixels.

{r.n_train} training crops ({N_TRAIN_SCENES} scenes). Held out: {r.n_test} crops of
{N_TEST_SCENES} scenes of held-out digits (another seed than `val.npz`'s scenes), jittered the
same way. The first {N_VALIDATION} of them are `validation.npz` (`x`: uint8
`[{N_VALIDATION},{SIZE},{SIZE}]`, the model's input times 255; `y`: int64; `np.load`, no
pickle; {r.validation_bytes / 1024:.0f} KiB: textured crops compress poorly, so not all of them),
which `edged compile` reads through `model.json` for validation and INT8 calibration, and
whose accuracy `model.json` records.

## Architecture and training

3x3 convs with BatchNorm and ReLU: {c0} → {c0} → maxpool → {c1} → {c1} → maxpool → {c2} → {c2} →
global average pool → dropout 0.1 → linear 10: {r.params:,} parameters,
{r.macs / 1e6:.1f} M MACs per crop. AdamW (weight decay 1e-4), one-cycle LR (max 3e-3),
label smoothing 0.05, batch 128, {r.epochs} epochs; each epoch adds a random shift of up to
1 pixel and a brightness scale of 0.85-1. {r.train_s / 60:.1f} min on 1 CPU thread of the
shared build machine. BatchNorm folded at export (TorchScript exporter, opset {OPSET}).

**INT8** (`cnn-int8.onnx`): ONNX Runtime static quantization with edged's
`to_int8_static` (`edged compile`'s): QDQ, per-channel S8 weights (7-bit, `reduce_range`,
as `models/digits`), U8 activations, MinMax calibration on {N_CALIB} training crops.

## Accuracy, size, speed

Top-1 accuracy on the {r.n_test} held-out crops, on the {N_VALIDATION} of them in
`validation.npz`, and on the crops of `det-fp32`'s own boxes in
`models/digits-det/val.npz`'s {r.boxes.scenes} held-out scenes (conf 0.25, at most 16 a
scene; each held-out digit a box finds at IoU >= 0.5, {r.boxes.matched} of them): there
the detector's own class is right for **{det_right} %**. Latency with ONNX Runtime
{ort.__version__}, 1 intra-op thread, `edged.compile.bench` (batch 1: p50 and p90 of 400
calls; batch 16: per batch), on the build machine's CPU (`{cpu_name()}`,
{os.cpu_count()} vCPUs, shared: load average {os.getloadavg()[0]:.1f}); treat them as
relative costs:

{header}
|---|---|---|---|---|---|---|---|
{rows}

End to end through the daemon (mAP@0.5 with the stage's labels against the detector's
classes on the same boxes): docs/pipelines.md, "The shipped pipeline"
(`scripts/docs/pipeline_accuracy.py`).

## Samples

`samples/`: one held-out crop per class as the model sees it (28x28 grey PNG after the
stage's crop and contrast), `digit<label>_<index>.png`, `index` its row in
`validation.npz`: {samples}. Picked among crops every variant reads right: smoke tests of
the preprocessing, not an accuracy measure.

## Licence

The weights are the project's own (Apache-2.0, as edged). The data is scikit-learn's
bundled copy of the UCI "Optical Recognition of Handwritten Digits" test set (E. Alpaydin,
C. Kaynak, 1998; CC BY 4.0 at the UCI repository), composed into scenes by the script;
nothing is downloaded.

## How to rebuild

    python3 -m venv /tmp/torchvenv
    /tmp/torchvenv/bin/pip install torch==2.13.0 onnx onnxruntime numpy scikit-learn \\
        opencv-python-headless pycocotools tqdm
    /tmp/torchvenv/bin/python scripts/models/make_crop_classifier.py
    .venv/bin/python scripts/models/make_golden.py          # the golden files
    PYTHONPATH=. .venv/bin/python scripts/docs/pipeline_accuracy.py   # docs/pipelines.md

`--eval-only` re-measures the committed files (no torch). Seeded and deterministic as far
as torch allows (`use_deterministic_algorithms`). The crops depend on
`models/digits-det/det-fp32.onnx` (the measured jitter) and on edged's crop and
preprocessing code: retrain when either changes. Tools: Python {platform.python_version()},
torch {torch.__version__}, onnx {onnx.__version__}, onnxruntime {ort.__version__}, numpy
{np.__version__}, scikit-learn {sklearn.__version__}, opencv {cv2.__version__}.
"""


# --------------------------------------------------------------------------- main


def trained(weights: Path | None, xs: np.ndarray, ys: np.ndarray, epochs: int):
    """Train (and save to ``weights`` if given), or load ``weights`` if that file exists.

    Why: re-exporting or re-documenting should not cost another training run.
    Returns (net, epochs, training seconds) as recorded with the weights."""
    import torch

    if weights is not None and weights.exists():
        ck = torch.load(weights, weights_only=True)  # tensors and numbers only, no pickle code
        net = build_net()
        net.load_state_dict(ck["state"])
        print(f"loaded {weights} (trained {ck['epochs']} epochs, not retraining)")
        return net.eval(), int(ck["epochs"]), float(ck["train_s"])
    t0 = time.perf_counter()
    net = train(xs, ys, epochs, SEED)
    train_s = time.perf_counter() - t0
    if weights is not None:
        torch.save({"state": net.state_dict(), "epochs": epochs, "train_s": train_s}, weights)
    return net, epochs, train_s


def build(out: Path, epochs: int, weights: Path | None = None) -> int:
    """Measure the jitter, make the crops, train, export, quantize, verify and document
    every file into ``out``; 0 on success."""
    x_tr, y_tr, x_te, y_te = det.digit_split()
    jit = measure_jitter(x_tr, y_tr)
    print(f"detector box errors on {jit.matched}/{jit.digits} training digits: "
          f"mean {np.round(jit.mean, 3)} std {np.round(jit.std, 3)}")
    t0 = time.perf_counter()
    xs, ys = make_crops(N_TRAIN_SCENES, TRAIN_SEED, x_tr, y_tr, jit, COPIES)
    xv, yv = make_crops(N_TEST_SCENES, TEST_SEED, x_te, y_te, jit, 1)
    print(f"crops: {len(xs)} training, {len(xv)} held-out ({time.perf_counter() - t0:.0f} s)")

    net, epochs, train_s = trained(weights, xs, ys, epochs)
    params, macs = builder_cost(net, (1, 1, SIZE, SIZE))
    export_onnx(net, out / "cnn-fp32.onnx")
    calib = xs[np.random.default_rng(SEED).choice(len(xs), N_CALIB, replace=False)]
    quantize_int8(out / "cnn-fp32.onnx", out / "cnn-int8.onnx", calib)

    acc, acc_val, sizes = {}, {}, {}
    right = np.ones(N_VALIDATION, bool)
    for v in VARIANTS:
        path = out / f"{v}.onnx"
        check_io(path)
        pred = predict(path, xv)
        acc[v] = float((pred == yv).mean())
        acc_val[v] = float((pred[:N_VALIDATION] == yv[:N_VALIDATION]).mean())
        right &= pred[:N_VALIDATION] == yv[:N_VALIDATION]
        sizes[v] = path.stat().st_size
        print(f"{v:10s} held-out crops top-1 {acc[v] * 100:.2f} % (validation.npz "
              f"{acc_val[v] * 100:.2f} %)  size {sizes[v] / 1024:.0f} KiB")
    if acc["cnn-fp32"] < MIN_ACCURACY or acc["cnn-fp32"] - acc["cnn-int8"] > MAX_INT8_DROP:
        print(f"FAIL: want fp32 >= {MIN_ACCURACY} and int8 within {MAX_INT8_DROP}")
        return 1
    boxes = on_detector_boxes(out)
    print(f"on det-fp32's boxes of val.npz ({boxes.matched} digits): detector "
          f"{boxes.detector_right}, " + ", ".join(f"{v} {n}" for v, n in boxes.stage_right.items()))

    np.savez_compressed(out / "validation.npz", x=xv[:N_VALIDATION], y=yv[:N_VALIDATION])
    samples = write_samples(out, xv[:N_VALIDATION], yv[:N_VALIDATION], right)
    lat = measure_latencies(out)
    (out / "model.json").write_text(json.dumps(model_json(acc_val), indent=2) + "\n")
    report = Report(acc, acc_val, sizes, lat, len(xs), len(xv), epochs, train_s, params, macs,
                    jit, boxes, samples, (out / "validation.npz").stat().st_size)
    (out / "README.md").write_text(readme(report))
    return 0


def eval_only(out: Path) -> int:
    """Re-measure the committed files (no torch)."""
    with np.load(out / "validation.npz") as z:
        x, y = z["x"], z["y"]
    for v in VARIANTS:
        acc = (predict(out / f"{v}.onnx", x) == y).mean()
        print(f"{v:10s} validation.npz top-1 {acc * 100:.2f} %")
    b = on_detector_boxes(out)
    print(f"on det-fp32's boxes of val.npz ({b.matched} digits): detector {b.detector_right}, "
          + ", ".join(f"{v} {n}" for v, n in b.stage_right.items()))
    for v, r in measure_latencies(out).items():
        print(f"{v:10s} batch-1 {r['median']:.3f} ms  p90 {r['p90']:.3f}  batch-16 {r['b16']:.2f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=OUT_DIR, help="output directory")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--eval-only", action="store_true", help="re-measure the existing files")
    ap.add_argument("--weights", type=Path, help="torch weights file: load if it exists "
                    "(skip training), else train and save there")  # fmt: skip
    args = ap.parse_args(argv)
    if args.eval_only:
        return eval_only(args.out)

    import torch

    # one thread: on a busy shared machine OpenMP's barriers spin (make_detector_model.py)
    torch.set_num_threads(args.threads)
    return build_and_publish(args.out, lambda d: build(d, args.epochs, args.weights), "digit*")


if __name__ == "__main__":
    raise SystemExit(main())
