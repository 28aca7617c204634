"""The per-backend, per-precision table ``edged device-check`` prints for each model.

Why a module: the table is what an operator compares across devices, so its figures
(p50 at batch 1 and throughput through the daemon, agreement with ONNX Runtime fp32
on CPU) have one definition, and its formatting is tested on recorded results on
machines that have no GPU to produce real ones.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

OK, SKIP, FAIL = "ok", "SKIP", "FAIL"


@dataclass
class Row:
    """One backend x precision of one model, as served through the daemon."""

    model: str
    backend: str  # onnxruntime-cpu, onnxruntime-cuda, onnxruntime-tensorrt, tensorrt
    precision: str
    status: str = OK  # ok, SKIP or FAIL
    p50_ms: float | None = None  # one item per request, sequential
    items_per_s: float | None = None  # single-item requests in flight, batched by the daemon
    top1_agree_pct: float | None = None  # vs ONNX Runtime fp32 on CPU, same inputs
    max_abs_diff: float | None = None
    device: str = ""  # what the daemon reports the variant runs on
    note: str = ""  # why skipped or failed, or how the variant was made

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def agreement(ref: np.ndarray, got: np.ndarray) -> tuple[float, float]:
    """Top-1 agreement (%) over rows and the largest absolute difference.

    Raises ValueError when the shapes differ (a wrong output is a failure, not a
    0% agreement that reads like a precision loss).
    """
    ref = np.asarray(ref, dtype=np.float64)
    got = np.asarray(got, dtype=np.float64)
    if ref.shape != got.shape:
        raise ValueError(f"output shape {list(got.shape)} differs from the reference "
                         f"{list(ref.shape)}")
    if ref.size == 0:
        return 100.0, 0.0
    flat_r = ref.reshape(ref.shape[0], -1)
    flat_g = got.reshape(got.shape[0], -1)
    agree = float(np.mean(flat_r.argmax(1) == flat_g.argmax(1)) * 100.0)
    return agree, float(np.max(np.abs(flat_r - flat_g)))


def _num(v: float | None, fmt: str) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def _short(note: str) -> str:
    """The first clause of a reason; the check lines above the table carry all of it."""
    return note.splitlines()[0].split("; ")[0] if note else note


HEADER = ("backend", "precision", "p50 ms", "items/s", "top-1 agree", "max |diff|", "device",
          "status")


def format_table(title: str, rows: list[Row]) -> str:
    """A fixed-width table, one line per row; the status column carries skip/fail reasons."""
    cells = [HEADER] + [
        (r.backend, r.precision, _num(r.p50_ms, ".2f"), _num(r.items_per_s, ",.0f"),
         "-" if r.top1_agree_pct is None else f"{r.top1_agree_pct:.2f}%",
         _num(r.max_abs_diff, ".1e"), r.device or "-",
         r.status if not r.note or r.status == OK else f"{r.status}: {_short(r.note)}")
        for r in rows
    ]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADER) - 1)]
    right = {2, 3, 4, 5}  # numbers
    lines = [title]
    for c in cells:
        parts = [c[i].rjust(widths[i]) if i in right else c[i].ljust(widths[i])
                 for i in range(len(widths))]
        lines.append("  ".join(parts) + "  " + c[-1])
    return "\n".join(line.rstrip() for line in lines)
