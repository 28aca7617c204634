"""``OUT/edged.toml``: the compiled ladder as a config ``edged serve`` takes as it is.

Why: a ladder alone (``variants.toml``) is not a servable model. An image model also
needs its ``[models.preprocess]`` (what a camera's frame becomes), a detector its
``[models.postprocess]``, and a ladder only steps down when a ``[governor]`` is on. This
writes all of it, with paths relative to the output folder (so the folder can be
copied to a device whole), the preprocessing taken from ``model.json`` or, where there is
none, assumed from the input's shape and said aloud (in the report and in the file).
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edged.compile.context import Context

CONFIG_NAME = "edged.toml"

GOVERNOR_HINT = """\
# The governor steps down the ladder above when the device gets hot (docs/governor.md):
# levels = "auto" takes one rung down at the board's first passive trip point - 15 C and
# two at trip - 5 C (70 / 80 C without one). Write [[governor.levels]] to tune it.
[governor]
enabled = true
levels = "auto"
"""


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return json.dumps(str(v))


def _table(name: str, keys: dict[str, Any], comment: str = "") -> list[str]:
    return [f"[{name}]", *([comment] if comment else []),
            *(f"{k} = {_value(v)}" for k, v in keys.items()), ""]


def preprocess(ctx: Context, say: Callable[[str], None]) -> list[str]:
    """``[models.preprocess]`` from the model.json the run read, else assumed from the
    input's shape (said), else nothing (a model that takes raw tensors only)."""
    spec = ctx.inputs[0]
    shape, dtype = list(spec["shape"]), str(spec["dtype"])
    if len(shape) != 4:
        say(f"{CONFIG_NAME}: no [models.preprocess]: input {spec['name']} {shape} is not an "
            "image batch; clients send tensors")
        return []
    nhwc = shape[3] in (1, 3, 4) and shape[1] not in (1, 3, 4)
    c, h, w = (shape[3], shape[1], shape[2]) if nhwc else (shape[1], shape[2], shape[3])
    keys: dict[str, Any] = {}
    if ctx.preprocess_from is not None:
        from edged.compile.data import Preprocess

        p = Preprocess.from_json(ctx.preprocess_from)
        if p.size is not None:
            h, w = p.size
        color = p.color if p.color != "auto" else ("gray" if c == 1 else "rgb")
        keys = {"color": color, "width": w, "height": h, "scale": p.scale}
        if any(m != 0 for m in p.mean):
            keys["mean"] = p.mean
        if any(s != 1 for s in p.std):
            keys["std"] = p.std
        keys.update(layout=p.layout, dtype=dtype)
        return _table("models.preprocess", keys, f"# from {ctx.preprocess_from}")
    if min(h, w) < 1:
        say(f"{CONFIG_NAME}: no [models.preprocess]: input {spec['name']} has no fixed size "
            f"({shape}) and no model.json names one; clients send tensors")
        return []
    keys = {"color": "gray" if c == 1 else "rgb", "width": w, "height": h,
            "scale": 1.0 if dtype == "uint8" else 1 / 255, "layout": "NHWC" if nhwc else "NCHW",
            "dtype": dtype}
    said = ", ".join(f"{k} {v}" for k, v in keys.items())
    say(f"{CONFIG_NAME}: preprocessing ASSUMED from the input's shape ({said}): no model.json "
        "beside the model and no --preprocess; check it against how the model was trained")
    return _table("models.preprocess", keys,
                  "# ASSUMED from the input's shape (no model.json): check it against how the "
                  "model was trained")


def postprocess(ctx: Context) -> list[str]:
    """A detector's ``[models.postprocess]``: the ``--postprocess`` file's table."""
    if ctx.opts.postprocess is None:
        return []
    doc = tomllib.loads(Path(ctx.opts.postprocess).read_text())
    table = doc.get("postprocess", doc.get("models", {}).get("postprocess", doc))
    return _table("models.postprocess", dict(table), f"# from {ctx.opts.postprocess}")


def served_name(ctx: Context) -> str:
    """The served model's name: the output folder's (``--out build/digits`` serves
    ``digits``, as a reader names it, copies it to ``models/digits`` and publishes it with
    ``--model digits``); its variants keep the file's stem (``cnn-fp32``, ``cnn-int8``).
    A folder name no client could send falls back to the stem."""
    folder = ctx.out.resolve().name
    return folder if folder and folder.strip() == folder and "/" not in folder else ctx.name


def write(ctx: Context, ladder_in_dir: str, say: Callable[[str], None]) -> Path:
    """``OUT/edged.toml``: one ``[[models]]`` block with the ladder, and a ``[governor]``."""
    body = ladder_in_dir.split("\n\n", 1)[1] if "\n\n" in ladder_in_dir else ladder_in_dir
    name = served_name(ctx)
    lines = [
        f"# Generated by edged compile from {ctx.src}: a config edged serves as it is,",
        f"#   edged serve --config {ctx.out / CONFIG_NAME}",
        "# Paths are relative to this file's folder: copy the folder to the device whole.",
        "# [server] is left at its defaults (ipc://edged.sock in the runtime directory and",
        "# tcp://127.0.0.1:5555); add one, or pass --endpoint, to run beside another daemon.",
        "",
        "[[models]]",
        f"name = {json.dumps(name)}",
        "required = true",
        f"max_batch_size = {ctx.opts.max_batch}",
        "",
        *preprocess(ctx, say),
        *postprocess(ctx),
        "# The ladder, heaviest first (variants.toml beside this file says how it was chosen).",
        body.rstrip(),
        "",
        GOVERNOR_HINT,
    ]
    out = ctx.out / CONFIG_NAME
    out.write_text("\n".join(lines))
    return out
