"""Daemon configs for tests: model and variant tables written from Python values.

Why: a ``[[models]]`` table written out by hand in every test hides the one or two keys
the test is about among a dozen it is not. ``model_table`` and ``variant`` write the
boilerplate (ONNX Runtime, one thread); ``config`` puts tables into a file with metrics
off. Tests that are *about* the TOML text (config errors) keep it literal.

    cfg = config(tmp_path, models=[
        model_table("slow", [variant("loop", path)], max_batch_size=1, max_queue=4)])
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from support.paths import MODELS, ROOT
from support.slow_model import make_slow_model

#: The digits model's input as the shipped config reads it.
DIGITS_PREPROCESS: dict[str, Any] = {"color": "gray", "width": 28, "height": 28,
                                     "layout": "NCHW"}
DIGITS_VARIANTS = ("cnn-fp32", "cnn-int8", "small-fp32")


def toml_value(v: Any) -> str:
    """One TOML value: strings, booleans, numbers, paths and (nested) lists."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"TOML has no {v}")
        return repr(v)
    if isinstance(v, (str, Path)):
        return json.dumps(str(v))  # a JSON string is a TOML basic string
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML for {type(v).__name__}: {v!r}")


def _keys(fields: Mapping[str, Any]) -> str:
    return "".join(f"{k} = {toml_value(v)}\n" for k, v in fields.items() if v is not None)


def _table(header: str, fields: Mapping[str, Any] | None) -> str:
    return f"[{header}]\n{_keys(fields)}" if fields is not None else ""


def variant(name: str, path: str | Path = "unused", *, backend: str = "onnxruntime",
            options: Mapping[str, Any] | None = None, **fields: Any) -> str:
    """A ``[[models.variants]]`` table; ONNX Runtime variants get ``threads = 1`` unless
    ``options`` says otherwise (a test machine's cores are shared)."""
    if options is None and backend == "onnxruntime":
        options = {"threads": 1}
    head = {"name": name, "backend": backend, "path": path, **fields}
    return f"[[models.variants]]\n{_keys(head)}{_table('models.variants.options', options)}"


def model_table(name: str, variants: Sequence[str], *,
                preprocess: Mapping[str, Any] | None = None,
                postprocess: Mapping[str, Any] | None = None, extra: str = "",
                **fields: Any) -> str:
    """A ``[[models]]`` table: ``fields`` as its keys (``None`` leaves a key out),
    ``extra`` as literal TOML after them, then its preprocess, postprocess and variants
    (tables from :func:`variant`)."""
    head = f"[[models]]\nname = {toml_value(name)}\n{_keys(fields)}{extra}\n"
    return (head + _table("models.preprocess", preprocess)
            + _table("models.postprocess", postprocess) + "".join(variants))


def config(tmp: Path, *, models: Sequence[str], server: str = "", governor: str = "",
           metrics: str = 'listen = "off"', name: str = "edged.toml") -> Path:
    """Write a config of ``models`` tables (plus literal server/governor TOML) into ``tmp``."""
    text = f"[server]\n{server}\n[metrics]\n{metrics}\n\n" + "\n".join(models) + f"\n{governor}\n"
    p = tmp / name
    p.write_text(text)
    return p


def digits_variants(names: Sequence[str] = DIGITS_VARIANTS) -> list[str]:
    """The shipped digits variants by name, each on ONNX Runtime with one thread."""
    return [variant(n, MODELS / f"{n}.onnx") for n in names]


def digits_config(tmp: Path, *, extra_models: str = "", governor: str = "", server: str = "",
                  model_extra: str = "", variants: tuple[str, ...] = DIGITS_VARIANTS,
                  variant_tables: Sequence[str] = ()) -> Path:
    """A config serving the shipped digits model from ``tmp`` (paths are absolute):
    required, batches up to 8, a queue of 512; its ``variants`` by name, or
    ``variant_tables`` from :func:`variant` when not on ONNX Runtime's defaults;
    ``extra_models`` are more tables after it."""
    drain = "" if "drain_timeout_s" in server else "drain_timeout_s = 5.0\n"
    tables = list(variant_tables) or digits_variants(variants)
    digits = model_table("digits", tables, required=True, max_batch_size=8,
                         max_queue=512, extra=model_extra, preprocess=DIGITS_PREPROCESS)
    return config(tmp, server=drain + server, models=[digits, extra_models], governor=governor)


def slow_table(path: Path, *, name: str = "slow", max_batch_size: int = 1, max_queue: int = 4,
               extra: str = "") -> str:
    """A model ``name`` serving ``path`` (see support.slow_model), by default one request
    at a time."""
    return model_table(name, [variant("loop", path)], max_batch_size=max_batch_size,
                       max_queue=max_queue, extra=extra)


def one_variant_model(name: str, path: Path, *, required: bool = False,
                      max_batch_size: int = 8) -> str:
    """A model of one ONNX Runtime variant "v1" on ``path`` (optional unless ``required``)."""
    return model_table(name, [variant("v1", path)], required=required,
                       max_batch_size=max_batch_size)


def slow_config(tmp: Path, trip: int = 200000, max_queue: int = 4, extra: str = "") -> Path:
    """digits plus a model "slow" (input x [N,64]) busy ``trip`` loop rounds a request."""
    model = make_slow_model(tmp / "slow.onnx", trip)
    return digits_config(tmp, extra_models=slow_table(model, max_queue=max_queue, extra=extra))


def person_config(tmp: Path, decoder: str = "ssd", required: bool = True) -> Path:
    """config.toml's person model block, verbatim, with absolute paths.

    Why verbatim: the detection tests then also check the block users copy."""
    text = (ROOT / "config.toml").read_text()
    block = text[text.index('[[models]]\nname = "person"'):text.index("[governor]")]
    block = block.replace('path = "models/', f'path = "{ROOT}/models/')
    if decoder != "ssd":
        block = block.replace('decoder = "ssd"', f'decoder = "{decoder}"')
        block = re.sub(r"(?m)^label_offset.*$", "", block)
    if not required:
        block = block.replace("required = true", "required = false")
    p = tmp / "person.toml"
    p.write_text(f'[server]\ndrain_timeout_s = 2.0\n[metrics]\nlisten = "off"\n{block}')
    return p
