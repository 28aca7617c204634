"""What a model does with its outputs: a *head*, chosen at load from the config.

Why a head and not branches in the model: a detector differs from a plain tensor model
only around the batch (it fits the frame to the variant's input and keeps the
transform, decodes + NMS the whole batch, tracks, re-fits frames queued for another
input size, and adds a ``detections`` header to the reply). Putting that behind one
small interface, picked by name like a backend, keeps the model a thin owner of its
queue and variants. The detection head lives in ``edged.model.detect_head``; the tensor head,
which returns each request its rows of the raw outputs, is here.

Where each call runs: ``for_variant`` on the loading thread, ``begin`` and the
returned ``RequestFit`` on the event loop or the decode pool, ``before_compute`` and
``split`` on the model's worker thread, ``reply_header`` and ``describe`` on the loop.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from edged.backends.base import Backend
from edged.batching.queue import Pending, PerRequest
from edged.config.models import ModelConfig, VariantConfig
from edged.errors import InvalidArgument
from edged.metrics import Metrics
from edged.model.detect_head import DetectionHead
from edged.preprocess.preprocessor import Preprocessor


class RequestFit(Protocol):
    """One request on its way in: how its image becomes a tensor, and what the head
    needs back after compute (``Pending.meta``)."""

    def frame(self, pre: Preprocessor, frame: np.ndarray, color: str | None) -> np.ndarray:
        """The model tensor for a uint8 frame in ``color`` (None: the config's color)."""
        ...

    def as_is(self) -> None:
        """The image input came as a ready tensor of the model's own shape."""
        ...

    def finish(self, rows: int, stream: str | None) -> Any:
        """Checks that need the whole request; returns its ``Pending.meta``."""
        ...


class Head(Protocol):
    """The output handling of one model, the same for every variant of its ladder.
    ``part`` is what ``for_variant`` returned for the variant at hand (``Loaded.post``)."""

    name: str

    def for_variant(self, v: VariantConfig, backend: Backend) -> Any:
        """What this head keeps per variant (opaque to the model; ``Loaded.post``).
        Raises to fail the variant's load; never closes the backend."""
        ...

    def begin(self, part: Any, options: dict[str, Any]) -> RequestFit: ...

    def before_compute(self, batch: list[Pending], part: Any) -> None: ...

    def split(self, batch: list[Pending], part: Any, outs: dict[str, np.ndarray],
              output_names: list[str]) -> list[PerRequest]: ...

    def reply_header(self, part: Any, detections: np.ndarray | None) -> dict[str, Any]: ...

    def describe(self, part: Any) -> dict[str, Any]: ...


class _TensorFit:
    """A plain model's request: the preprocessor makes the tensor; nothing is kept."""

    __slots__ = ()

    def frame(self, pre: Preprocessor, frame: np.ndarray, color: str | None) -> np.ndarray:
        return pre.from_frame(frame, source_color=color)

    def as_is(self) -> None:
        return None

    def finish(self, rows: int, stream: str | None) -> None:
        return None


_TENSOR_FIT = _TensorFit()


class TensorHead:
    """Each request gets its own rows of the outputs it asked for (default all)."""

    name = "tensor"

    def __init__(self, cfg: ModelConfig, metrics: Metrics,
                 preprocessor: Preprocessor | None) -> None:
        self.model = cfg.name

    def for_variant(self, v: VariantConfig, backend: Backend) -> None:
        return None

    def begin(self, part: None, options: dict[str, Any]) -> _TensorFit:
        if options:
            raise InvalidArgument(f"{', '.join(sorted(options))}: detection options, but "
                                  f"model {self.model!r} is not a detection model")
        return _TENSOR_FIT

    def before_compute(self, batch: list[Pending], part: None) -> None:
        return None

    def split(self, batch: list[Pending], part: None, outs: dict[str, np.ndarray],
              output_names: list[str]) -> list[PerRequest]:
        results: list[PerRequest] = []
        start = 0
        for p in batch:
            names = p.outputs or output_names
            results.append(([(n, outs[n][start:start + p.rows]) for n in names], None))
            start += p.rows
        return results

    def reply_header(self, part: None, detections: np.ndarray | None) -> dict[str, Any]:
        return {}

    def describe(self, part: None) -> dict[str, Any]:
        return {}


#: head name -> class; ``[models.postprocess] kind = "detect"`` picks the detection head
HEADS: dict[str, type[TensorHead] | type[DetectionHead]] = {
    "tensor": TensorHead, "detect": DetectionHead}


def open_head(cfg: ModelConfig, metrics: Metrics, preprocessor: Preprocessor | None) -> Head:
    """The head the model's config names (a plain tensor head without a postprocess)."""
    kind = "detect" if cfg.postprocess is not None else "tensor"  # the one postprocess kind
    return HEADS[kind](cfg, metrics, preprocessor)
