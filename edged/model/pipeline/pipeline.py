"""One served pipeline: the detector's boxes, then each stage's class and score per box.

Why a pipeline is not a model: it owns no queue, worker or variant. A request is the
detector's request (same queue, batches, stream rules and deadline as any frame of that
model); when its boxes come back, each stage selects boxes, cuts their crops from the
client's frame and submits them, one request per frame and stage, to the stage's own
model, so crops of many frames and streams batch together there under that model's
ladder, checks and metrics (``run.FrameRun``: one frame's run and the box states it
answers). The reply is the detector's with three columns per stage (``<stage>_class``,
``<stage>_score``, ``<stage>_state``) and, in its header, each stage's labels, variant,
batch sizes and status (docs/pipelines.md).

Where each part runs: ``prepare`` on a room's decode pool (it decodes the image once and
keeps the frame), ``prepare_frame`` where a room already holds a frame (Frigate's, on the
event loop, as for a model), ``submit`` and every callback on the event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from edged.backends.base import TensorSpec
from edged.batching.queue import Respond
from edged.config.pipelines import PipelineConfig
from edged.errors import InvalidArgument, Unavailable
from edged.metrics import Metrics
from edged.model.contract import Prepared
from edged.model.model import Model
from edged.model.pipeline.plan import StepPlan
from edged.model.pipeline.reuse import TrackResults
from edged.model.pipeline.run import (
    STAGE_COLUMNS,
    STATES,
    FrameRun,
    PipelinePrepared,
    stage_labels,
)
from edged.model.request import Request
from edged.model.usage import ModelUsage
from edged.preprocess.preprocessor import decode_image

log = logging.getLogger("edged.model.pipeline")


class Pipeline:
    """A ``[[models]] kind = "pipeline"`` entry as the daemon serves it."""

    kind = "pipeline"
    detects = True

    def __init__(self, cfg: PipelineConfig, models: Callable[[str], Model | None],
                 metrics: Metrics, ladders: dict[str, list[str]], max_streams: int = 4096,
                 idle_s: float = 60.0) -> None:
        """``models`` finds a served model by name at each request (a reload may have
        replaced it); ``ladders`` are the member models' variant names."""
        self.cfg = cfg
        self.name = cfg.name
        self._models = models
        self.ladders = ladders
        self.plan = StepPlan(cfg, ladders)
        self.position = 0
        self.position_reason = ""
        #: stage -> why it is shed now
        self.shed: dict[str, str] = {}
        #: deadline use of the pipeline's answers: what the load rule reads
        self.usage = ModelUsage()
        self.results = TrackResults(max_streams, idle_s)
        #: each stage's ``reinfer_interval``; whether any stage reuses a track's result
        self.intervals = {s.name: s.reinfer_interval for s in cfg.stages}
        self.reuse = any(s.reinfer_interval > 0 for s in cfg.stages)
        self._m_boxes = {(s.name, st): metrics.pipeline_boxes.labels(cfg.name, s.name, st)
                         for s in cfg.stages for st in STATES}
        self._m_untracked = metrics.pipeline_untracked.labels(cfg.name)

    # -- what the rooms, the registry and the governor read ------------------------------

    @property
    def detector(self) -> Model | None:
        return self._models(self.cfg.detector)

    def member(self, model: str) -> Model | None:
        """A member model as served now (None when it is not served)."""
        return self._models(model)

    def stage_model(self, stage: str) -> Model | None:
        """The model stage ``stage`` runs, as served now (None: not served, or no such
        stage)."""
        s = next((s for s in self.cfg.stages if s.name == stage), None)
        return self._models(s.model) if s is not None else None

    def check_ready(self) -> Model:
        """The detector, or UNAVAILABLE saying why the pipeline cannot take a frame."""
        det = self.detector
        if det is None:
            raise Unavailable(f"pipeline {self.name!r}: its detector {self.cfg.detector!r} "
                              "is not served")
        if not det.ready:
            detail = f": {det.error}" if det.error else ""
            raise Unavailable(f"pipeline {self.name!r}: its detector {det.name!r} is "
                              f"{det.state}{detail}")
        return det

    @property
    def ready(self) -> bool:
        det = self.detector
        return det is not None and det.ready

    @property
    def state(self) -> str:
        det = self.detector
        return det.state if det is not None else "failed"

    @property
    def error(self) -> str | None:
        det = self.detector
        if det is None:
            return f"its detector {self.cfg.detector!r} is not served"
        return det.error

    @property
    def active_variant(self) -> str:
        det = self.detector
        return det.active_variant if det is not None else ""

    @property
    def inputs(self) -> list[TensorSpec]:
        det = self.detector
        return det.inputs if det is not None else []

    @property
    def outputs(self) -> list[TensorSpec]:
        det = self.detector
        return det.outputs if det is not None else []

    # the load rule (edged.server.overload) walks the step-down plan as a model's ladder
    @property
    def active_index(self) -> int:
        return self.position

    @property
    def variant_names(self) -> list[str]:
        return self.plan.names

    @property
    def swapping(self) -> bool:
        return any(m is not None and m.swapping for m in map(self._models, self.cfg.models))

    def set_position(self, position: int, reason: str) -> None:
        """Take step-down position ``position`` (the governor's or the load's): which
        stages are shed follows; the member models' variants are the governor's to swap."""
        position = max(0, min(position, len(self.plan)))
        shed = self.plan.at(position).shed
        if position != self.position:
            log.info("pipeline %s: step-down position %d (%s): %s", self.name, position,
                     self.plan.names[position], reason)
        self.position = position
        self.position_reason = reason if position else ""
        self.shed = {s: reason for s in shed}

    # -- a request ------------------------------------------------------------------------

    def needs_thread(self, req: Request) -> bool:
        """Always: the frame is decoded or fitted, and kept for the crops."""
        return True

    def prepare(self, req: Request) -> PipelinePrepared:
        """Validate the request, decode its image once and prepare the detector's tensor;
        the frame is kept for the crops."""
        det = self.check_ready()
        if len(req.inputs) != 1:
            raise InvalidArgument(f"pipeline {self.name!r} takes one image; got "
                                  f"{len(req.inputs)} inputs")
        meta = req.inputs[0]
        names = [s.name for s in det.inputs]
        if meta.name is not None and meta.name not in names:
            raise InvalidArgument(f"inputs[0]: pipeline {self.name!r} has no input "
                                  f"{meta.name!r}; its detector's is {', '.join(names)}")
        limits = det.limits
        pre = det.cfg.preprocess
        assert pre is not None  # a detector has one (config)
        if meta.encoding in ("jpeg", "png"):
            frame = decode_image(meta.data, limits.max_image_pixels, meta.encoding)
            color = "bgr"
        elif (meta.encoding == "raw" and meta.dtype == np.uint8 and meta.shape is not None
              and len(meta.shape) in (2, 3)):
            if meta.shape[0] * meta.shape[1] > limits.max_image_pixels:
                raise InvalidArgument(f"inputs[0]: frame of {meta.shape[1]}x{meta.shape[0]} "
                                      f"exceeds {limits.max_image_pixels} pixels")
            frame, color = meta.data, pre.raw_color
        else:
            got = f"{meta.dtype} {list(meta.shape or [])}" if meta.encoding == "raw" \
                else meta.encoding
            raise InvalidArgument(f"inputs[0]: pipeline {self.name!r} takes an image (JPEG, "
                                  f"PNG or a raw uint8 HxW or HxWxC frame, C = 1, 3 or 4 "
                                  f"channels) to crop; got {got}")
        if req.outputs:
            names = [o.name for o in det.outputs]
            unknown = [o for o in req.outputs if o not in names]
            if unknown:
                raise InvalidArgument(f"unknown output(s) {', '.join(map(repr, unknown))}; "
                                      f"the detector {det.name!r} has {', '.join(names)}")
        return self._prepared(det, frame, color, req.options, req.stream, req.outputs,
                              req.max_fps)

    def prepare_frame(self, frame: np.ndarray, color: str, options: dict[str, Any],
                      stream: str | None = None) -> PipelinePrepared:
        """A uint8 frame in ``color`` handed over whole (Frigate's), as
        ``Model.prepare_frame`` takes one: the detector's tensor, the frame kept for the
        crops."""
        return self._prepared(self.check_ready(), frame, color, options, stream, None, None)

    def _prepared(self, det: Model, frame: np.ndarray, color: str, options: dict[str, Any],
                  client_stream: str | None, outputs: list[str] | None,
                  max_fps: float | None) -> PipelinePrepared:
        options = dict(options)
        stream = f"{self.name}:{client_stream}" if client_stream is not None else None
        if stream is not None and self.reuse:
            options.setdefault("track", True)  # results are reused by track id
        p = det.prepare_frame(frame, color, options, stream)
        return PipelinePrepared(feeds=p.feeds, rows=p.rows, key=p.key, meta=p.meta,
                                outputs=outputs, stream=stream, max_fps=max_fps,
                                frame=frame, color=color, client_stream=client_stream)

    def submit(self, prepared: Prepared, respond: Respond, *, arrival: float,
               priority: int = 1, deadline: float | None = None,
               quiet: Callable[[], bool] | None = None) -> None:
        """Queue the frame on the detector; ``respond`` gets the whole answer once. Raises
        EdgedError (and does not call ``respond``) when the detector cannot take it."""
        if not isinstance(prepared, PipelinePrepared):
            raise InvalidArgument(f"pipeline {self.name!r} got a request it did not prepare")
        det = self.check_ready()
        run = FrameRun(self, prepared, respond, arrival, priority, deadline)
        det.submit(prepared, run.detected, arrival=arrival, priority=priority,
                   deadline=deadline)

    def detections_header(self, detections: np.ndarray | None = None) -> dict[str, Any]:
        """The columns and labels of an answer without a track column (each reply has
        its own, with the stages' variants and batches)."""
        det = self.detector
        base = det.detections_header(detections) if det is not None else {}
        return {**base, "columns": [*base.get("columns", []), *self.stage_columns()],
                "stages": {s.name: stage_labels(s) for s in self.cfg.stages},
                "states": dict(enumerate(STATES))}

    def stage_columns(self) -> list[str]:
        return [f"{s.name}_{c}" for s in self.cfg.stages for c in STAGE_COLUMNS]

    def answered(self, stage: str, states: np.ndarray) -> None:
        for k, n in zip(*np.unique(states, return_counts=True), strict=True):
            self._m_boxes[(stage, STATES[int(k)])].inc(int(n))

    def untracked(self, boxes: int) -> None:
        """``boxes`` of a tracked frame no track took (each read afresh)."""
        if boxes:
            self._m_untracked.inc(boxes)

    # -- status -----------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        def member(name: str) -> dict[str, Any]:
            m = self._models(name)
            if m is None:
                return {"model": name, "state": "not served", "active_variant": None,
                        "variants": []}
            return {"model": name, "state": m.state, "error": m.error,
                    "active_variant": m.active_variant or None, "variants": m.variant_names,
                    "max_batch_size": m.cfg.max_batch_size}

        names = self.plan.names
        return {
            "name": self.name, "kind": self.kind, "state": self.state, "error": self.error,
            "detector": member(self.cfg.detector),
            "stages": [{"name": s.name, **member(s.model), "optional": s.optional,
                        "shed": self.shed.get(s.name), "max_crops": s.max_crops,
                        "reinfer_interval": s.reinfer_interval} for s in self.cfg.stages],
            "step_down": {"order": list(self.cfg.step_down_order), "position": self.position,
                          "at": names[self.position], "positions": names,
                          "reason": self.position_reason or None,
                          "load": self.cfg.overload.step_down},
            "tracks": {"streams": len(self.results)},
        }


