"""The shipped pipeline example, verbatim, as the pipeline tests serve it.

Why verbatim: ``examples/pipelines/digits-reader.toml`` is what users copy; the tests
then also check that block (its paths made absolute, ONNX Runtime on one thread: a test
machine's cores are shared).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from support.paths import ROOT

EXAMPLE = ROOT / "examples" / "pipelines" / "digits-reader.toml"
VAL = ROOT / "models" / "digits-det" / "val.npz"


def example_models() -> str:
    """The example's ``[[models]]`` tables (no [server], no [metrics]), paths absolute."""
    text = EXAMPLE.read_text()
    text = text[text.index("[[models]]"):]
    return (text.replace('path = "../../models/', f'path = "{ROOT}/models/')
            .replace("threads = 2", "threads = 1"))


def pipeline_config(tmp: Path, *, extra: str = "", server: str = "", name: str = "edged.toml",
                    models: str | None = None) -> Path:
    """A config: drain quickly, metrics off, the example's models (or ``models``), then
    ``extra`` (more tables: pipelines, models, a governor)."""
    p = tmp / name
    p.write_text(f'[server]\ndrain_timeout_s = 2.0\n{server}\n[metrics]\nlisten = "off"\n\n'
                 f"{example_models() if models is None else models}\n{extra}\n")
    return p


def held_out() -> tuple[np.ndarray, list[np.ndarray]]:
    """The detector's held-out scenes (BGR) and, per scene, rows x1, y1, x2, y2, class."""
    with np.load(VAL) as z:
        images, boxes = z["images"], z["boxes"]
    return images, [boxes[boxes[:, 0] == i][:, 1:] for i in range(len(images))]


def states(det: Any, stage: str) -> list[str]:
    """Each box's state for ``stage`` (fresh, carried, not_selected, failed, shed)."""
    return [det.stage_state(stage, k) for k in range(len(det))]


def labels_param(result: Any) -> dict[str, Any]:
    """A KServe reply's ``labels`` parameter (gRPC), decoded."""
    return dict(json.loads(result.get_response().parameters["labels"].string_param))
