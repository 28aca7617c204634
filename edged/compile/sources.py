"""Which validation and calibration data a run uses: the options, else ``model.json``.

Why in one place: the rule (an explicit path wins, then what the model's card names,
then calibration falls back to validation; a detector validates by mAP on a labelled
set and calibrates on the same letterboxed frames) decides what every step sees.
Bad data (unreadable files, a model.json naming something absent, a bad
``[postprocess]``) is a ``DataError`` naming the file: the run stops before any build.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edged.compile.context import Context
from edged.compile.data import Dataset, Preprocess, load_dataset
from edged.compile.steps import find as find_step
from edged.config import modeljson


class DataError(ValueError):
    """Validation, calibration or preprocessing data that cannot be used (bad usage)."""


def load(ctx: Context) -> None:
    """Set ``ctx.val``, ``ctx.calib`` and, for a detector, ``ctx.detect``."""
    try:
        _load(ctx)
    except DataError:
        raise
    except ValueError as e:  # the loaders' own errors name the file and the problem
        raise DataError(str(e)) from None


def _load(ctx: Context) -> None:
    o = ctx.opts
    card_path = modeljson.beside(ctx.src)
    card = modeljson.read(card_path) if card_path else None
    val = o.val or (card.validation if card else None)
    calib = o.calib or (card.calibration if card else None) or val
    pre_json = o.preprocess
    if pre_json is None and val and (val.parent / modeljson.NAME).exists():
        pre_json = val.parent / modeljson.NAME
    pre_path = pre_json or card_path
    pre = Preprocess.from_json(pre_path) if pre_path else None
    ctx.preprocess_from = pre_path
    if o.postprocess:
        _load_detection(ctx, pre)
        return
    if val:
        ctx.val = load_dataset(val, ctx.inputs[0], pre)
        if not o.val:
            ctx.say(f"validation data: {val} (named by {card_path})")
    else:
        spec = ctx.inputs[0]
        shape = [64 if i == 0 else max(d, 1) for i, d in enumerate(spec["shape"])]
        x = np.random.default_rng(0).random(shape, dtype=np.float32)
        ctx.val = Dataset(x.astype(spec["dtype"]), None, "64 random inputs (no --val)",
                          synthetic=True)
        ctx.say("note: no --val given and no model.json \"validation\": variants are "
                "compared on random inputs (differences only)")
    if calib:
        ctx.calib = load_dataset(calib, ctx.inputs[0], pre, limit=o.calib_limit)
    elif _wants_calibration(ctx):
        ctx.say("note: no calibration data (no --calib, no --val, no model.json "
                "\"calibration\" or \"validation\"): INT8 steps are skipped")


def _wants_calibration(ctx: Context) -> bool:
    return any(find_step(s).needs_calibration for s in ctx.opts.build_steps)


def _load_detection(ctx: Context, pre: Preprocess | None) -> None:
    """A detector: mAP on a labelled set; calibration sees the same letterboxed frames."""
    # Imported here: detection validation needs OpenCV and pycocotools, classifiers do not.
    from edged.compile.detect_val import DetectionCheck, load_detection_set, load_postprocess
    from edged.errors import ConfigError

    o = ctx.opts
    assert o.postprocess is not None and o.val is not None  # CompileOptions checked both
    try:
        cfg = load_postprocess(o.postprocess)
    except ConfigError as e:
        raise DataError(str(e)) from None
    ctx.detect = DetectionCheck(cfg, load_detection_set(Path(o.val)), pre, o.max_drop)
    spec = ctx.inputs[0]
    x, _ = ctx.detect.inputs(spec["name"], spec["dtype"], spec["shape"])
    ctx.val = Dataset(x, None, ctx.detect.data.source)
    if o.calib:
        ctx.calib = load_dataset(o.calib, spec, pre, limit=o.calib_limit)
    else:
        ctx.calib = Dataset(x[:o.calib_limit], None, f"{ctx.detect.data.source}, letterboxed")
