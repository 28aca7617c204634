"""Check a variant against the original model on a validation set.

Why: quantization and compilation can silently change results (a bad calibration
set, an fp16 overflow, a miscompiled kernel). Every variant runs the same inputs
as the original fp32 model; with labels we compare accuracy, without labels we
use top-1 agreement with the original as the proxy. A variant that loses more than
``max_drop`` percentage points is rejected.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from edged.backends.base import Backend, run_batch


def predict(backend: Backend, x: np.ndarray, batch: int) -> np.ndarray:
    """First output of ``backend`` over ``x`` in batches, as float64."""
    name_in = backend.inputs[0].name
    name_out = backend.outputs[0].name
    outs = [run_batch(backend, {name_in: np.ascontiguousarray(x[i : i + batch])})[name_out]
            for i in range(0, x.shape[0], batch)]
    return np.concatenate(outs).astype(np.float64)


@dataclass
class Validation:
    samples: int
    agreement_pct: float  # top-1 agreement with the original model
    max_abs_diff: float
    mean_abs_diff: float
    accuracy_pct: float | None = None
    reference_accuracy_pct: float | None = None
    drop_pct: float = 0.0  # accuracy points lost (or disagreement without labels)
    max_drop_pct: float = 2.0
    passed: bool = True

    def to_json(self) -> dict[str, Any]:
        return {k: (float(f"{v:.6g}") if isinstance(v, float) else v)
                for k, v in asdict(self).items()}

    def summary(self) -> str:
        acc = (f"accuracy {self.accuracy_pct:.2f}% (original {self.reference_accuracy_pct:.2f}%,"
               f" drop {self.drop_pct:+.2f} pts), " if self.accuracy_pct is not None else "")
        return (f"{acc}top-1 agreement {self.agreement_pct:.2f}%, max|diff| "
                f"{self.max_abs_diff:.3g}, mean|diff| {self.mean_abs_diff:.3g}")


def compare(ref: np.ndarray, out: np.ndarray, y: np.ndarray | None, max_drop: float) -> Validation:
    """Agreement, differences and (with labels) accuracy drop of ``out`` against ``ref``."""
    if ref.shape != out.shape:
        raise ValueError(f"output shape {out.shape} differs from the original's {ref.shape}")
    diff = np.abs(ref - out)
    finite = bool(np.isfinite(out).all())
    top_ref, top_out = ref.argmax(axis=1), out.argmax(axis=1)
    v = Validation(
        samples=int(ref.shape[0]),
        agreement_pct=float((top_ref == top_out).mean() * 100.0),
        max_abs_diff=float(diff.max()) if finite else float("inf"),
        mean_abs_diff=float(diff.mean()) if finite else float("inf"),
        max_drop_pct=max_drop,
    )
    if y is not None:
        v.reference_accuracy_pct = float((top_ref == y).mean() * 100.0)
        v.accuracy_pct = float((top_out == y).mean() * 100.0)
        v.drop_pct = v.reference_accuracy_pct - v.accuracy_pct
    else:
        v.drop_pct = 100.0 - v.agreement_pct
    v.passed = finite and v.drop_pct <= max_drop
    return v
