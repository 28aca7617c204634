"""A detector in the serving path: per-request jobs, per-variant post-processors.

Why here and not in the model: the model owns queues and swaps; what a detector adds
(fit the frame to the variant's input, keep the transform, decode + NMS the whole
batch on the worker thread, map boxes back to the client's frame) is detection's own
business, kept in one place beside the decoders it drives.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edged.backends.base import Backend, TensorSpec
from edged.detect.config import PostprocessConfig
from edged.detect.geometry import Transform
from edged.detect.labels import onnx_metadata
from edged.detect.postprocess import Options, Postprocessor
from edged.errors import ArtifactError, InvalidArgument
from edged.preprocess import PreprocessConfig, Preprocessor


@dataclass
class DetectJob:
    """What a detector request needs after compute (``Pending.meta``)."""

    options: Options
    transform: Transform
    #: model input (width, height) the tensor was made for
    size: tuple[int, int]
    #: the client's frame, kept only when a swap may change the input size, so the
    #: request can be re-fitted for the variant that computes it
    frame: np.ndarray | None
    color: str | None
    raw: bool  # also return the model's raw outputs
    #: add a track_id column from the stream's tracker (the request has a stream)
    track: bool = False


def input_size(spec: TensorSpec, pre: PreprocessConfig) -> tuple[int, int]:
    """(width, height) of a variant's image input; the config's size for dynamic dims."""
    shape = spec.shape
    if len(shape) == 4:
        h, w = (shape[2], shape[3]) if pre.layout == "NCHW" else (shape[1], shape[2])
        if h > 0 and w > 0:
            return int(w), int(h)
    return pre.width, pre.height


def build_postprocessor(cfg: PostprocessConfig, pre: PreprocessConfig, backend: Backend,
                        path: Path, input_name: str | None) -> Postprocessor:
    """The variant's post-processor; a layout that does not fit fails the variant's load."""
    spec = next((s for s in backend.inputs if s.name == input_name), backend.inputs[0])
    metadata: dict[str, str] = {}
    if cfg.labels is None and path.suffix == ".onnx" and path.exists():
        metadata = onnx_metadata(path)
    try:
        return Postprocessor(cfg, backend.outputs, input_size(spec, pre), metadata=metadata)
    except ArtifactError as e:
        raise ArtifactError(f"{path}: {e}") from None


def parse_options(post: Postprocessor, options: dict[str, Any]) -> tuple[Options, bool]:
    raw = options.get("raw", False)
    if not isinstance(raw, bool):
        raise InvalidArgument(f"option 'raw' must be true or false; got {raw!r}")
    track = options.get("track", False)
    if not isinstance(track, bool):
        raise InvalidArgument(f"option 'track' must be true or false; got {track!r}")
    return post.parse_options(options), raw


def fit_frame(post: Postprocessor, pre: Preprocessor, frame: np.ndarray, color: str | None,
              size: tuple[int, int]) -> tuple[np.ndarray, Transform]:
    """Letterbox/stretch a uint8 frame to ``size`` and make the model tensor."""
    from edged.detect.geometry import fit

    fitted, tf = fit(frame, post.cfg.resize, size[0], size[1], post.cfg.pad_value)
    return pre.from_frame(fitted, source_color=color, size=size), tf


def detect_batch(post: Postprocessor, outs: dict[str, np.ndarray],
                 jobs: list[DetectJob]) -> list[np.ndarray]:
    """Decode + NMS + map back for every request of a batch (one image each)."""
    return post.run(outs, [j.transform for j in jobs], [j.options for j in jobs])


class DetectPrep:
    """Collects a detector request's transform while its input tensor is made."""

    def __init__(self, post: Postprocessor, options: dict[str, Any]) -> None:
        self.post = post
        self.options, self.raw = parse_options(post, options)
        self.size: tuple[int, int] = self.post.input_size
        self.transform: Any = None
        self.frame: np.ndarray | None = None
        self.color: str | None = None

    def fit(self, pre: Preprocessor, frame: np.ndarray, color: str | None) -> np.ndarray:
        tensor, self.transform = fit_frame(self.post, pre, frame, color, self.size)
        self.frame, self.color = frame, color
        return tensor

    def identity(self) -> None:
        self.transform = Transform.identity(*self.size)

    def job(self, keep_frame: bool) -> Any:
        if self.transform is None:
            raise InvalidArgument("a detection request needs its image input")
        return DetectJob(self.options, self.transform, self.size,
                         self.frame if keep_frame else None, self.color, self.raw)
