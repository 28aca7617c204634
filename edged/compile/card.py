"""``OUT/model.json``: what ``edged publish OUT`` needs, written by the run that made OUT.

Why: ``edged publish`` packs a folder with its contract (``model.json``: inputs, outputs,
labels, preprocessing), a labelled validation set and the accuracy claimed on it. A
compile already knows all three (the source's ``model.json``, the data it validated on,
what each variant measured), so the chain ``edged compile M.onnx --out DIR`` then
``edged publish DIR ...`` needs no extra flag. The accuracy written is what this run
measured, per variant, on that data; the validation file is copied beside it so the
folder moves whole.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from edged.compile import ladder
from edged.compile.context import Context
from edged.config import modeljson

#: keys of a source ``model.json`` that name files beside it and do not travel
_LOCAL_KEYS = ("calibration",)


def write(ctx: Context) -> Path | None:
    """Write ``OUT/model.json``; None (and a line of the report) when OUT already holds
    one that is not this run's to replace (a source model's own folder)."""
    out = ctx.out / modeljson.NAME
    source = modeljson.beside(ctx.src)
    if out.exists() and not _ours(out):  # the source's own folder, or the user's file
        ctx.say(f"{out}: kept as it is (not written by edged compile)")
        return None
    card = _base(ctx, source)
    measured = _measured(ctx)
    if measured:
        card["map50" if ctx.detect is not None else "accuracy"] = measured
    val = _validation_file(ctx, source)
    if val is not None:
        if val.resolve() != (ctx.out / val.name).resolve():
            shutil.copy2(val, ctx.out / val.name)
        card["validation"] = val.name
    else:
        card.pop("validation", None)
        ctx.say(f"{out}: no labelled .npz validation set (--val) to name: `edged publish` "
                "will ask for --validation")
    card["generated_by"] = "edged compile"
    out.write_text(json.dumps(card, indent=2) + "\n")
    return out


def _ours(path: Path) -> bool:
    try:
        return json.loads(path.read_text()).get("generated_by") == "edged compile"
    except (OSError, ValueError, AttributeError):
        return False


def _base(ctx: Context, source: Path | None) -> dict[str, Any]:
    """The source's ``model.json`` (labels, preprocessing, postprocessing), else the
    model's own input and output names."""
    card: dict[str, Any] = {}
    if source is not None:
        loaded = json.loads(source.read_text())
        card = loaded if isinstance(loaded, dict) else {}
    for key in _LOCAL_KEYS:
        card.pop(key, None)
    card.setdefault("input", ctx.inputs[0]["name"])
    card.setdefault("output", ctx.outputs[0]["name"])
    return card


def _measured(ctx: Context) -> dict[str, float]:
    """Each variant's accuracy (a classifier) or mAP@0.5 (a detector) as this run
    measured it, 0..1, by variant name."""
    found = {}
    for e in ladder.collect(ctx.out):
        v = e.get("validation") or {}
        pct = v.get("map50_pct") if ctx.detect is not None else v.get("accuracy_pct")
        if pct is not None:
            found[str(e.get("name") or e["_artifact"].stem)] = round(float(pct) / 100, 6)
    return found


def _validation_file(ctx: Context, source: Path | None) -> Path | None:
    """The labelled ``.npz`` the run validated on (``--val``, else the source
    ``model.json``'s), None when it had none."""
    val = ctx.opts.val
    if val is None and source is not None:
        val = modeljson.read(source).validation
    if val is None or not Path(val).is_file() or Path(val).suffix != ".npz":
        return None
    return Path(val)
