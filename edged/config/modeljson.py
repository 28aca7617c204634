"""The ``model.json`` beside a model: where its validation and calibration data live.

Why: ``edged compile MODEL.onnx --out DIR`` is documented to work as it is. A model
that ships its held-out data (``models/digits`` has ``validation.npz``) names it in
its ``model.json``, so the command validates against real labels and calibrates INT8
without the user repeating the paths. Explicit ``--val``/``--calib``/``--preprocess``
flags always win.

Keys read here (paths relative to the ``model.json`` folder):

* ``"validation"``: ``.npz`` (``x``, optional ``y``), ``.npy`` or an image folder;
* ``"calibration"``: the same formats; default: the validation data.

The preprocessing facts in the same file are read by :mod:`edged.compile.data`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

NAME = "model.json"
DATA_KEYS = ("validation", "calibration")


@dataclass(frozen=True)
class ModelJson:
    path: Path
    validation: Path | None
    calibration: Path | None


def beside(model: Path) -> Path | None:
    """``model.json`` in the model's folder, or None."""
    p = Path(model).parent / NAME
    return p if p.is_file() else None


def read(path: Path) -> ModelJson:
    """Parse the data keys of ``path``; ValueError naming the file and key on bad input."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: cannot read: {e}") from e
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(doc).__name__}")
    found: dict[str, Path | None] = {}
    for key in DATA_KEYS:
        value = doc.get(key)
        if value is None:
            found[key] = None
            continue
        if not isinstance(value, str) or not value:
            raise ValueError(f"{path}: {key!r} must be a path (string) relative to "
                             f"{Path(path).parent}, got {value!r}")
        target = Path(path).parent / value
        if not target.exists():
            raise ValueError(f"{path}: {key!r} names {value!r}, but {target} does not exist")
        found[key] = target
    return ModelJson(Path(path), found["validation"], found["calibration"])
