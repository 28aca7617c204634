"""A detection model's answer on the wire (docs/protocol.md, "Detection models"), both ways.

The reply header's ``detections`` entry says how many rows there are (``count``), their
``columns`` and the model's ``labels``; the rows themselves are one float32 ``[K, 6]``
frame after the output frames (there are none unless the request asked for ``raw``
outputs too). What goes into the entry besides ``count`` is the model's business.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edged.protocols.native.client_decode import reply_tensor

DETECTION_COLUMNS = ("x1", "y1", "x2", "y2", "score", "class")


def detections_frame(rows: np.ndarray,
                     entry: dict[str, Any] | None) -> tuple[dict[str, Any], Any]:
    """The header's ``detections`` entry (``entry`` with the row count) and the frame of
    ``rows`` as little-endian float32 (empty bytes when there are none)."""
    d = np.ascontiguousarray(rows, dtype="<f4")
    return {**(entry or {}), "count": int(d.shape[0])}, (d.data if d.nbytes else b"")


@dataclass(frozen=True)
class Detections:
    """A detection model's answer: rows ``[x1, y1, x2, y2, score, class]``, best first, box
    corners in pixels of the frame the client sent (so a camera app draws them as is).

    A pipeline's answer has more columns (a ``track_id``, then ``<stage>_class``,
    ``<stage>_score``, ``<stage>_state`` per stage) and, in ``stages``, each stage's
    labels, variant, batch sizes and status as the reply header says them
    (docs/pipelines.md); ``stage_label`` and ``stage_state`` read them per box."""

    rows: np.ndarray  # float32 [K, len(columns)]
    columns: tuple[str, ...] = DETECTION_COLUMNS
    labels: dict[int, str] = field(default_factory=dict)
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: a stage state's number -> its name (fresh, carried, not_selected, failed, shed)
    states: dict[int, str] = field(default_factory=dict)

    def column(self, name: str) -> np.ndarray:
        """One column by name (KeyError naming the columns there are)."""
        if name not in self.columns:
            raise KeyError(f"no column {name!r}; the columns are {', '.join(self.columns)}")
        return self.rows[:, self.columns.index(name)]

    def stage_state(self, stage: str, k: int) -> str:
        """Box ``k``'s state for ``stage``: fresh, carried, not_selected, failed or shed."""
        n = int(self.column(f"{stage}_state")[k])
        return self.states.get(n, str(n))

    def stage_label(self, stage: str, k: int) -> str | None:
        """Box ``k``'s label from ``stage`` (None when the stage gave it none)."""
        c = int(self.column(f"{stage}_class")[k])
        if c < 0 or self.stage_state(stage, k) not in ("fresh", "carried"):
            return None
        labels = (self.stages.get(stage) or {}).get("labels") or {}
        return str(labels.get(str(c), labels.get(c, c)))

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    @property
    def boxes(self) -> np.ndarray:
        return self.rows[:, :4]

    @property
    def scores(self) -> np.ndarray:
        return self.rows[:, 4]

    @property
    def classes(self) -> np.ndarray:
        return self.rows[:, 5].astype(np.int64)

    def label(self, k: int) -> str:
        """The label of row ``k`` (its class number when the model names no labels)."""
        c = int(self.rows[k, 5])
        return self.labels.get(c, str(c))


def decode_detections(header: dict[str, Any], frames: list[Any]) -> Detections | None:
    """The ``detections`` of an OK reply, or None when the reply has none.

    A malformed entry or frame raises ``ValueError`` naming the field, as
    ``decode_reply`` does for outputs."""
    meta = header.get("detections")
    if meta is None or header.get("status") != "OK":
        return None
    if not isinstance(meta, dict):
        raise ValueError("reply detections must be an object with count, columns, labels")
    count = meta.get("count")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"reply detections.count must be a non-negative int: {count!r}")
    columns = meta.get("columns", list(DETECTION_COLUMNS))
    if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
        raise ValueError("reply detections.columns must be a list of column names")
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        raise ValueError("reply detections.labels must map class numbers to names")
    index = 1 + len(header.get("outputs") or [])
    if len(frames) <= index:
        raise ValueError(f"reply has detections but no frame {index} to hold them")
    rows = reply_tensor("detections", {"dtype": "float32", "shape": [count, len(columns)]},
                        frames[index])
    try:
        names = {int(k): str(v) for k, v in labels.items()}
    except ValueError:
        raise ValueError("reply detections.labels keys must be class numbers") from None
    stages = meta.get("stages") or {}
    states = meta.get("states") or {}
    if not isinstance(stages, dict) or not isinstance(states, dict):
        raise ValueError("reply detections.stages and .states must be objects")
    try:
        state_names = {int(k): str(v) for k, v in states.items()}
    except ValueError:
        raise ValueError("reply detections.states keys must be numbers") from None
    return Detections(rows, tuple(columns), names, stages, state_names)
