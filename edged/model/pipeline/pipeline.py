"""One served pipeline: the detector's boxes, then each stage's class and score per box.

Why a pipeline is not a model: it owns no queue, worker or variant. A request is the
detector's request (same queue, batches, stream rules and deadline as any frame of that
model); when its boxes come back, each stage selects boxes, cuts their crops from the
client's frame and submits them, one request per frame and stage, to the stage's own
model, so crops of many frames and streams batch together there under that model's
ladder, checks and metrics. The reply is the detector's with three columns per stage
(``<stage>_class``, ``<stage>_score``, ``<stage>_state``) and, in its header, each
stage's labels, variant, batch sizes and status (docs/pipelines.md).

Nothing is silently missing: each box says per stage whether its label is ``fresh``,
``carried`` (reused from its track), ``not_selected`` (not one of the stage's classes,
under its ``min_score``, or beyond its K), ``failed`` (the stage's model is not served,
not ready, or failed the batch: the header says why) or ``shed`` (the governor or the
load gave the stage up: the header says which).

Where each part runs: ``prepare`` on a room's decode pool (it decodes the image once and
keeps the frame), ``submit`` and every callback on the event loop (the batchers answer
there), so a run needs no lock; cropping is slicing plus the stage model's own
preprocessing of a small image.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from edged.backends.base import TensorSpec
from edged.batching.queue import Respond, Result
from edged.config.pipelines import PipelineConfig, StageConfig
from edged.errors import EdgedError, InvalidArgument, Shed, Unavailable
from edged.metrics import Metrics
from edged.model.contract import Prepared, batch_key
from edged.model.model import Model
from edged.model.pipeline.crops import cut, read_scores, select
from edged.model.pipeline.plan import StepPlan
from edged.model.pipeline.reuse import TrackResults
from edged.model.request import Request
from edged.model.usage import ModelUsage
from edged.preprocess.preprocessor import decode_image

log = logging.getLogger("edged.pipeline")

#: a box's state per stage, the number in its ``<stage>_state`` column
STATES = ("fresh", "carried", "not_selected", "failed", "shed")
FRESH, CARRIED, NOT_SELECTED, FAILED, SHED = range(len(STATES))
#: the columns each stage adds, in this order
STAGE_COLUMNS = ("class", "score", "state")


@dataclass(eq=False)
class PipelinePrepared(Prepared):
    """The detector's prepared request plus what the stages need after it."""

    frame: np.ndarray | None = None  # the client's frame: the crops are cut from it
    color: str = "bgr"  # its colour order, as the stage models' preprocessing needs it
    client_stream: str | None = None  # the stream as the client named it


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
        self._intervals = {s.name: s.reinfer_interval for s in cfg.stages}
        self._reuse = any(s.reinfer_interval > 0 for s in cfg.stages)
        self._m_boxes = {(s.name, st): metrics.pipeline_boxes.labels(cfg.name, s.name, st)
                         for s in cfg.stages for st in STATES}

    # -- what the rooms, the registry and the governor read ------------------------------

    @property
    def detector(self) -> Model | None:
        return self._models(self.cfg.detector)

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
                                  f"PNG or a raw uint8 HxW or HxWxC frame) to crop; got {got}")
        if req.outputs:
            names = [o.name for o in det.outputs]
            unknown = [o for o in req.outputs if o not in names]
            if unknown:
                raise InvalidArgument(f"unknown output(s) {', '.join(map(repr, unknown))}; "
                                      f"the detector {det.name!r} has {', '.join(names)}")
        options = dict(req.options)
        stream = f"{self.name}:{req.stream}" if req.stream is not None else None
        if stream is not None and self._reuse:
            options.setdefault("track", True)  # results are reused by track id
        p = det.prepare_frame(frame, color, options, stream)
        return PipelinePrepared(feeds=p.feeds, rows=p.rows, key=p.key, meta=p.meta,
                                outputs=req.outputs, stream=stream, max_fps=req.max_fps,
                                frame=frame, color=color, client_stream=req.stream)

    def submit(self, prepared: Prepared, respond: Respond, *, arrival: float,
               priority: int = 1, deadline: float | None = None,
               quiet: Callable[[], bool] | None = None) -> None:
        """Queue the frame on the detector; ``respond`` gets the whole answer once. Raises
        EdgedError (and does not call ``respond``) when the detector cannot take it."""
        if not isinstance(prepared, PipelinePrepared):
            raise InvalidArgument(f"pipeline {self.name!r} got a request it did not prepare")
        det = self.check_ready()
        run = _Run(self, prepared, respond, arrival, priority, deadline)
        det.submit(prepared, run.detected, arrival=arrival, priority=priority,
                   deadline=deadline)

    def detections_header(self, detections: np.ndarray | None = None) -> dict[str, Any]:
        """The columns and labels of an answer without a track column (each reply has
        its own, with the stages' variants and batches)."""
        det = self.detector
        base = det.detections_header(detections) if det is not None else {}
        return {**base, "columns": [*base.get("columns", []), *self.stage_columns()],
                "stages": {s.name: _stage_labels(s) for s in self.cfg.stages},
                "states": dict(enumerate(STATES))}

    def stage_columns(self) -> list[str]:
        return [f"{s.name}_{c}" for s in self.cfg.stages for c in STAGE_COLUMNS]

    def answered(self, stage: str, states: np.ndarray) -> None:
        for k, n in zip(*np.unique(states, return_counts=True), strict=True):
            self._m_boxes[(stage, STATES[int(k)])].inc(int(n))

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


def _stage_labels(s: StageConfig) -> dict[str, Any]:
    return {"model": s.model, **({"labels": dict(enumerate(s.labels))} if s.labels else {})}


class _Run:
    """One frame through the pipeline: the detector's answer, then every stage's."""

    def __init__(self, pipe: Pipeline, prepared: PipelinePrepared, respond: Respond,
                 arrival: float, priority: int, deadline: float | None) -> None:
        self.pipe = pipe
        self.prepared = prepared
        self.respond = respond
        self.arrival = arrival
        self.priority = priority
        self.deadline = deadline
        self.pending = 0
        self.det: Result | None = None
        self.dets = np.zeros((0, 6), np.float32)
        self.table = np.zeros((0, 0), np.float32)
        self.info: dict[str, dict[str, Any]] = {}
        self.frame_no = 0
        self.stream: str | None = None

    def detected(self, outcome: Result | EdgedError) -> None:
        """The detector answered: start every stage on its boxes."""
        if isinstance(outcome, EdgedError):
            self._answer(outcome)
            return
        pipe = self.pipe
        self.det = outcome
        dets = outcome.detections if outcome.detections is not None else np.zeros((0, 6),
                                                                                    np.float32)
        self.dets = dets
        stages = pipe.cfg.stages
        self.table = np.zeros((dets.shape[0], len(stages) * len(STAGE_COLUMNS)), np.float32)
        self.table[:, 0::3] = -1  # no class
        tracked = dets.shape[1] >= 7 and self.prepared.stream is not None
        if tracked and pipe._reuse:
            self.stream = self.prepared.stream
            self.frame_no = pipe.results.next_frame(self.stream, pipe._intervals)
        self.pending = 1  # this method's own: no stage may finish the run before all start
        for j, stage in enumerate(stages):
            try:
                self._start(j, stage)
            except Exception as e:  # a bug in one stage must not lose the boxes
                log.exception("pipeline %s: stage %s failed to start", pipe.name, stage.name)
                rows = select(dets, stage)
                unanswered = rows[self.table[rows, 3 * j + 2] == NOT_SELECTED]
                self._fail(j, unanswered, EdgedError(f"{type(e).__name__}: {e}"))
        self._one_done()

    def _start(self, j: int, stage: StageConfig) -> None:
        pipe, dets, table = self.pipe, self.dets, self.table
        info = self.info[stage.name] = {"model": stage.model, "status": "ok", "crops": 0,
                                        "carried": 0, "batches": []}
        table[:, 3 * j + 2] = NOT_SELECTED
        rows = select(dets, stage)
        model = pipe._models(stage.model)
        if model is not None:
            info["variant"] = model.active_variant or None
        reason = pipe.shed.get(stage.name)
        if reason is not None:
            table[rows, 3 * j + 2] = SHED
            info.update(status="shed", reason=reason)
            return
        if model is None:
            self._fail(j, rows, Unavailable(f"model {stage.model!r} is not served"))
            return
        if not rows.size:
            return
        if not model.ready:
            detail = f": {model.error}" if model.error else ""
            self._fail(j, rows, Unavailable(f"model {stage.model!r} is {model.state}{detail}"))
            return
        todo = rows
        if self.stream is not None and stage.reinfer_interval > 0:
            todo = self._carry(j, stage, rows)
        if not todo.size:
            return
        info["crops"] = int(todo.size)
        frame = self.prepared.frame
        assert frame is not None
        pre = model.cfg.preprocess
        fit = (pre.width, pre.height) if pre is not None else None
        crops = [cut(frame, dets[r], stage, fit) for r in todo]
        step = model.cfg.max_batch_size
        for k in range(0, len(todo), step):
            chunk = todo[k:k + step]
            try:
                prepared = _stage_request(model, crops[k:k + step], self.prepared.color, stage)
            except EdgedError as e:
                self._fail(j, chunk, e)
                continue
            except Exception as e:  # e.g. OpenCV refusing a crop: those boxes failed
                self._fail(j, chunk, EdgedError(f"preprocessing the crops for model "
                                                f"{stage.model!r} failed: "
                                                f"{type(e).__name__}: {e}"))
                continue
            self.pending += 1
            try:
                model.submit(prepared, functools.partial(self._stage_done, j, stage, chunk),
                             arrival=time.monotonic(), priority=self.priority,
                             deadline=self.deadline)
            except EdgedError as e:
                self.pending -= 1
                self._fail(j, chunk, e)

    def _carry(self, j: int, stage: StageConfig, rows: np.ndarray) -> np.ndarray:
        """Fill in the results tracks carry; the rows still to classify."""
        assert self.stream is not None
        dets, table, results = self.dets, self.table, self.pipe.results
        todo = []
        for r in rows:
            track = int(dets[r, 6])
            kept = None
            if track >= 0:
                kept = results.carried(self.stream, stage.name, track, _area(dets[r]),
                                       self.frame_no, stage.reinfer_interval,
                                       stage.reinfer_area_growth)
            if kept is None:
                todo.append(r)
            else:
                table[r, 3 * j:3 * j + 3] = (kept.cls, kept.score, CARRIED)
        self.info[stage.name]["carried"] = int(rows.size - len(todo))
        return np.asarray(todo, np.int64)

    def _stage_done(self, j: int, stage: StageConfig, rows: np.ndarray,
                    outcome: Result | EdgedError) -> None:
        if isinstance(outcome, EdgedError):
            self._fail(j, rows, outcome)
        else:
            try:
                self._read(j, stage, rows, outcome)
            except Exception as e:  # an output the stage cannot read: those boxes failed
                self._fail(j, rows, EdgedError(f"stage {stage.name!r}: cannot read model "
                                               f"{stage.model!r}'s output: {e}"))
        self._one_done()

    def _read(self, j: int, stage: StageConfig, rows: np.ndarray, r: Result) -> None:
        outs = dict(r.outputs)
        name = stage.output or (r.outputs[0][0] if r.outputs else None)
        arr = outs.get(name) if name is not None else None
        if arr is None or arr.shape[0] < rows.size:
            raise ValueError(f"no output {name!r} with {rows.size} rows")
        cls, score = read_scores(arr[:rows.size], stage.activation)
        self.table[rows, 3 * j] = cls
        self.table[rows, 3 * j + 1] = score
        self.table[rows, 3 * j + 2] = FRESH
        info = self.info[stage.name]
        info["variant"] = r.variant
        info["batches"].append(r.batch)
        info["queue_us"] = max(info.get("queue_us", 0), int(r.queue_s * 1e6))
        info["compute_us"] = max(info.get("compute_us", 0), int(r.compute_s * 1e6))
        if self.stream is not None and stage.reinfer_interval > 0:
            for k, row in enumerate(rows):
                track = int(self.dets[row, 6])
                if track >= 0:
                    self.pipe.results.keep(self.stream, stage.name, track, int(cls[k]),
                                           float(score[k]), _area(self.dets[row]),
                                           self.frame_no)

    def _fail(self, j: int, rows: np.ndarray, err: EdgedError) -> None:
        """Boxes of stage ``j`` with no label because of ``err`` (said in the header):
        failed, or shed when the governor's shedding refused them."""
        stage = self.pipe.cfg.stages[j]
        info = self.info.setdefault(stage.name, {"model": stage.model, "crops": 0,
                                                 "carried": 0, "batches": []})
        if isinstance(err, Shed):  # the governor sheds the stage model's priority
            self.table[rows, 3 * j + 2] = SHED
            info.update(status="shed", reason=str(err))
        else:
            self.table[rows, 3 * j + 2] = FAILED
            info.update(status="failed", error=f"{err.status}: {err}")

    def _one_done(self) -> None:
        self.pending -= 1
        if self.pending == 0:
            self._answer(None)

    def _answer(self, err: EdgedError | None) -> None:
        pipe = self.pipe
        if self.deadline is not None:
            pipe.usage.answered(self.arrival, self.deadline)
        if err is not None:
            self.respond(err)
            return
        det = self.det
        assert det is not None
        detector = pipe.detector
        base = detector.detections_header(self.dets) if detector is not None else {}
        stages = {}
        for j, s in enumerate(pipe.cfg.stages):
            pipe.answered(s.name, self.table[:, 3 * j + 2])
            stages[s.name] = {**_stage_labels(s), **self.info[s.name]}
        header = {**base, "columns": [*base.get("columns", []), *pipe.stage_columns()],
                  "stages": stages, "states": dict(enumerate(STATES))}
        rows = np.hstack([self.dets.astype(np.float32, copy=False), self.table])
        self.respond(Result(det.variant, det.outputs, det.queue_s, det.compute_s, det.batch,
                            rows, header))


def _stage_request(model: Model, crops: list[np.ndarray], color: str,
                   stage: StageConfig) -> Prepared:
    """One request of ``len(crops)`` rows for the stage's model, each row made by the
    model's own preprocessing (``contrast = "border"`` crops are grey)."""
    src = color if crops[0].ndim == 3 else "bgr"
    parts = [model.prepare_frame(c, src, {}) for c in crops]
    feeds = {k: np.concatenate([p.feeds[k] for p in parts]) for k in parts[0].feeds}
    return Prepared(feeds, len(parts), batch_key(feeds),
                    outputs=[stage.output] if stage.output else None)


def _area(row: np.ndarray) -> float:
    return float(max(row[2] - row[0], 0.0) * max(row[3] - row[1], 0.0))
