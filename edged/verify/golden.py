"""Golden files: the check inputs ``edged compile`` records beside an artifact.

Why a file: a swap puts a variant live without a human looking, so before it does, the
variant runs these inputs and is compared with the model's reference variant on this
device (``edged.verify``). The file also keeps the outputs the build machine computed
on them: diagnostics only (how far this device's runtime is from the build machine's),
never the yardstick, because INT8 kernels round differently on other CPUs. Bounded
size, no pickle.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edged.errors import ArtifactError

MAX_SAMPLES = 8
MAX_BYTES = 4 << 20  # golden inputs + outputs per artifact

PRECISIONS = ("fp32", "fp16", "bf16", "int8")


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
    from edged.backends.support.sidecar import read_sidecar

    side: dict[str, Any] | None = None
    try:
        side = read_sidecar(artifact)
    except Exception:
        side = None
    if side and side.get("precision") in PRECISIONS:
        return str(side["precision"])
    low = name.lower()
    return next((p for p in ("int8", "fp16", "bf16") if p in low), "fp32")
