"""Daemon configs written from Python values: the one TOML builder of the harness.

Why: the tests, the benchmark scripts, ``edged bench footprint`` and the live fuzzer all
start daemons on generated configs. Written out by hand in each of them, a ``[[models]]``
table hides the one or two keys a caller is about among a dozen it is not, and every copy
quotes paths and booleans its own way. Here a value becomes TOML in one place (strings
and paths JSON-quoted, which TOML reads as basic strings).

    text = config_text(models=[
        model_table("bench", [variant("fp32", path, options={"threads": 2})],
                    required=True, max_batch_size=8)],
        governor=table("governor", {"enabled": False}))

Literal TOML is still accepted wherever a caller wants it (``extra``, ``server``,
``governor``): a test about the TOML text itself keeps writing it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


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


def keys(fields: Mapping[str, Any]) -> str:
    """``key = value`` lines; a ``None`` value leaves its key out (the daemon's default)."""
    return "".join(f"{k} = {toml_value(v)}\n" for k, v in fields.items() if v is not None)


def table(header: str, fields: Mapping[str, Any] | None) -> str:
    """``[header]`` and its keys; nothing at all for ``fields=None``."""
    return f"[{header}]\n{keys(fields)}" if fields is not None else ""


def tables(header: str, rows: Sequence[Mapping[str, Any]]) -> str:
    """One ``[[header]]`` table per row (e.g. ``governor.levels``)."""
    return "".join(f"[[{header}]]\n{keys(r)}" for r in rows)


def variant(name: str, path: str | Path = "unused", *, backend: str = "onnxruntime",
            options: Mapping[str, Any] | None = None, **fields: Any) -> str:
    """A ``[[models.variants]]`` table, its ``options`` as ``[models.variants.options]``."""
    head = {"name": name, "backend": backend, "path": path, **fields}
    return f"[[models.variants]]\n{keys(head)}{table('models.variants.options', options)}"


def model_table(name: str, variants: Sequence[str], *,
                preprocess: Mapping[str, Any] | None = None,
                postprocess: Mapping[str, Any] | None = None, extra: str = "",
                **fields: Any) -> str:
    """A ``[[models]]`` table: ``fields`` as its keys (``None`` leaves a key out),
    ``extra`` as literal TOML after them, then its preprocess, postprocess and variants
    (tables from :func:`variant`)."""
    head = f"[[models]]\nname = {toml_value(name)}\n{keys(fields)}{extra}\n"
    return (head + table("models.preprocess", preprocess)
            + table("models.postprocess", postprocess) + "".join(variants))


def config_text(*, models: Sequence[str], server: str = "", governor: str = "",
                metrics: str = 'listen = "off"') -> str:
    """A whole config: ``[server]`` and ``[metrics]`` (their keys as literal TOML, metrics
    off unless told), the ``models`` tables, then ``governor`` (literal TOML, e.g. from
    :func:`table` and :func:`tables`). The daemon's own defaults fill the rest."""
    return (f"[server]\n{server}\n[metrics]\n{metrics}\n\n" + "\n".join(models)
            + f"\n{governor}\n")


def shipped_person_block(root: Path) -> str:
    """config.toml's person model block, verbatim, with absolute paths (the block users
    copy: benchmarks and the detection tests serve exactly it)."""
    text = (root / "config.toml").read_text()
    block = text[text.index('[[models]]\nname = "person"'):text.index("[governor]")]
    return block.replace('path = "models/', f'path = "{root}/models/')


def write_config(path: Path, **parts: Any) -> Path:
    """:func:`config_text` written to ``path``; returns ``path``."""
    path.write_text(config_text(**parts))
    return path
