#!/usr/bin/env python3
"""Record golden inputs and outputs beside the shipped models' artifacts.

``edged compile`` does this for what it builds; this script does it for the artifacts
committed under ``models/`` (digits and digits-crops: the first validation images;
person: scikit-image sample photos, not the ones the tests check; digits-det: held-out
scenes).
Re-run it after changing an artifact:

    .venv/bin/python scripts/models/make_golden.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from edged.backends import backend_module  # noqa: E402
from edged.backends.base import run_batch  # noqa: E402
from edged.config.runtimes import read_options  # noqa: E402
from edged.config.schema import Table  # noqa: E402
from edged.verify.golden import precision_of, write_golden  # noqa: E402


def record(artifact: Path, feeds: dict[str, np.ndarray]) -> None:
    mod = backend_module("onnxruntime")
    be = mod.open_backend(artifact, read_options("onnxruntime", Table({}, "", "-")), 8)
    outs = run_batch(be, feeds)
    be.close()
    p = write_golden(artifact, feeds, outs, precision_of(artifact, artifact.stem))
    print(f"{p}: {len(next(iter(feeds.values())))} inputs, "
          f"{p.stat().st_size if p else 0} bytes" if p else f"{artifact}: too large, skipped")


def digits() -> None:
    with np.load(ROOT / "models" / "digits" / "validation.npz") as z:
        x = (z["x"][:8].astype(np.float32) / 255.0)[:, None]
    for a in sorted((ROOT / "models" / "digits").glob("*.onnx")):
        record(a, {"input": x})


def digits_crops() -> None:
    """The crop reader: its first held-out crops (already the model's 28x28 input x 255)."""
    with np.load(ROOT / "models" / "digits-crops" / "validation.npz") as z:
        x = (z["x"][:8].astype(np.float32) / 255.0)[:, None]
    for a in sorted((ROOT / "models" / "digits-crops").glob("*.onnx")):
        record(a, {"input": x})


def person() -> None:
    from skimage import data

    photos = [data.camera(), data.coffee(), data.chelsea(), data.rocket()]
    frames = [cv2.cvtColor(p, cv2.COLOR_GRAY2RGB) if p.ndim == 2 else p for p in photos]
    x = np.stack([cv2.resize(f, (300, 300), interpolation=cv2.INTER_LINEAR) for f in frames])
    for a in sorted((ROOT / "models" / "person").glob("*.onnx")):
        record(a, {"image_tensor:0": x.astype(np.uint8)})


def digits_det() -> None:
    """The trained detector: held-out scenes, RGB/255 NCHW at each variant's own size."""
    import onnxruntime as ort

    with np.load(ROOT / "models" / "digits-det" / "val.npz") as z:
        frames = z["images"][:4]
    for a in sorted((ROOT / "models" / "digits-det").glob("*.onnx")):
        size = int(ort.InferenceSession(str(a), providers=["CPUExecutionProvider"])
                   .get_inputs()[0].shape[2])
        x = np.stack([cv2.cvtColor(cv2.resize(f, (size, size)), cv2.COLOR_BGR2RGB)
                      for f in frames]).astype(np.float32) / 255.0
        record(a, {"images": np.ascontiguousarray(x.transpose(0, 3, 1, 2))})


if __name__ == "__main__":
    digits()
    person()
    digits_det()
    digits_crops()
