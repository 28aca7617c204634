"""What "close enough to the reference" means, per precision, per model, per variant.

Defaults by precision (an INT8 rung may lose a little, an fp32 rung nothing); a model's
``[models.verify]`` table sets them for all its variants, a variant's own ``verify``
table for itself, and ``verify = false`` on a variant turns the check off (it then goes
live unverified, with a warning at load).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from edged.config.schema import Table


@dataclass(frozen=True)
class Tolerances:
    #: classifier-shaped outputs: share of check inputs with the reference's top-1
    min_top1: float
    #: ... and with the reference's top-1 among the candidate's top 5
    min_top5: float
    #: detectors: share of the candidate's boxes that match a reference box (and back)
    min_precision: float
    min_recall: float
    #: a box matches a reference box of the same class at this IoU or more
    iou: float
    #: other outputs: max |candidate - reference| as a fraction of the reference's range
    max_rel_err: float


_DETECT = {"min_precision": 0.9, "min_recall": 0.9, "iou": 0.5}
BY_PRECISION: dict[str, Tolerances] = {
    "fp32": Tolerances(min_top1=0.99, min_top5=0.99, max_rel_err=1e-3, **_DETECT),
    "fp16": Tolerances(min_top1=0.99, min_top5=0.99, max_rel_err=0.02, **_DETECT),
    # bfloat16 keeps fp32's range with 8 bits of mantissa (fp16 has 10): results move by
    # a few times fp16's, so its raw-output bound is wider; the task measures are fp16's
    "bf16": Tolerances(min_top1=0.99, min_top5=0.99, max_rel_err=0.05, **_DETECT),
    "int8": Tolerances(min_top1=0.97, min_top5=0.99, max_rel_err=0.1, **_DETECT),
}
KEYS = tuple(f.name for f in fields(Tolerances))
#: served inputs remembered per model for variants that have no other check inputs
DEFAULT_RECENT = 16


def _share(v: float) -> str | None:
    return None if 0.0 <= v <= 1.0 else "must be from 0 to 1"


def read_overrides(t: Table) -> dict[str, float]:
    """The tolerance keys set in ``t`` (each 0..1, except max_rel_err > 0)."""
    out: dict[str, float] = {}
    for k in KEYS:
        if k in t.data:
            check = (lambda v: None if v > 0 else "must be > 0") if k == "max_rel_err" else _share
            v = t.get(k, float, None, check=check)
            if v is not None:
                out[k] = v
    return out


@dataclass(frozen=True)
class ModelVerify:
    """``[models.verify]``: tolerances for every variant of the model, and the ring size."""

    overrides: tuple[tuple[str, float], ...] = ()
    recent_inputs: int = DEFAULT_RECENT

    @classmethod
    def from_table(cls, t: Table) -> ModelVerify:
        overrides = read_overrides(t)
        recent = t.get("recent_inputs", int, DEFAULT_RECENT,
                       check=lambda n: None if 0 <= n <= 256 else "must be from 0 to 256")
        t.done()
        return cls(tuple(overrides.items()), recent)


@dataclass(frozen=True)
class VariantVerify:
    """A variant's ``verify``: ``false`` (unchecked) or a table of its own tolerances."""

    enabled: bool = True
    overrides: tuple[tuple[str, float], ...] = ()

    @classmethod
    def from_value(cls, t: Table) -> VariantVerify:
        """Read key ``verify`` of a variant table ``t``: a bool or a sub-table."""
        raw: Any = t.get("verify", (bool, dict), True)
        if not isinstance(raw, dict):
            return cls(enabled=bool(raw))
        sub = t.table("verify")
        overrides = read_overrides(sub)
        sub.done()
        return cls(True, tuple(overrides.items()))


def tolerances(precision: str, model: ModelVerify, variant: VariantVerify) -> Tolerances:
    """The precision's defaults, then the model's overrides, then the variant's."""
    base = BY_PRECISION.get(precision, BY_PRECISION["fp32"])
    return replace(base, **{**dict(model.overrides), **dict(variant.overrides)})
