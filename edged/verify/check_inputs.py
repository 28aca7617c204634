"""Where a variant's check inputs come from, and how they are fitted to a variant.

Order (docs/architecture.md, "A variant's life"): the golden file ``edged compile`` wrote
beside the artifact; else the validation (or calibration) data that the ``model.json``
beside it names; else the last inputs the model served (a bounded ring, kept only for models
that need it). Each set is a batch of tensors in *some* variant's input shape;
:func:`fit_feeds` resizes image tensors to another variant's input size, so a 128-px rung is
checked against a 160-px reference on the same pictures.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from edged.backends.base import TensorSpec
from edged.config import modeljson
from edged.errors import ArtifactError
from edged.verify import golden

#: check inputs taken from validation data (the first N rows)
MAX_VALIDATION = 16
#: bytes the served-input ring may hold per model
MAX_RECENT_BYTES = 8 << 20


@dataclass(frozen=True)
class CheckInputs:
    """A batch of check inputs, where they came from, and (golden files only) the
    outputs the build machine recorded on them, kept for diagnostics."""

    source: str
    feeds: dict[str, np.ndarray]
    recorded: dict[str, np.ndarray] | None = None
    #: the same inputs every time (golden file, validation data), so the reference's
    #: results on them can be kept; served inputs change with every request
    fixed: bool = True

    @property
    def count(self) -> int:
        return int(next(iter(self.feeds.values())).shape[0])


def from_golden(artifact: Path) -> CheckInputs | None:
    g = golden.read_golden(artifact)
    if g is None or not g.inputs:
        return None
    return CheckInputs(f"golden file {golden.golden_path(artifact).name}", g.inputs, g.outputs)


def validation_file(artifact: Path) -> Path | None:
    """The validation (else calibration) array file the ``model.json`` beside it names."""
    card = modeljson.beside(artifact)
    if card is None:
        return None
    try:
        found = modeljson.read(card)
    except ValueError as e:
        raise ArtifactError(str(e)) from None
    return next((p for p in (found.validation, found.calibration)
                 if p is not None and p.suffix in (".npz", ".npy") and p.is_file()), None)


def from_validation(artifact: Path, spec: TensorSpec,
                    to_tensor: Callable[[np.ndarray], np.ndarray] | None) -> CheckInputs | None:
    """The first rows of the model's validation data as ``spec``'s input.

    Rows that already fit ``spec`` are used as they are; uint8 frames (HxW or HxWxC)
    go through ``to_tensor`` (the model's preprocessing), or are skipped without one."""
    p = validation_file(artifact)
    if p is None:
        return None
    try:
        with np.load(p, allow_pickle=False) as z:
            if isinstance(z, np.ndarray):
                x = z[:MAX_VALIDATION]
            else:
                key = next((k for k in ("x", "images", "inputs") if k in z.files), None)
                if key is None:
                    return None
                x = z[key][:MAX_VALIDATION]
    except (OSError, ValueError) as e:
        raise ArtifactError(f"{p}: unreadable validation data: {e}") from None
    if len(x) == 0:
        return None
    if spec.matches_item(x.dtype, x.shape):
        tensor = np.ascontiguousarray(x)
    elif to_tensor is not None and x.dtype == np.uint8 and x.ndim in (3, 4):
        tensor = np.concatenate([to_tensor(row) for row in x])
    else:
        return None
    return CheckInputs(f"{len(x)} rows of {p.name}", {spec.name: tensor})


class RecentInputs:
    """The last inputs a model served, one row per batch (worker thread writes, a swap
    check reads): check inputs for a variant that has no golden file or data."""

    def __init__(self, capacity: int, max_bytes: int = MAX_RECENT_BYTES) -> None:
        self.capacity = capacity
        self.max_bytes = max_bytes
        self._rows: deque[dict[str, np.ndarray]] = deque(maxlen=max(capacity, 1))
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(a.nbytes for row in self._rows for a in row.values())

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, feeds: dict[str, np.ndarray]) -> None:
        """Keep a copy of the first row of a batch (what the backend is given)."""
        row = {k: np.array(a[:1]) for k, a in feeds.items()}
        size = sum(a.nbytes for a in row.values())
        if size * self.capacity > self.max_bytes:
            return  # inputs this large would hold too much memory: never remembered
        with self._lock:
            if self._rows and _kinds(self._rows[-1]) != _kinds(row):
                self._rows.clear()  # a swap to another input size: start again
            self._rows.append(row)

    def snapshot(self) -> CheckInputs | None:
        with self._lock:
            rows = list(self._rows)
        if not rows:
            return None
        feeds = {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}
        return CheckInputs(f"the last {len(rows)} inputs served", feeds, fixed=False)


def _kinds(row: dict[str, np.ndarray]) -> tuple[tuple[str, str, tuple[int, ...]], ...]:
    return tuple((k, a.dtype.str, a.shape[1:]) for k, a in sorted(row.items()))


def fit_feeds(feeds: dict[str, np.ndarray], specs: list[TensorSpec],
              layout: str | None) -> dict[str, np.ndarray] | None:
    """``feeds`` as inputs of a variant with ``specs``: as they are where they fit, image
    tensors resized to its height and width; None when they cannot be made to fit."""
    out: dict[str, np.ndarray] = {}
    for spec in specs:
        a = feeds.get(spec.name)
        if a is None:
            return None
        if spec.matches_item(a.dtype, a.shape):
            out[spec.name] = a
            continue
        resized = _resize_images(a, spec, layout)
        if resized is None:
            return None
        out[spec.name] = resized
    return out


def _resize_images(a: np.ndarray, spec: TensorSpec, layout: str | None) -> np.ndarray | None:
    if a.ndim != 4 or len(spec.shape) != 4 or a.dtype != spec.dtype:
        return None
    nchw = layout == "NCHW" if layout else a.shape[1] in (1, 3) and a.shape[3] not in (1, 3)
    hw = (2, 3) if nchw else (1, 2)
    h, w = spec.shape[hw[0]], spec.shape[hw[1]]
    channels = a.shape[1] if nchw else a.shape[3]
    want_c = spec.shape[1] if nchw else spec.shape[3]
    if h <= 0 or w <= 0 or want_c not in (-1, channels):
        return None
    images = a.transpose(0, 2, 3, 1) if nchw else a
    out = np.stack([cv2.resize(np.ascontiguousarray(im), (w, h), interpolation=cv2.INTER_AREA)
                    .reshape(h, w, channels) for im in images])
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2) if nchw else out)
