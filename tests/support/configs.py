"""Daemon configs for tests: model and variant tables written from Python values.

Why: a ``[[models]]`` table written out by hand in every test hides the one or two keys
the test is about among a dozen it is not. The TOML is built by the package's one
builder (``edged.testing.configs``); here are the tests' defaults on top of it:
``variant`` gives ONNX Runtime one thread, ``config`` writes into a test's ``tmp`` with
metrics off. Tests that are *about* the TOML text (config errors) keep it literal.

    cfg = config(tmp_path, models=[
        model_table("slow", [variant("loop", path)], max_batch_size=1, max_queue=4)])
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from edged.testing import configs as harness_config
from edged.testing.configs import model_table, toml_value
from support.paths import MODELS, ROOT
from support.slow_model import make_slow_model

__all__ = ["DIGITS_PREPROCESS", "DIGITS_VARIANTS", "config", "digits_config",
           "digits_variants", "model_table", "one_variant_model", "person_config",
           "slow_config", "slow_table", "toml_value", "variant"]

#: The digits model's input as the shipped config reads it.
DIGITS_PREPROCESS: dict[str, Any] = {"color": "gray", "width": 28, "height": 28,
                                     "layout": "NCHW"}
DIGITS_VARIANTS = ("cnn-fp32", "cnn-int8", "small-fp32")


def variant(name: str, path: str | Path = "unused", *, backend: str = "onnxruntime",
            options: Mapping[str, Any] | None = None, **fields: Any) -> str:
    """A ``[[models.variants]]`` table; ONNX Runtime variants get ``threads = 1`` unless
    ``options`` says otherwise (a test machine's cores are shared)."""
    if options is None and backend == "onnxruntime":
        options = {"threads": 1}
    return harness_config.variant(name, path, backend=backend, options=options, **fields)


def config(tmp: Path, *, models: Sequence[str], server: str = "", governor: str = "",
           metrics: str = 'listen = "off"', name: str = "edged.toml") -> Path:
    """Write a config of ``models`` tables (plus literal server/governor TOML) into ``tmp``."""
    return harness_config.write_config(tmp / name, models=models, server=server,
                                       governor=governor, metrics=metrics)


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
    block = harness_config.shipped_person_block(ROOT)
    if decoder != "ssd":
        block = block.replace('decoder = "ssd"', f'decoder = "{decoder}"')
        block = re.sub(r"(?m)^label_offset.*$", "", block)
    if not required:
        block = block.replace("required = true", "required = false")
    p = tmp / "person.toml"
    p.write_text(f'[server]\ndrain_timeout_s = 2.0\n[metrics]\nlisten = "off"\n{block}')
    return p
