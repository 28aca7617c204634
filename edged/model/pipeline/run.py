"""One frame through a pipeline: the detector's answer, then each stage's on its crops.

Why apart from ``pipeline``: the served pipeline (``pipeline.Pipeline``) is what rooms,
the registry and the governor hold, long-lived; a ``FrameRun`` lives for one request and
owns its answer. It reads of its pipeline only what ``RunOwner`` lists, so the two files
do not import each other.

Nothing is silently missing: each box says per stage whether its label is ``fresh``,
``carried`` (reused from its track), ``not_selected`` (not one of the stage's classes,
under its ``min_score``, or beyond its K), ``failed`` (the stage's model is not served,
not ready, or failed the batch: the header says why) or ``shed`` (the governor or the
load gave the stage up: the header says which).

Every method runs on the event loop (the batchers answer there), so a run needs no lock;
cropping is slicing plus the stage model's own preprocessing of a small image.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from edged.batching.queue import Respond, Result
from edged.config.pipelines import PipelineConfig, StageConfig
from edged.errors import EdgedError, Shed, Unavailable
from edged.model.contract import Prepared, batch_key
from edged.model.model import Model
from edged.model.pipeline.crops import cut, read_scores, select
from edged.model.pipeline.reuse import TrackResults
from edged.model.usage import ModelUsage

log = logging.getLogger("edged.model.pipeline")

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


class RunOwner(Protocol):
    """What a run reads of the pipeline it belongs to (``pipeline.Pipeline``)."""

    name: str
    cfg: PipelineConfig
    #: stage -> why it is shed now
    shed: dict[str, str]
    results: TrackResults
    #: some stage reuses a track's result; each stage's ``reinfer_interval``
    reuse: bool
    intervals: dict[str, int]
    usage: ModelUsage

    @property
    def detector(self) -> Model | None: ...

    def member(self, model: str) -> Model | None: ...

    def stage_columns(self) -> list[str]: ...

    def answered(self, stage: str, states: np.ndarray) -> None: ...

    def untracked(self, boxes: int) -> None: ...


def stage_labels(s: StageConfig) -> dict[str, Any]:
    """A stage's entry in a reply header before its run's details: its model and labels."""
    return {"model": s.model, **({"labels": dict(enumerate(s.labels))} if s.labels else {})}


class FrameRun:
    """One frame through the pipeline: the detector's answer, then every stage's."""

    def __init__(self, pipe: RunOwner, prepared: PipelinePrepared, respond: Respond,
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
        if tracked and pipe.reuse:
            self.stream = self.prepared.stream
            self.frame_no = pipe.results.next_frame(self.stream, pipe.intervals)
            pipe.untracked(int((dets[:, 6] < 0).sum()))
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
        model = pipe.member(stage.model)
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
                prepared = stage_request(model, crops[k:k + step], self.prepared.color, stage)
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
            stages[s.name] = {**stage_labels(s), **self.info[s.name]}
        header = {**base, "columns": [*base.get("columns", []), *pipe.stage_columns()],
                  "stages": stages, "states": dict(enumerate(STATES))}
        rows = np.hstack([self.dets.astype(np.float32, copy=False), self.table])
        self.respond(Result(det.variant, det.outputs, det.queue_s, det.compute_s, det.batch,
                            rows, header))


def stage_request(model: Model, crops: list[np.ndarray], color: str,
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
