"""Write ``DIR/variants.toml``: the governor's ladder, heaviest first, from the sidecars.

Why from the sidecars and not from this run's results: steps may be run one at a
time (``--steps int8`` today, ``--steps tvm`` tomorrow); the ladder must always
cover every accepted artifact in the directory, with the figures measured for it.

The file itself (its comments, paths, the source model brought in) is written by
``ladder_file``. The rule (docs/compile.md, "Ladder"): a governor step must save something, so each
rung must be measurably cheaper than the rung above it: at least ``MIN_SPEEDUP``
times faster at batch 1 or at the max batch, comparing each variant's best of its
repeated measurement rounds (:mod:`edged.compile.bench`; other jobs on the machine
only ever slow a round down, so the best round is the closest to the variant's own
cost), then confirmed by timing the two interleaved (``confirm``) where both run here.

Which variant takes a rung: the most precise, most accurate ones compete, and variants
of *equal quality* (the same precision, accuracies within ``EQUAL_ACCURACY_PTS``) are
one contest, not a step: a step between them would trade nothing. The contest is decided
by how fast each *serves*, at the batch sizes the model is served at: batch 1 and the max
batch weigh alike (the geometric mean of the two speed-ups), because a batching model
spends its busy time at the max batch and its quiet time at batch 1. The preferred
variant (the original model first, then ONNX Runtime, OpenVINO, TVM, TensorRT) keeps the
rung unless another serves at least ``MIN_WIN`` times cheaper, timed interleaved with
it; so the same run on an idle machine gives the same ladder, and a variant slower than
ONNX Runtime's fp32 is never the top rung. Everything else is written commented out,
"not on the ladder", with the reason and the ratios.

A contest can also be split: one equal ``MIN_SPEEDUP`` times faster at batch 1, another
``MIN_SPEEDUP`` times faster at the max batch (ONNX Runtime's INT8 and OpenVINO's, say).
Then neither serves a busy and a quiet model best, and both are kept as one rung, a
*pair*: the batch-1-fast one is the rung's variant and the other its ``batch_variant``,
which the daemon computes every batch of more than one row on (docs/compile.md, "Pairs").
A pair is one rung to the governor; a rung below it must be cheaper than the pair serves
(its variant at batch 1, its ``batch_variant`` at the max batch).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edged.backends.support.sidecar import FORMAT

SOURCE_RECORD = "source.json"


def collect(out_dir: Path) -> list[dict[str, Any]]:
    """Source record plus every edged sidecar directly in ``out_dir`` (not rejected/)."""
    entries: list[dict[str, Any]] = []
    src = out_dir / SOURCE_RECORD
    if src.exists():
        doc = json.loads(src.read_text())
        doc["_artifact"] = Path(doc["source"]["path"])
        doc["_source"] = True
        entries.append(doc)
    for p in sorted(out_dir.glob("*.json")):
        if p.name == SOURCE_RECORD:
            continue
        try:
            doc = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            continue
        doc["_artifact"] = p.with_name(p.name[: -len(".json")])
        entries.append(doc)
    return entries


def _accuracy(e: dict[str, Any]) -> float:
    v = e.get("validation") or {}
    if v.get("accuracy_pct") is not None:
        return float(v["accuracy_pct"])
    return float(v.get("agreement_pct", 0.0))


def latency(e: dict[str, Any]) -> float | None:
    s = e.get("speed") or {}
    return s.get("latency_ms_p50")


_PRECISION_RANK = {"fp32": 3, "bf16": 2, "fp16": 2, "mixed": 2}


def _rank(e: dict[str, Any]) -> int:
    """Higher = more precise; int8 and other reduced precisions rank lowest."""
    return _PRECISION_RANK.get(str(e.get("precision", "")), 1)


MIN_SPEEDUP = 1.15

#: ``confirm(upper, lower)`` re-times both interleaved and returns (b=1, max-batch)
#: speed-ups, or None when they cannot run here; see :func:`edged.compile.bench.compare`.
Confirm = Callable[[dict[str, Any], dict[str, Any]], "tuple[float, float | None] | None"]


def _rounds(e: dict[str, Any], key: str) -> list[float]:
    """Per-round figures, or the single figure for sidecars written before rounds."""
    s = e.get("speed") or {}
    values = [float(r[key]) for r in s.get("rounds") or [] if r.get(key)]
    return values or ([float(s[key])] if s.get(key) else [])


def speedup(upper: dict[str, Any], lower: dict[str, Any]) -> tuple[float, float | None]:
    """How much cheaper ``lower`` is than ``upper``, best round against best round.

    Batch 1: the upper's fastest round's p50 over the lower's. Max batch: the
    lower's best throughput over the upper's (a pair's: its ``batch_variant``'s); None
    when they were measured at different max batches.
    """
    b1 = _best_latency(upper) / _best_latency(lower)
    upper, lower = _batches(upper), _batches(lower)
    su, sl = upper.get("speed") or {}, lower.get("speed") or {}
    if su.get("max_batch") != sl.get("max_batch"):
        return b1, None
    return b1, max(_rounds(lower, "throughput_per_s")) / max(_rounds(upper, "throughput_per_s"))


def _batches(e: dict[str, Any]) -> dict[str, Any]:
    """The member of ``e``'s rung that computes batches: its pair's, else itself."""
    return e.get("_pair") or e


def _best_latency(e: dict[str, Any]) -> float:
    return min(_rounds(e, "latency_ms_p50"))


def passes(b1: float, big: float | None) -> bool:
    """Cheaper enough to be a rung: ``MIN_SPEEDUP`` at batch 1 or at the max batch."""
    return b1 >= MIN_SPEEDUP or (big is not None and big >= MIN_SPEEDUP)


#: accuracies closer than this (percentage points) are equal: a sample or two of a
#: validation set, not a difference worth a rung (nor a reason to take a slower variant)
EQUAL_ACCURACY_PTS = 0.5
#: among variants of equal quality, one displaces the preferred only when it serves at
#: least this much cheaper, timed interleaved: the choice is then the same on a rerun
MIN_WIN = 1.05
#: the preferred of equally good, equally fast variants: the core runtime first
BACKEND_ORDER = ("onnxruntime", "openvino", "tvm", "tensorrt")


def _quality(e: dict[str, Any]) -> tuple[int, float, int, int, str]:
    """Sort key, best first: precision, accuracy, then the preferred (the original
    model, then by runtime), then the name: never the speed, which is the contest's."""
    backend = str(e.get("backend", ""))
    order = BACKEND_ORDER.index(backend) if backend in BACKEND_ORDER else len(BACKEND_ORDER)
    return (-_rank(e), -_accuracy(e), 0 if e.get("_source") else 1, order, name_of(e))


def _equal_quality(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return _rank(a) == _rank(b) and abs(_accuracy(a) - _accuracy(b)) < EQUAL_ACCURACY_PTS


def served(b1: float, big: float | None) -> float:
    """One speed-up from the two a model is served at: their geometric mean (batch 1
    alone when there is no max-batch figure)."""
    return b1 if big is None else math.sqrt(b1 * big)


def plan(timed: list[dict[str, Any]], confirm: Confirm | None = None, pairs: bool = True,
         ) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Pick the rungs (heaviest first) and give every other variant its reason.

    ``pairs``: equals that split the contest make one rung of two (the rung's entry is the
    batch-1-fast one, its ``_pair`` the other); False: the contest's winner alone, for a
    ladder that cannot name a pair (rungs built on the device, ``edged.delivery.rungs``).

    With ``confirm``, a figure that would change the ladder (a variant that makes a
    rung, or one that takes a rung from the preferred of its equals) is re-timed
    interleaved and decides only if the interleaved figure agrees.
    Returns the rungs and ``{name: reason}`` for the variants left off.
    """
    remaining = sorted(timed, key=_quality)
    rungs: list[dict[str, Any]] = []
    off: dict[str, str] = {}
    while remaining:
        step = remaining
        if rungs:
            step = []
            for e in remaining:
                reason = _why_not_below(rungs[-1], e, confirm)
                if reason:
                    off[name_of(e)] = reason
                else:
                    step.append(e)
            if not step:
                break
        equals = [e for e in step if _equal_quality(step[0], e)]
        winner = _contest(equals, confirm)
        partner = _partner(winner, equals, confirm) if pairs else None
        for e in equals:
            lost = e.pop("_lost", None)
            if e is not winner and e is not partner:
                off[name_of(e)] = lost or ""
        rungs.append(winner if partner is None else _pair(winner, partner))
        remaining = [e for e in step if e not in equals]
    return rungs, off


#: a pair's members must each be this much faster than the other at their batch size
PAIR_MARGIN = MIN_SPEEDUP


def _splits(b1: float, big: float | None) -> bool:
    """Speed-ups of one equal over another that split the contest: one is ``PAIR_MARGIN``
    faster at batch 1, the other ``PAIR_MARGIN`` faster at the max batch."""
    return big is not None and ((b1 >= PAIR_MARGIN and big * PAIR_MARGIN <= 1.0)
                                or (b1 * PAIR_MARGIN <= 1.0 and big >= PAIR_MARGIN))


def _partner(winner: dict[str, Any], equals: list[dict[str, Any]],
             confirm: Confirm | None) -> dict[str, Any] | None:
    """The first of ``equals`` (preferred first) that splits the contest with its
    ``winner``, confirmed interleaved where both run here; None: the winner serves alone."""
    for e in equals:
        if e is winner:
            continue
        b1, big = speedup(winner, e)
        if not _splits(b1, big):
            continue
        how = "best round against best round"
        again = _confirm_split(winner, e, b1, big, confirm)
        if again is not None:
            b1, big = again
            how = "timed interleaved both ways, each side's least favourable of 3 rounds"
        if _splits(b1, big):
            e["_split"] = (b1, big, how)
            return e
    return None


def _confirm_split(winner: dict[str, Any], e: dict[str, Any], b1: float, big: float | None,
                   confirm: Confirm | None) -> tuple[float, float | None] | None:
    """``e``'s speed-ups over ``winner`` re-timed interleaved, each advantage as the side
    that has it would least like it: ``confirm`` gives the round least favourable to its
    second argument, so it is asked both ways (None: it cannot run here)."""
    if confirm is None or big is None:
        return None
    fwd, back = confirm(winner, e), confirm(e, winner)
    if fwd is None or back is None or fwd[1] is None or back[1] is None:
        return None
    return (fwd[0] if b1 > 1.0 else 1.0 / back[0]), (fwd[1] if big > 1.0 else 1.0 / back[1])


def _pair(winner: dict[str, Any], partner: dict[str, Any]) -> dict[str, Any]:
    """One rung of two: the batch-1-fast member, its ``_pair`` the batch-fast one."""
    b1, big, how = partner.pop("_split")
    main, batch = (partner, winner) if b1 > 1.0 else (winner, partner)
    b1_x, big_x = max(b1, 1.0 / b1), max(big, 1.0 / big)
    n = (main.get("speed") or {}).get("max_batch")
    main["_pair"] = batch
    main["_pair_why"] = (
        f"{name_of(main)} and {name_of(batch)} are as precise and as accurate, and neither is "
        f"faster at every batch size: {name_of(main)} computes lone rows (b=1 {b1_x:.2f}x "
        f"faster), {name_of(batch)} batches of more (b={n} {big_x:.2f}x faster) ({how}; "
        f"each >= {PAIR_MARGIN}x)")
    return main


def _contest(equals: list[dict[str, Any]], confirm: Confirm | None) -> dict[str, Any]:
    """The one of ``equals`` (preferred first) that serves cheapest: the preferred,
    unless another serves ``MIN_WIN`` times cheaper than it. Each loser gets ``_lost``."""
    preferred = winner = equals[0]
    best = 1.0
    for e in equals[1:]:
        b1, big = speedup(preferred, e)
        how = "best round against best round"
        if served(b1, big) >= MIN_WIN and confirm is not None:
            again = confirm(preferred, e)
            if again is not None:
                b1, big = again
                how = "timed interleaved, least favourable of 3 rounds"
        gain = served(b1, big)
        e["_served"] = (b1, big, how)
        if gain >= MIN_WIN and gain > best:
            winner, best = e, gain
    for e in equals:
        if e is winner:
            continue
        b1, big, how = e.get("_served") or (1.0, None, "")
        if e is preferred:  # the winner took the rung from it: say by how much
            b1, big, how = winner["_served"]
            ratios = _ratios(winner, b1, big)
            e["_lost"] = (f"as precise and as accurate as {name_of(winner)}, which serves "
                          f"{served(b1, big):.2f}x cheaper at the model's batch sizes "
                          f"({ratios}, {how})")
        else:
            e["_lost"] = (f"as precise and as accurate as {name_of(winner)}, which serves "
                          f"as fast or faster at the model's batch sizes (this one: "
                          f"{_ratios(e, b1, big)} against {name_of(preferred)}, {how}; it "
                          f"would need {MIN_WIN}x)")
    return winner


def _ratios(e: dict[str, Any], b1: float, big: float | None) -> str:
    return f"b=1 {b1:.2f}x" + (f", b={(e.get('speed') or {}).get('max_batch')} {big:.2f}x"
                               if big is not None else "")


def _why_not_below(last: dict[str, Any], e: dict[str, Any],
                   confirm: Confirm | None = None) -> str | None:
    """Why ``e`` cannot be a rung below ``last``, or None when it can."""
    if _equal_quality(last, e):
        # Equal quality: a step between them trades nothing.
        return (f"as precise and as accurate as {name_of(last)} (a rung must give up "
                "precision or accuracy for its saving)")
    b1, big = speedup(last, e)
    how = "best round against best round"
    if passes(b1, big) and confirm is not None:
        again = _confirmed(last, e, confirm)
        if again is not None:
            b1, big = again
            how = "timed interleaved with it, least favourable of 3 rounds"
    if passes(b1, big):
        e["_speedup"] = {"over": name_of(last), "b1": b1, "max_batch": big, "how": how}
        return None
    return (f"not measurably cheaper than {name_of(last)} ({_ratios(e, b1, big)}, {how}; a "
            f"rung must be >= {MIN_SPEEDUP}x faster at batch 1 or at the max batch)")


def _confirmed(last: dict[str, Any], e: dict[str, Any], confirm: Confirm,
               ) -> tuple[float, float | None] | None:
    """``confirm(last, e)``; for a pair above, its max-batch figure against the pair's
    ``batch_variant`` (the member that serves batches)."""
    again = confirm(last, e)
    if again is None or "_pair" not in last:
        return again
    big = confirm(last["_pair"], e)
    return None if big is None else (again[0], big[1])


def name_of(e: dict[str, Any]) -> str:
    """A ladder entry's variant name (its file's stem when it has none)."""
    return str(e.get("name") or e["_artifact"].stem)
