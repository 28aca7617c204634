"""Golden checks: a variant must still compute what it computed when it was validated.

Why: a swap puts a variant live without a human looking. ``edged compile`` records a
few inputs from the validation (or calibration) data and the artifact's own outputs on
them, beside the artifact (``ARTIFACT.golden.npz``, bounded size, no pickle); before a
swap the daemon runs the candidate on those inputs and compares, with tolerances per
precision and top-1 agreement for classifier-shaped outputs. Corrupted weights, a
truncated file that still parses, or a runtime that computes differently are refused
before they serve a request.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edged.backends.base import Backend, run_batch
from edged.errors import ArtifactError

MAX_SAMPLES = 8
MAX_BYTES = 4 << 20  # golden inputs + outputs per artifact

#: precision -> (max |candidate - recorded| as a fraction of the recorded range,
#:               min top-1 agreement on [N, C] float outputs)
TOLERANCE: dict[str, tuple[float, float]] = {
    "fp32": (1e-3, 1.0),
    "fp16": (0.02, 0.99),
    "int8": (0.1, 0.85),
}


class GoldenMismatch(ArtifactError):
    """The candidate's outputs on its golden inputs differ from the recorded ones."""


@dataclass(frozen=True)
class Golden:
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]
    precision: str


def golden_path(artifact: Path) -> Path:
    return artifact.with_name(artifact.name + ".golden.npz")


def write_golden(artifact: Path, inputs: dict[str, np.ndarray], outputs: dict[str, np.ndarray],
                 precision: str) -> Path | None:
    """Record ``inputs`` and the artifact's ``outputs`` on them; None when too large."""
    arrays = {f"in:{k}": np.ascontiguousarray(v) for k, v in inputs.items()}
    arrays.update({f"out:{k}": np.ascontiguousarray(v) for k, v in outputs.items()})
    if sum(a.nbytes for a in arrays.values()) > MAX_BYTES:
        return None
    arrays["meta"] = np.frombuffer(json.dumps({"precision": precision}).encode(), np.uint8)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)  # type: ignore[arg-type]
    out = golden_path(artifact)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(buf.getvalue())
    tmp.replace(out)
    return out


def read_golden(artifact: Path) -> Golden | None:
    p = golden_path(artifact)
    if not p.exists():
        return None
    try:
        with np.load(p, allow_pickle=False) as z:
            meta = json.loads(bytes(z["meta"]).decode())
            ins = {k[3:]: z[k] for k in z.files if k.startswith("in:")}
            outs = {k[4:]: z[k] for k in z.files if k.startswith("out:")}
    except (OSError, ValueError, KeyError) as e:
        raise ArtifactError(f"{p}: unreadable golden file: {e}") from None
    return Golden(ins, outs, str(meta.get("precision", "fp32")))


def precision_of(artifact: Path, name: str) -> str:
    """The artifact's precision from its sidecar, else guessed from the variant name."""
    from edged.backends.sidecar import read_sidecar

    side: dict[str, Any] | None = None
    try:
        side = read_sidecar(artifact)
    except Exception:
        side = None
    if side and side.get("precision") in TOLERANCE:
        return str(side["precision"])
    low = name.lower()
    return next((p for p in ("int8", "fp16") if p in low), "fp32")


def check(variant: str, backend: Backend, golden: Golden) -> dict[str, float]:
    """Run ``backend`` on the golden inputs; GoldenMismatch if it strays. Returns the
    worst relative error and agreement per output (for the log)."""
    tol, agree_min = TOLERANCE.get(golden.precision, TOLERANCE["fp32"])
    got = run_batch(backend, golden.inputs)
    report: dict[str, float] = {}
    for name, ref in golden.outputs.items():
        where = f"golden check: variant {variant!r} output {name!r}"
        a = got.get(name)
        if a is None or a.shape != ref.shape:
            raise GoldenMismatch(f"{where} is "
                                 f"{None if a is None else list(a.shape)} on its golden inputs; "
                                 f"recorded {list(ref.shape)}")
        if ref.dtype.kind != "f":
            if not np.array_equal(a, ref):
                raise GoldenMismatch(f"{where} differs from the "
                                     "recorded one on its golden inputs")
            continue
        span = float(np.abs(ref).max()) or 1.0
        err = float(np.abs(a.astype(np.float64) - ref).max()) / span
        report[f"{name}.rel_err"] = err
        if err > tol:
            raise GoldenMismatch(f"{where} strays {err:.3g} of its "
                                 f"range from the recorded outputs (allowed {tol:g} for "
                                 f"{golden.precision})")
        if ref.ndim == 2 and ref.shape[1] > 1:
            agree = float((a.argmax(1) == ref.argmax(1)).mean())
            report[f"{name}.top1"] = agree
            if agree < agree_min:
                raise GoldenMismatch(f"{where} agrees on top-1 for "
                                     f"{agree:.0%} of its golden inputs (needs "
                                     f"{agree_min:.0%} for {golden.precision})")
    return report
