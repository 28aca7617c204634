#!/usr/bin/env python3
"""Build edged's shipped default model: a digit classifier ladder in ``models/digits/``.

Why this exists: edged needs a small but *real* model to serve out of the box, to
test against and to demonstrate the governor's variant ladder. It must be
reproducible from data that ships with a common library (no downloads), so it is
trained on scikit-learn's bundled 8x8 handwritten digits, upscaled to 28x28 exactly
the way the sample PNGs are made, so training sees the same pixels the daemon will
decode from a client's image.

Outputs (heaviest first, the governor's ladder):

* ``cnn-fp32.onnx``   wider CNN, float32
* ``cnn-int8.onnx``   the same network, ORT static quantization (QDQ, per-channel,
  U8 activations / S8 weights), calibrated on training images
* ``small-fp32.onnx`` a much smaller CNN, the cheapest rung

plus ``samples/`` (held-out images as PNG/JPEG), ``validation.npz`` (the held-out
set), ``model.json`` (I/O names, labels, preprocessing, accuracy, the validation
data `edged compile` uses) and ``README.md``.

Torch is a build-time tool only; edged never imports it. Quantization, the session
and timing are edged's own (``edged.compile.ort_steps``, ``edged.backends.onnxruntime``,
``edged.compile.bench``), imported from this checkout.

Usage::

    .venv/bin/pip install torch==2.13.0     # once; CPU wheel
    .venv/bin/python scripts/models/make_digits_model.py            # build everything
    .venv/bin/python scripts/models/make_digits_model.py --latency-only   # re-measure latency
"""

from __future__ import annotations

import argparse
import json
import os
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

from builder_support import build_and_publish, export_torch, save_checked  # noqa: E402
from builder_support import cost as builder_cost  # noqa: E402

from edged.backends.onnxruntime import OnnxRuntimeBackend  # noqa: E402
from edged.backends.support.isa import cpu_name  # noqa: E402
from edged.compile.bench import measure  # noqa: E402
from edged.compile.ort_steps import to_int8_static  # noqa: E402
from edged.config.runtimes import OnnxRuntimeOptions  # noqa: E402

OUT_DIR = ROOT / "models" / "digits"
SEED = 20260
SIZE = 28
LABELS = [str(i) for i in range(10)]
INPUT_NAME = "input"
OUTPUT_NAME = "logits"
BATCH_DIM = "N"
OPSET = 17
MIN_ACCURACY = 0.95
# Ladder order (heaviest first) is the order the config lists variants in.
VARIANTS = ("cnn-fp32", "cnn-int8", "small-fp32")


# --------------------------------------------------------------------------- data


def upscale(digits8: np.ndarray) -> np.ndarray:
    """8x8 images with values 0..16 -> uint8 [M,28,28].

    Why exactly this recipe: the sample PNGs hold these bytes, so a client sending
    a sample gets the very pixels the network was trained on.
    """
    out = np.empty((len(digits8), SIZE, SIZE), dtype=np.uint8)
    for i, img in enumerate(digits8):
        scaled = np.rint(img.astype(np.float32) * 255.0 / 16.0).clip(0, 255).astype(np.uint8)
        out[i] = cv2.resize(scaled, (SIZE, SIZE), interpolation=cv2.INTER_LINEAR)
    return out


@dataclass
class Split:
    """Train/held-out split of the upscaled digits (uint8 [M,28,28], int64 labels)."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def load_split() -> Split:
    """Stratified 75/25 split with a fixed seed, so the held-out set never changes."""
    from sklearn.datasets import load_digits  # the build's tools; --latency-only needs neither
    from sklearn.model_selection import train_test_split

    ds = load_digits()
    x = upscale(ds.images)
    y = ds.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(
        x, y, test_size=0.25, stratify=y, random_state=SEED
    )
    return Split(x_tr, y_tr, x_te, y_te)


def to_input(x_u8: np.ndarray) -> np.ndarray:
    """uint8 [M,28,28] -> float32 [M,1,28,28] scaled by 1/255: the model's documented input."""
    return (x_u8.astype(np.float32) / 255.0)[:, None, :, :]


# -------------------------------------------------------------------------- train


def build_net(kind: str):  # -> torch.nn.Module (torch imported lazily)
    """The two architectures. BatchNorm is folded into the convs at export (eval mode).

    * ``cnn``: 5 convs (48-48 | 96-96 | 192 channels, two 2x2 max-pools), global
      average pool, linear: heavy enough (~50 M MACs) that the ladder's rungs
      differ measurably in cost on a CPU.
    * ``small``: 2 convs (8 | 16 channels, two max-pools), linear on the 7x7 map:
      ~0.3 M MACs, the cheapest rung.
    """
    from torch import nn

    def block(cin: int, cout: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]

    if kind == "cnn":
        return nn.Sequential(
            *block(1, 48), *block(48, 48), nn.MaxPool2d(2),
            *block(48, 96), *block(96, 96), nn.MaxPool2d(2),
            *block(96, 192),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(192, 10),
        )  # fmt: skip
    if kind == "small":
        return nn.Sequential(
            *block(1, 8), nn.MaxPool2d(2),
            *block(8, 16), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(16 * 7 * 7, 10),
        )  # fmt: skip
    raise ValueError(f"unknown architecture {kind!r}")


def cost(net) -> tuple[int, int]:
    """(parameters, multiply-accumulates per image) of a net, for the README."""
    return builder_cost(net, (1, 1, SIZE, SIZE))


def shift_batch(x: np.ndarray, rng: np.random.Generator, max_shift: int = 2) -> np.ndarray:
    """Random translations of up to ``max_shift`` pixels (zero fill).

    Why: handwritten digits in client images are rarely centred exactly like the
    dataset's; small shifts make the model tolerant of that at no cost in accuracy.
    """
    n = len(x)
    pad = np.pad(x, ((0, 0), (0, 0), (max_shift, max_shift), (max_shift, max_shift)))
    dy = rng.integers(0, 2 * max_shift + 1, size=n)
    dx = rng.integers(0, 2 * max_shift + 1, size=n)
    out = np.empty_like(x)
    for i in range(n):
        out[i] = pad[i, :, dy[i] : dy[i] + SIZE, dx[i] : dx[i] + SIZE]
    return out


def train(kind: str, split: Split, epochs: int, seed: int):
    """Train one architecture deterministically (fixed seeds, deterministic kernels)."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    net = build_net(kind)
    x = to_input(split.x_train)
    y = split.y_train
    opt = torch.optim.AdamW(net.parameters(), lr=3e-3, weight_decay=1e-4)
    batch = 64
    steps = epochs * int(np.ceil(len(x) / batch))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=steps)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.05)
    t0 = time.perf_counter()
    for epoch in range(epochs):
        net.train()
        order = rng.permutation(len(x))
        total = 0.0
        for start in range(0, len(x), batch):
            idx = order[start : start + batch]
            xb = torch.from_numpy(shift_batch(x[idx], rng))
            yb = torch.from_numpy(y[idx])
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(net(xb), yb)
            loss.backward()
            opt.step()
            sched.step()
            total += loss.item() * len(idx)
        if epoch == epochs - 1 or epoch % 3 == 0:
            print(f"  [{kind}] epoch {epoch + 1:2d}/{epochs} loss {total / len(x):.4f}")
    print(f"  [{kind}] trained in {time.perf_counter() - t0:.1f} s")
    return net.eval()


def export_onnx(net, path: Path) -> None:
    """Export with a symbolic batch dim ``N`` (``builder_support.export_torch``)."""
    model = export_torch(net, path, (1, 1, SIZE, SIZE), INPUT_NAME, OUTPUT_NAME, BATCH_DIM,
                         OPSET, "edged digits classifier; see models/digits/README.md")
    save_checked(model, path)


# ------------------------------------------------------------------------ quantize


def quantize_int8(src: Path, dst: Path, calib_u8: np.ndarray) -> None:
    """``edged compile``'s static INT8 (``to_int8_static``): QDQ, per-channel S8 weights,
    U8 activations, MinMax calibration on training images.

    Why QDQ/U8: on x86 ORT fuses QDQ into int8 kernels (about 1.45x faster), whereas
    QOperator S8S8 and dynamic quantization were ~5x *slower* (measured; docs/compile.md);
    TensorRT also consumes QDQ as explicit quantization.
    """
    # 7-bit weights (reduce_range): x86 CPUs without VNNI (AVX2 only) saturate U8xS8
    # products in ORT's int8 kernels; with 8-bit weights the held-out accuracy fell from
    # 99.56% to 98.44% on such a CPU (ORT 1.32). 7 bits are exact everywhere.
    to_int8_static(src, dst, INPUT_NAME, to_input(calib_u8), batch=32, progress=False,
                   reduce_range=True, pre_process="no_symbolic")
    model = onnx.load(str(dst))
    model.doc_string = "edged digits classifier, int8 QDQ; see models/digits/README.md"
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))


# ------------------------------------------------------------------------ evaluate


def session(path: Path, threads: int = 0) -> ort.InferenceSession:
    """The daemon's CPU session (``threads`` 0 lets ORT choose)."""
    return OnnxRuntimeBackend(path, OnnxRuntimeOptions(threads=threads)).session


def accuracy(path: Path, x_u8: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Top-1 accuracy and predictions, run in batches of 64 (exercises the dynamic dim)."""
    sess = session(path)
    preds = []
    for i in range(0, len(x_u8), 64):
        (logits,) = sess.run([OUTPUT_NAME], {INPUT_NAME: to_input(x_u8[i : i + 64])})
        preds.append(logits.argmax(1))
    p = np.concatenate(preds)
    return float((p == y).mean()), p


def check_io(path: Path, x_u8: np.ndarray) -> None:
    """Fail loudly unless the file has the documented I/O and a working dynamic batch."""
    sess = session(path)
    (inp,), (out,) = sess.get_inputs(), sess.get_outputs()
    assert inp.name == INPUT_NAME and inp.type == "tensor(float)", inp
    assert out.name == OUTPUT_NAME and out.type == "tensor(float)", out
    assert isinstance(inp.shape[0], str) and inp.shape[1:] == [1, SIZE, SIZE], inp.shape
    assert isinstance(out.shape[0], str) and out.shape[1:] == [10], out.shape
    for n in (1, 8):
        (logits,) = sess.run([OUTPUT_NAME], {INPUT_NAME: to_input(x_u8[:n])})
        assert logits.shape == (n, 10) and logits.dtype == np.float32, logits.shape


def measure_latencies(out: Path) -> dict[str, dict[str, float]]:
    """Batch-1 latency (p50, p90) of every variant, 1 intra-op thread, timed by
    ``edged.compile.bench`` (what ``edged compile`` records for a ladder).

    Why one intra-op thread: it is the least noisy on a small shared machine and what
    an edge device running several models typically gives each.
    """
    res = {}
    for v in VARIANTS:
        be = OnnxRuntimeBackend(out / f"{v}.onnx", OnnxRuntimeOptions(threads=1))
        s = measure(be, 1, runs=400)
        res[v] = {"median": s.latency_ms_p50, "p90": s.latency_ms_p90}
    return res


# ------------------------------------------------------------------------ samples


def write_samples(
    out: Path, x_test: np.ndarray, y_test: np.ndarray, all_correct: np.ndarray
) -> list[str]:
    """One grayscale PNG per class, one JPEG and one BGR colour PNG, from held-out images.

    Names are ``digit<label>_<index>.<ext>`` with ``index`` the image's row in
    ``validation.npz``, so every sample is traceable. Samples are picked among
    held-out images that every variant classifies correctly: they are smoke tests
    of decoding and preprocessing, not an accuracy measure (validation.npz is).
    """
    sdir = out / "samples"
    sdir.mkdir(parents=True, exist_ok=True)
    for old in sdir.glob("digit*"):
        old.unlink()
    names: list[str] = []
    rng = np.random.default_rng(SEED)
    used: set[int] = set()
    for label in range(10):
        cands = np.flatnonzero((y_test == label) & all_correct)
        i = int(rng.choice(cands))
        used.add(i)
        name = f"digit{label}_{i:03d}.png"
        cv2.imwrite(str(sdir / name), x_test[i])
        names.append(name)

    def fresh(label: int) -> int:
        cands = [int(c) for c in np.flatnonzero((y_test == label) & all_correct) if c not in used]
        i = int(rng.choice(cands))
        used.add(i)
        return i

    # JPEG (grayscale, quality 90): lossy decoding must not change the answer.
    i = fresh(7)
    name = f"digit7_{i:03d}.jpg"
    cv2.imwrite(str(sdir / name), x_test[i], [cv2.IMWRITE_JPEG_QUALITY, 90])
    names.append(name)
    # Colour PNG (3 channels, BGR): light-blue ink on a dark-red background, so a
    # client that forgets grayscale conversion or swaps channel order would notice.
    i = fresh(3)
    g = x_test[i].astype(np.float32) / 255.0
    ink = np.array([255.0, 220.0, 180.0])  # B, G, R
    paper = np.array([10.0, 10.0, 40.0])
    bgr = np.rint(paper * (1 - g[..., None]) + ink * g[..., None]).astype(np.uint8)
    name = f"digit3_{i:03d}.png"
    cv2.imwrite(str(sdir / name), bgr)
    names.append(name)
    return names


def preprocess_file(path: Path) -> np.ndarray:
    """The documented client preprocessing: gray, 28x28, /255, NCHW float32 [1,1,28,28]."""
    img = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    if img is None:
        raise ValueError(f"cannot decode {path}")
    if img.ndim == 3:
        code = cv2.COLOR_BGRA2GRAY if img.shape[2] == 4 else cv2.COLOR_BGR2GRAY
        img = cv2.cvtColor(img, code)
    if img.shape != (SIZE, SIZE):
        img = cv2.resize(img, (SIZE, SIZE), interpolation=cv2.INTER_AREA)
    return (img.astype(np.float32) / 255.0)[None, None]


# ------------------------------------------------------------------------- report


def model_json(acc: dict[str, float]) -> dict:
    """Machine-readable facts a config/compile step needs; mirrors README's prose."""
    return {
        "input": INPUT_NAME,
        "output": OUTPUT_NAME,
        "labels": LABELS,
        "preprocess": {
            "color": "gray",
            "size": [SIZE, SIZE],
            "scale": 1.0 / 255.0,
            "mean": [0.0],
            "std": [1.0],
            "layout": "NCHW",
            "dtype": "float32",
        },
        "accuracy": {v: round(acc[v], 4) for v in VARIANTS},
        # Read by `edged compile` (edged/config/modeljson.py): validation and INT8
        # calibration data when --val/--calib are not given.
        "validation": "validation.npz",
    }


def readme(
    acc: dict[str, float],
    sizes: dict[str, int],
    lat: dict[str, dict[str, float]],
    n_train: int,
    n_test: int,
    samples: list[str],
    costs: dict[str, tuple[int, int]],
) -> str:
    """README text with this run's numbers, so prose and files cannot drift apart."""
    import torch

    rows = "\n".join(
        f"| `{v}.onnx` | {acc[v] * 100:.2f}% | {sizes[v] / 1024:.0f} KiB "
        f"| {lat[v]['median']:.3f} | {lat[v]['p90']:.3f} |"
        for v in VARIANTS
    )
    cpu = cpu_name()
    load1 = os.getloadavg()[0]
    sample_list = ", ".join(f"`{s}`" for s in samples)
    return f"""# digits: edged's shipped default model

A handwritten-digit classifier (labels `0`..`9`), small enough to ship in the
repository and real enough to test against. Three variants form the governor's
ladder, heaviest first: `cnn-fp32` → `cnn-int8` → `small-fp32`.

*This file, `model.json`, the `.onnx` files, `validation.npz` and `samples/` are
all written by `scripts/models/make_digits_model.py`; edit the script, not the outputs.*

## How it was made

    .venv/bin/pip install torch==2.13.0     # build-time only; edged never imports torch
    .venv/bin/python scripts/models/make_digits_model.py

Deterministic (fixed seeds; two runs gave byte-identical files), about a minute
on 2 CPU cores. Tools: torch {torch.__version__}, onnx {onnx.__version__},
onnxruntime {ort.__version__}.

**Data**: scikit-learn's bundled `load_digits` (1797 8x8 images, values 0..16; no
download). Each image is scaled to 0..255 (`round(v*255/16)` as uint8) and
upscaled to 28x28 with `cv2.resize(..., INTER_LINEAR)`: exactly the bytes the
sample PNGs hold, so training sees what the daemon decodes. Stratified 75/25
split (seed {SEED}): {n_train} training, {n_test} held-out images. The held-out
set is `validation.npz` (`x`: uint8 [{n_test},28,28], `y`: int64 [{n_test}]), used
for accuracy checks by tests and the compile pipeline; load it with `np.load`
(no pickle).

**Training**: AdamW, one-cycle LR (max 3e-3), label smoothing 0.05, batch 64,
random shifts of up to ±2 pixels as augmentation. BatchNorm is folded into the
convolutions at export (eval mode, TorchScript exporter, opset {OPSET}).

**Architectures** (3x3 convs, padding 1, BN+ReLU after each):

- `cnn`: conv 48 → conv 48 → maxpool → conv 96 → conv 96 → maxpool → conv 192 →
  global average pool → dropout 0.2 → linear 10 ({costs["cnn"][0]:,} parameters,
  {costs["cnn"][1] / 1e6:.1f} M MACs per image).
- `small`: conv 8 → maxpool → conv 16 → maxpool → flatten 16x7x7 → linear 10
  ({costs["small"][0]:,} parameters, {costs["small"][1] / 1e6:.2f} M MACs per image).

**Variants**:

- `cnn-fp32.onnx`: the `cnn` network, float32.
- `cnn-int8.onnx`: `cnn-fp32` after ONNX Runtime static quantization: QDQ format,
  per-channel S8 weights, U8 activations, MinMax calibration on the training
  images (`quant_pre_process(skip_symbolic_shape=True)` first), 7-bit weights
  (`reduce_range`), with `edged/compile/ort_steps.to_int8_static`.
- `small-fp32.onnx`: the `small` network, float32: the cheapest rung.

## Interface

- Input `input`: float32 `[N,1,28,28]`, `N` a symbolic (dynamic) batch dimension.
- Output `logits`: float32 `[N,10]`; `argmax` is the digit. Apply softmax for
  probabilities.

## Preprocessing a client image needs

1. decode; convert to **grayscale** (colour images: `cv2.COLOR_BGR2GRAY`),
2. **resize to 28x28** (the samples already are),
3. **scale by 1/255** to float32 in [0,1] (mean 0, std 1: no normalisation beyond
   that),
4. layout **NCHW**: shape `[1,1,28,28]`, dtype **float32**.

White digit on a black background, as in the samples. The same facts,
machine-readable, are in `model.json`.

## Accuracy, size, speed

Top-1 accuracy on the {n_test} held-out images; batch-1 latency with ONNX
Runtime {ort.__version__} on the build machine's CPU (`{cpu}`, {os.cpu_count()} vCPUs,
shared: 1-minute load average {load1:.1f} while measuring), 1 intra-op thread,
p50 and p90 of 400 calls in `edged.compile.bench`'s three rounds.
Treat them as relative costs of the rungs, not as a device's numbers:

| variant | accuracy | size | batch-1 median ms | p90 ms |
|---|---|---|---|---|
{rows}

Re-measure latency on your machine (no torch needed):

    .venv/bin/python scripts/models/make_digits_model.py --latency-only

## Samples

`samples/` holds held-out images (not seen in training), named
`digit<label>_<index>.<ext>` where `index` is the row in `validation.npz`:
{sample_list}. One per class as 28x28 grayscale PNG, one grayscale JPEG (quality
90) and one 3-channel BGR colour PNG (light ink on a dark red background) to
exercise colour→gray conversion. They were picked among held-out images that
every variant classifies correctly, so they are smoke tests for decoding and
preprocessing, not an accuracy measure.
"""


# --------------------------------------------------------------------------- main


def build(out: Path, epochs: int) -> int:
    """Train, export, quantize, verify and document every file into ``out``; 0 on success."""
    split = load_split()
    print(f"data: {len(split.x_train)} train, {len(split.x_test)} held-out")

    nets = {
        "cnn": train("cnn", split, epochs, SEED),
        "small": train("small", split, epochs, SEED + 1),
    }
    costs = {k: cost(n) for k, n in nets.items()}
    export_onnx(nets["cnn"], out / "cnn-fp32.onnx")
    export_onnx(nets["small"], out / "small-fp32.onnx")
    quantize_int8(out / "cnn-fp32.onnx", out / "cnn-int8.onnx", split.x_train)

    acc: dict[str, float] = {}
    preds: dict[str, np.ndarray] = {}
    sizes: dict[str, int] = {}
    for v in VARIANTS:
        path = out / f"{v}.onnx"
        check_io(path, split.x_test)
        acc[v], preds[v] = accuracy(path, split.x_test, split.y_test)
        sizes[v] = path.stat().st_size
        print(f"{v:12s} held-out top-1 {acc[v] * 100:.2f}%  size {sizes[v] / 1024:.0f} KiB")
    bad = [v for v in VARIANTS if acc[v] < MIN_ACCURACY]
    if bad:
        print(f"FAIL: accuracy below {MIN_ACCURACY:.0%} for {bad}")
        return 1

    np.savez_compressed(out / "validation.npz", x=split.x_test, y=split.y_test)
    all_correct = np.logical_and.reduce([preds[v] == split.y_test for v in VARIANTS])
    samples = write_samples(out, split.x_test, split.y_test, all_correct)
    for v in VARIANTS:  # the samples must survive encoding + documented preprocessing
        sess = session(out / f"{v}.onnx")
        for name in samples:
            x = preprocess_file(out / "samples" / name)
            (logits,) = sess.run([OUTPUT_NAME], {INPUT_NAME: x})
            want = int(name[len("digit")])
            got = int(logits.argmax())
            if got != want:
                print(f"FAIL: {v} classifies sample {name} as {got}")
                return 1
    print(f"samples: {', '.join(samples)}")

    lat = measure_latencies(out)
    for v in VARIANTS:
        print(f"{v:12s} batch-1 median {lat[v]['median']:.3f} ms  p90 {lat[v]['p90']:.3f} ms")

    (out / "model.json").write_text(json.dumps(model_json(acc), indent=2) + "\n")
    (out / "README.md").write_text(
        readme(acc, sizes, lat, len(split.x_train), len(split.x_test), samples, costs)
    )
    return 0



def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=OUT_DIR, help="output directory")
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument(
        "--latency-only", action="store_true", help="only measure batch-1 latency of existing files"
    )
    args = ap.parse_args(argv)
    out: Path = args.out

    if args.latency_only:
        for v, r in measure_latencies(out).items():
            print(f"{v:12s} batch-1 median {r['median']:.3f} ms  p90 {r['p90']:.3f} ms")
        return 0

    import torch

    torch.manual_seed(SEED)
    torch.set_num_threads(min(2, os.cpu_count() or 1))

    return build_and_publish(out, lambda d: build(d, args.epochs), "digit*")


if __name__ == "__main__":
    raise SystemExit(main())
