"""The detection head: a detector in the serving path (``edged.model.heads`` names the interface).

Why here and not in the model: the model owns queues and swaps; what a detector adds
(fit the frame to the variant's input and keep the transform, decode + NMS the whole
batch on the worker thread, track per stream, re-fit frames queued for another input
size, the reply's ``detections`` header) is detection's own business, kept in one
place beside the decoders it drives.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edged.backends.base import Backend, TensorSpec
from edged.config.postprocess import PostprocessConfig
from edged.detect.geometry import Transform, fit
from edged.detect.labels import onnx_metadata
from edged.detect.postprocess import Options, Postprocessor
from edged.detect.tracking import TRACK_COLUMN, Trackers, missing_tracker, require_tracker
from edged.errors import ArtifactError, InvalidArgument, Unavailable
from edged.preprocess.preprocessor import PreprocessConfig, Preprocessor

if TYPE_CHECKING:  # the batcher's types only; detect/ imports no serving code at run time
    from edged.batching.queue import Pending, PerRequest
    from edged.config.models import ModelConfig, VariantConfig
    from edged.metrics import Metrics


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


def image_spec(backend: Backend, input_name: str | None) -> TensorSpec:
    """The input the preprocessing feeds: the named one, else the first."""
    return next((s for s in backend.inputs if s.name == input_name), backend.inputs[0])


def build_postprocessor(cfg: PostprocessConfig, pre: PreprocessConfig, backend: Backend,
                        path: Path, input_name: str | None) -> Postprocessor:
    """The variant's post-processor; a layout that does not fit fails the variant's load."""
    spec = image_spec(backend, input_name)
    metadata: dict[str, str] = {}
    if cfg.labels is None and path.suffix == ".onnx" and path.exists():
        metadata = onnx_metadata(path)
    try:
        return Postprocessor(cfg, backend.outputs, pre.input_size(spec.shape), metadata=metadata)
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
    fitted, tf = fit(frame, post.cfg.resize, size[0], size[1], post.cfg.pad_value)
    return pre.from_frame(fitted, source_color=color, size=size), tf


def detect_batch(post: Postprocessor, outs: dict[str, np.ndarray],
                 jobs: list[DetectJob]) -> list[np.ndarray]:
    """Decode + NMS + map back for every request of a batch (one image each)."""
    return post.run(outs, [j.transform for j in jobs], [j.options for j in jobs])


class DetectFit:
    """Collects a detector request's transform while its input tensor is made."""

    def __init__(self, head: DetectionHead, post: Postprocessor,
                 options: dict[str, Any]) -> None:
        self.head = head
        self.post = post
        self.asked = options
        self.options, self.raw = parse_options(post, options)
        self.size: tuple[int, int] = self.post.input_size
        self.transform: Any = None
        self.frame_kept: np.ndarray | None = None
        self.color: str | None = None

    def frame(self, pre: Preprocessor, frame: np.ndarray, color: str | None) -> np.ndarray:
        tensor, self.transform = fit_frame(self.post, pre, frame, color, self.size)
        self.frame_kept, self.color = frame, color
        return tensor

    def as_is(self) -> None:
        self.transform = Transform.identity(*self.size)

    def finish(self, rows: int, stream: str | None) -> DetectJob:
        if rows != 1:
            raise InvalidArgument(f"a detection request carries one image; got {rows} rows "
                                  f"(send one request per frame)")
        if self.transform is None:
            raise InvalidArgument("a detection request needs its image input")
        job = DetectJob(self.options, self.transform, self.size,
                        self.frame_kept if self.head.keep_frames else None, self.color, self.raw)
        asked = self.asked.get("track")
        if asked and stream is None:
            raise InvalidArgument("option 'track' needs a 'stream': track ids are per stream")
        job.track = stream is not None and (asked if asked is not None else self.head.track)
        if job.track:
            missing = missing_tracker()  # cheap: the import itself runs on the worker
            if missing:
                raise InvalidArgument(missing)
        return job


class DetectionHead:
    """Boxes instead of (or, with ``raw``, besides) the raw outputs (docs/protocol.md,
    "Detection models")."""

    name = "detect"

    def __init__(self, cfg: ModelConfig, metrics: Metrics,
                 preprocessor: Preprocessor | None) -> None:
        assert cfg.postprocess is not None and preprocessor is not None  # config ensures
        self.cfg = cfg.postprocess
        self.pre = preprocessor
        self.track = cfg.postprocess.track
        #: a detector with several rungs keeps each queued frame, to re-fit it if a swap
        #: changes the input size (bounded by max_queue)
        self.keep_frames = len(cfg.variants) > 1
        self._trackers = Trackers(cfg.max_streams, cfg.stream_idle_s, cfg.postprocess.conf)
        #: the input the frames feed; the same name on every rung (the model's contract)
        self._image_input: str | None = None
        self._m_post = metrics.postprocess_duration.labels(cfg.name)
        self._m_dets = metrics.detections_per_frame.labels(cfg.name)

    def for_variant(self, v: VariantConfig, backend: Backend) -> Postprocessor:
        """The variant's post-processor (``Loaded.post``)."""
        if self.track:
            require_tracker()  # a model that tracks fails its load without the extra
        name = self.pre.cfg.input
        post = build_postprocessor(self.cfg, self.pre.cfg, backend, v.path, name)
        self._image_input = image_spec(backend, name).name
        return post

    def begin(self, post: Postprocessor, options: dict[str, Any]) -> DetectFit:
        return DetectFit(self, post, options)

    def before_compute(self, batch: list[Pending], post: Postprocessor) -> None:
        """Requests prepared for another input size (a swap to a rung of another
        resolution happened while they queued) are fitted again for this variant."""
        size = post.input_size
        for p in batch:
            job: DetectJob = p.meta
            if job.size == size:
                continue
            if job.frame is None:
                raise Unavailable(f"the variant changed to input {size[0]}x{size[1]} while "
                                  f"this {job.size[0]}x{job.size[1]} tensor queued; send again")
            assert self._image_input is not None
            tensor, job.transform = fit_frame(post, self.pre, job.frame, job.color, size)
            job.size = size
            p.feeds = {**p.feeds, self._image_input: tensor}

    def split(self, batch: list[Pending], post: Postprocessor, outs: dict[str, np.ndarray],
              output_names: list[str]) -> list[PerRequest]:
        """Decode + NMS + map back, for the whole batch, on the worker thread; trackers
        see each stream's frames in queue order."""
        t0 = time.perf_counter()
        dets = detect_batch(post, outs, [p.meta for p in batch])
        self._m_post.observe(time.perf_counter() - t0)
        results: list[PerRequest] = []
        for k, (p, d) in enumerate(zip(batch, dets, strict=True)):
            self._m_dets.observe(d.shape[0])
            if p.meta.track:
                assert p.stream is not None
                d = self._trackers.update(p.stream, d)
            names = (p.outputs or output_names) if p.meta.raw else []
            results.append(([(n, outs[n][k:k + 1]) for n in names], d))
        return results

    def reply_header(self, post: Postprocessor | None,
                     detections: np.ndarray | None) -> dict[str, Any]:
        """``columns`` and ``labels`` for a detections reply (the count is per reply); a
        tracked reply's 7th column is ``track_id``."""
        if post is None:
            return {}
        h = dict(post.detections_header(np.zeros((0, 6), np.float32)))
        h.pop("count", None)
        if detections is not None and detections.ndim == 2 and detections.shape[1] == 7:
            h["columns"] = [*h["columns"], TRACK_COLUMN]
        return h

    def describe(self, post: Postprocessor | None) -> dict[str, Any]:
        return {"detections": {"decoder": self.cfg.decoder, **self.reply_header(post, None)}}
