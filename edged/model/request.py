"""A request as a model takes it, whatever protocol it came by.

Why a type of its own below the protocols: the native room parses its wire format into
it, the KServe room converts its tensors into it, and the model's input contract
(``contract``) reads only this, so no protocol's parser is imported by the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class InputMeta:
    name: str | None
    encoding: str
    dtype: np.dtype | None
    shape: tuple[int, ...] | None
    data: Any  # np.ndarray for raw, memoryview/bytes for encoded images, ShmRef for shm


@dataclass
class Request:
    """A decoded request. ``id`` is echoed as given (str or int)."""

    op: str
    id: str | int | None
    model: str | None = None
    inputs: list[InputMeta] = field(default_factory=list)
    timeout_ms: float | None = None
    priority: int = 1
    stream: str | None = None
    outputs: list[str] | None = None
    #: frames per second this request's stream may send (frames beyond: DROPPED)
    max_fps: float | None = None
    #: detection options given in the header (conf, iou, max_det, classes, raw)
    options: dict[str, Any] = field(default_factory=dict)
    #: the ``shm`` op's arguments (slots, slot_bytes, pid or release), checked
    shm: dict[str, Any] = field(default_factory=dict)

    @property
    def shm_inputs(self) -> bool:
        return any(m.encoding == "shm" for m in self.inputs)
