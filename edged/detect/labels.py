"""Class names for a detector: from a labels file, inline config, or the model's metadata.

Ultralytics writes ``names`` into ONNX metadata as a Python dict literal
(``{0: 'person', 1: 'bicycle'}``). That string comes from a user's file, so it is
parsed by a strict grammar here (ints, quoted strings, nothing else), never evaluated.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

_STR = r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\""
_ENTRY = re.compile(rf"\s*(\d+)\s*:\s*({_STR})\s*(,|\}})")
_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t", "r": "\r"}
# What Python's repr() writes for a str: the escapes above and \xNN, \uNNNN, \UNNNNNNNN.
_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)", re.DOTALL)


def labels_from_metadata(meta: Mapping[str, str]) -> tuple[str, ...] | None:
    """Labels from a model's metadata ``names`` entry, or None if it has none.

    Accepts JSON (a list, or an object with integer keys) and the Python dict literal
    Ultralytics writes. Ids must be 0..C-1 without gaps, as the decoders index by id.
    """
    raw = meta.get("names")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = _parse_dict_literal(raw)
    if isinstance(parsed, list) and all(isinstance(x, str) for x in parsed):
        return tuple(parsed)
    if isinstance(parsed, dict):
        try:
            by_id = {int(k): v for k, v in parsed.items()}
        except (TypeError, ValueError):
            raise ValueError("model metadata 'names': keys must be class ids") from None
        if sorted(by_id) != list(range(len(by_id))) or not all(
                isinstance(v, str) for v in by_id.values()):
            raise ValueError("model metadata 'names': expected ids 0..C-1 mapped to strings")
        return tuple(by_id[i] for i in range(len(by_id)))
    raise ValueError(f"model metadata 'names': expected a list or a dict; got {raw[:60]!r}")


def _parse_dict_literal(raw: str) -> dict[int, str]:
    """``{0: 'a', 1: "b"}`` -> {0: 'a', 1: 'b'}; anything else is a ValueError."""
    if not raw.startswith("{"):
        raise ValueError(f"model metadata 'names' is not a dict literal: {raw[:60]!r}")
    out: dict[int, str] = {}
    pos = 1
    if raw[1:].strip() == "}":
        return out
    while True:
        m = _ENTRY.match(raw, pos)
        if m is None:
            raise ValueError(f"model metadata 'names': cannot parse near {raw[pos:pos + 40]!r}")
        out[int(m.group(1))] = _unquote(m.group(2))
        pos = m.end()
        if m.group(3) == "}":
            break
    if raw[pos:].strip():
        raise ValueError(f"model metadata 'names': trailing text {raw[pos:pos + 40]!r}")
    return out


def _unquote(s: str) -> str:
    def one(m: re.Match[str]) -> str:
        e = m.group(1)
        if len(e) > 1:
            return chr(int(e[1:], 16)) if int(e[1:], 16) <= 0x10FFFF else "\ufffd"
        return _ESCAPES.get(e, "\\" + e)

    return _ESCAPE.sub(one, s[1:-1])


def onnx_metadata(path: str | Path) -> dict[str, str]:
    """The custom metadata of an ONNX file (read with ONNX Runtime, a base dependency)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return dict(sess.get_modelmeta().custom_metadata_map)
