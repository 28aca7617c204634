"""The measures: a candidate's results against the reference's, at the level of the task.

* classifier-shaped outputs (float ``[N, C]``, C > 1): top-1 agreement and the
  reference's top-1 among the candidate's top 5;
* detections: boxes matched one to one (same class, IoU >= ``iou``), never rows by
  index: precision (candidate boxes that match a reference box) and recall (reference
  boxes matched). A box near the score threshold may fall on either side of it in
  another precision, so a box above the threshold is matched against the other side's
  boxes down to half the threshold: one box more or less at the edge is not a change
  of result, a missing or moved box is;
* anything else: max |candidate - reference| as a fraction of the reference's range.

Every refusal names the measure, the value, the limit and the check input that did
worst, so an operator can act on it.
"""

from __future__ import annotations

import numpy as np

from edged.config.verify import Tolerances
from edged.errors import ArtifactError

#: detections are decoded down to this fraction of the served threshold for matching
RELAXED = 0.5


class VerifyRefused(ArtifactError):
    """The candidate does not compute what the reference computes on this device."""


def classifier_shaped(a: np.ndarray) -> bool:
    return a.dtype.kind == "f" and a.ndim == 2 and a.shape[1] > 1


def compare_outputs(where: str, cand: dict[str, np.ndarray], ref: dict[str, np.ndarray],
                    tol: Tolerances, precision: str) -> dict[str, float]:
    """Tensor outputs (not a detector's): refuse or return the measures, for the log."""
    report: dict[str, float] = {}
    for name, r in ref.items():
        c = cand.get(name)
        if c is None or c.shape != r.shape:
            raise VerifyRefused(f"{where}: output {name!r} is "
                                f"{None if c is None else list(c.shape)}; the reference "
                                f"gives {list(r.shape)}")
        if classifier_shaped(r):
            report.update(_classes(where, name, c, r, tol, precision))
        elif r.dtype.kind != "f":
            same = float((c == r).mean()) if r.size else 1.0
            report[f"{name}.equal"] = same
            if same < tol.min_top1:
                raise VerifyRefused(f"{where}: output {name!r} equals the reference in "
                                    f"{same:.1%} of its values (needs {tol.min_top1:.0%} for "
                                    f"{precision})")
        else:
            report.update(_rel_err(where, name, c, r, tol, precision))
    return report


def _classes(where: str, name: str, c: np.ndarray, r: np.ndarray, tol: Tolerances,
             precision: str) -> dict[str, float]:
    n = r.shape[0]
    ref_top = r.argmax(1)
    agree = c.argmax(1) == ref_top
    k = min(5, r.shape[1])
    top5 = np.argsort(-c, axis=1)[:, :k]
    within = (top5 == ref_top[:, None]).any(1)
    top1, top5_share = float(agree.mean()), float(within.mean())
    if top1 < tol.min_top1:
        i = int(np.flatnonzero(~agree)[0])
        raise VerifyRefused(
            f"{where}: output {name!r} top-1 agrees with the reference on "
            f"{int(agree.sum())}/{n} check inputs ({top1:.1%}; needs {tol.min_top1:.0%} for "
            f"{precision}); first disagreement: check input {i}, reference class "
            f"{int(ref_top[i])}, candidate class {int(c[i].argmax())}")
    if top5_share < tol.min_top5:
        i = int(np.flatnonzero(~within)[0])
        raise VerifyRefused(
            f"{where}: output {name!r} has the reference's top-1 in its top {k} on "
            f"{int(within.sum())}/{n} check inputs ({top5_share:.1%}; needs "
            f"{tol.min_top5:.0%}); first miss: check input {i}")
    return {f"{name}.top1": top1, f"{name}.top5": top5_share}


def rel_err_by_input(c: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Per check input (first axis): max |c - r| over the reference's whole range."""
    span = float(np.abs(r).max()) or 1.0
    diff = np.abs(c.astype(np.float64) - r.astype(np.float64))
    return diff.reshape(diff.shape[0], -1).max(1) / span if diff.size else np.zeros(1)


def _rel_err(where: str, name: str, c: np.ndarray, r: np.ndarray, tol: Tolerances,
             precision: str) -> dict[str, float]:
    per = rel_err_by_input(c, r)
    worst = int(per.argmax())
    err = float(per[worst])
    if err > tol.max_rel_err:
        raise VerifyRefused(f"{where}: output {name!r} strays {err:.3g} of the reference's "
                            f"range on check input {worst} (allowed {tol.max_rel_err:g} for "
                            f"{precision})")
    return {f"{name}.rel_err": err}


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every xyxy box in ``a`` [K,4] with every box in ``b`` [M,4]."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:4], b[None, :, 2:4])
    inter = np.clip(rb - lt, 0, None).prod(2)
    area_a = np.clip(a[:, 2:4] - a[:, :2], 0, None).prod(1)
    area_b = np.clip(b[:, 2:4] - b[:, :2], 0, None).prod(1)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def matched(a: np.ndarray, b: np.ndarray, iou: float) -> int:
    """How many rows of ``a`` ([K,6]: xyxy, score, class) find their own row of ``b``
    of the same class at IoU >= ``iou``; greedy, best-scoring rows of ``a`` first."""
    if len(a) == 0 or len(b) == 0:
        return 0
    ious = iou_matrix(a[:, :4], b[:, :4])
    ious[a[:, 5][:, None] != b[:, 5][None, :]] = 0.0
    taken = np.zeros(len(b), bool)
    n = 0
    for i in np.argsort(-a[:, 4], kind="stable"):
        row = np.where(taken, 0.0, ious[i])
        j = int(row.argmax())
        if row[j] >= iou:
            taken[j] = True
            n += 1
    return n


def compare_detections(where: str, cand: list[np.ndarray], ref: list[np.ndarray],
                       conf: float, tol: Tolerances) -> dict[str, float]:
    """Per-image detections (boxes normalised to the input, decoded down to
    ``RELAXED * conf``) of candidate and reference; refuse or return the measures."""
    hits_p = hits_r = n_cand = n_ref = 0
    worst, worst_missed = 0, -1
    for i, (c, r) in enumerate(zip(cand, ref, strict=True)):
        c_strict, r_strict = c[c[:, 4] >= conf], r[r[:, 4] >= conf]
        p, q = matched(c_strict, r, tol.iou), matched(r_strict, c, tol.iou)
        hits_p, hits_r = hits_p + p, hits_r + q
        n_cand, n_ref = n_cand + len(c_strict), n_ref + len(r_strict)
        missed = (len(c_strict) - p) + (len(r_strict) - q)
        if missed > worst_missed:
            worst, worst_missed = i, missed
    precision = hits_p / n_cand if n_cand else 1.0
    recall = hits_r / n_ref if n_ref else 1.0
    for measure, value, limit, hits, total, whose in (
            ("precision", precision, tol.min_precision, hits_p, n_cand, "candidate"),
            ("recall", recall, tol.min_recall, hits_r, n_ref, "reference")):
        if value < limit:
            raise VerifyRefused(
                f"{where}: detection {measure} {value:.2f} against the reference (needs "
                f"{limit:.2f}): {hits} of {total} {whose} boxes at score >= {conf:g} matched "
                f"(same class, IoU >= {tol.iou:g}) over {len(ref)} check inputs; worst: "
                f"check input {worst} ({worst_missed} unmatched)")
    return {"det.precision": precision, "det.recall": recall, "det.boxes": float(n_ref)}
