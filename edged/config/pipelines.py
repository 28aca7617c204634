"""``[[models]] kind = "pipeline"``: a detector, then stages classifying its boxes' crops.

Why a table of its own and not keys of a model: a pipeline computes nothing itself. It
names models of the same file (a detection model first, then one model per stage), each
an ordinary model with its own variants, ladder, checks and metrics, so a stage's crops
batch with every other request of that model. What is read here is only the wiring:
which boxes a stage crops and how, how long a track's result is reused, and in which
order the governor and the load step the stages down. Everything that can be checked
without opening a model is checked once, here, every problem naming its key
(``check_pipelines``: unknown models, a first stage that is not a detector, a stage that
is one, cycles, a step-down order that misses or repeats a member).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from edged.config.models import ModelConfig
from edged.config.overload import OverloadConfig
from edged.config.postprocess import labels_from_table
from edged.config.schema import Table

KIND = "pipeline"
#: the member name the detector has in ``step_down_order``
DETECTOR = "detector"
#: how a stage turns its model's output row into a class and a score
ACTIVATIONS = ("softmax", "sigmoid", "none")
#: ``contrast = "border"``: each crop becomes its colour distance from the crop's border
CONTRASTS = ("none", "border")
#: a stage's name becomes reply columns (``<name>_class``): a plain identifier
_STAGE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,31}$")


def _unit(v: float) -> str | None:
    return None if 0.0 <= v <= 1.0 else "must be between 0 and 1"


@dataclass(frozen=True)
class StageConfig:
    """``[[models.stages]]``: one model run on the crops of the boxes it selects."""

    name: str
    model: str
    #: detector classes whose boxes are cropped (None: every class)
    classes: tuple[int, ...] | None = None
    min_score: float = 0.0
    #: K: at most this many boxes of a frame are cropped (the best first)
    max_crops: int = 8
    #: fraction of the box's width and height added on each side before cropping
    padding: float = 0.0
    #: widen the shorter side to a square around the box's centre (classifiers trained on
    #: square, centred images)
    square: bool = False
    contrast: str = "none"
    #: the model output read (None: its first)
    output: str | None = None
    activation: str = "softmax"
    labels: tuple[str, ...] | None = None
    #: the governor and the load may shed this stage (after stepping it down its ladder)
    optional: bool = True
    #: with a stream: a track's result is reused for this many frames (0: never reused)
    reinfer_interval: int = 0
    #: ... unless its box's area grew by this factor since it was classified
    reinfer_area_growth: float = 1.2

    def label(self, cls: int) -> str:
        labels = self.labels
        return labels[cls] if labels is not None and 0 <= cls < len(labels) else str(cls)


@dataclass(frozen=True)
class PipelineConfig:
    name: str
    #: the first stage: a detection model of this config
    detector: str
    stages: tuple[StageConfig, ...]
    #: the members the governor and the load step down first, stage names and
    #: ``"detector"``: each is walked down its ladder (an optional stage is then shed)
    #: before the next one moves
    step_down_order: tuple[str, ...] = ()
    #: walking that order for load (``step_down`` None until ``load_config`` resolves it:
    #: on when a Frigate endpoint serves the pipeline, else off unless ``step_down = true``)
    overload: OverloadConfig = field(default_factory=lambda: OverloadConfig(step_down=False))

    @property
    def models(self) -> tuple[str, ...]:
        """Every model the pipeline runs, the detector first."""
        return (self.detector, *(s.model for s in self.stages))

    def member_model(self, member: str) -> str:
        """The model of a ``step_down_order`` member (a stage's name or ``"detector"``)."""
        if member == DETECTOR:
            return self.detector
        return next(s.model for s in self.stages if s.name == member)


def is_pipeline(t: Table) -> bool:
    """A ``[[models]]`` entry of kind ``pipeline`` (read by ``read_pipeline``)."""
    return t.data.get("kind") == KIND


def _stage(t: Table) -> StageConfig | None:
    name = t.get("name", str, check=lambda n: None if _STAGE_NAME.match(n) else
                 "must be a letter then letters, digits or _ (at most 32): it names reply "
                 "columns such as <name>_class")
    if name == DETECTOR:
        t.problem("name", f"{DETECTOR!r} is the detector's name in step_down_order")
        name = None
    model = t.get("model", str, check=lambda n: None if n.strip() else "must not be empty")
    classes = t.get_list("classes", int, None)
    if classes is not None and (not classes or any(c < 0 for c in classes)):
        t.problem("classes", f"must list class ids >= 0 (omit it for every class); got "
                  f"{classes}")
        classes = None
    cfg = StageConfig(
        name=name or "",
        model=model or "",
        classes=tuple(classes) if classes is not None else None,
        min_score=t.get("min_score", float, 0.0, check=_unit),
        max_crops=t.get("max_crops", int, 8, check=lambda v: None if 1 <= v <= 1000 else
                        "must be between 1 and 1000"),
        padding=t.get("padding", float, 0.0, check=lambda v: None if 0.0 <= v <= 2.0 else
                      "must be between 0 and 2 (a fraction of the box on each side)"),
        square=t.get("square", bool, False),
        contrast=t.get("contrast", str, "none", choices=CONTRASTS),
        output=t.get("output", str, None),
        activation=t.get("activation", str, "softmax", choices=ACTIVATIONS),
        labels=labels_from_table(t),
        optional=t.get("optional", bool, True),
        reinfer_interval=t.get("reinfer_interval", int, 0, check=lambda v: None if v >= 0
                               else "must be >= 0 (0: classify on every frame)"),
        reinfer_area_growth=t.get("reinfer_area_growth", float, 1.2,
                                  check=lambda v: None if v > 1.0 else "must be > 1"),
    )
    t.done()
    return cfg if name and model else None


def read_pipeline(t: Table) -> PipelineConfig | None:
    """One ``[[models]]`` entry of kind ``pipeline`` (problems go to ``t.problems``)."""
    t.get("kind", str, choices=(KIND,))
    name = t.get("name", str, check=lambda n: None if n.strip() else "must not be empty")
    detector = t.get("detector", str, check=lambda n: None if n.strip() else
                     "must not be empty")
    stage_tables = t.tables("stages", required=True)
    stages = [s for s in (_stage(st) for st in stage_tables) if s]
    seen: set[str] = set()
    for s in stages:
        if s.name in seen:
            t.problem("stages", f"stage name {s.name!r} is used twice")
        seen.add(s.name)
    members = [s.name for s in stages]
    default_order = ([s.name for s in stages if s.optional]
                     + [s.name for s in stages if not s.optional] + [DETECTOR])
    order = t.get_list("step_down_order", str, None)
    if order is not None:
        known = [*members, DETECTOR]
        unknown = [m for m in order if m not in known]
        twice = sorted({m for m in order if order.count(m) > 1})
        missing = [m for m in known if m not in order]
        if unknown:
            t.problem("step_down_order", f"{', '.join(map(repr, unknown))}: not a stage of "
                      f"this pipeline (its members: {', '.join(known)})")
        if twice:
            t.problem("step_down_order", f"{', '.join(map(repr, twice))} named twice")
        if missing and not unknown:
            t.problem("step_down_order", f"must name every member once; missing "
                      f"{', '.join(map(repr, missing))}")
    overload_t = t.table("overload")
    overload = OverloadConfig.from_table(overload_t)  # resolved by load_config
    t.done()
    if not name or not detector or not stages or len(stages) != len(stage_tables):
        return None
    return PipelineConfig(name=name, detector=detector, stages=tuple(stages),
                          step_down_order=tuple(order) if order is not None
                          else tuple(default_order), overload=overload)


def check_pipelines(root: Table, entries: Sequence[Table],
                    pipelines: Sequence[PipelineConfig], models: Sequence[ModelConfig]) -> None:
    """What needs the whole file: every name a pipeline uses is a model of it, the first
    stage is a detector, no stage is one, and no pipeline contains itself.

    ``entries`` are the ``[[models]]`` tables, so each problem names the entry's key
    (``models[2].stages[0].model``)."""
    by_model = {m.name: m for m in models}
    by_pipe = {p.name: p for p in pipelines}
    key_of = {str(e.data.get("name")): e.path for e in entries if is_pipeline(e)}
    known = ", ".join([*by_model, *by_pipe]) or "none"
    for p in pipelines:
        where = key_of.get(p.name, "models")
        refs = [("detector", p.detector), *((f"stages[{i}].model", s.model)
                                            for i, s in enumerate(p.stages))]
        for key, ref in refs:
            full = f"{where}.{key}"
            cycle = _cycle(p.name, ref, by_pipe)
            if cycle:
                root.problem(full, f"{' -> '.join(map(repr, cycle))} is a cycle: a pipeline "
                             "cannot run itself")
            elif ref in by_pipe:
                root.problem(full, f"{ref!r} is a pipeline; pipelines do not nest (a stage "
                             "runs an ordinary model)")
            elif ref not in by_model:
                root.problem(full, f"unknown model {ref!r}; models in this config: {known}")
        det = by_model.get(p.detector)
        if det is not None and det.postprocess is None:
            root.problem(f"{where}.detector", f"model {p.detector!r} is not a detection model "
                         "(no [models.postprocess] kind = \"detect\"): the first stage finds "
                         "the boxes the other stages crop")
        for i, s in enumerate(p.stages):
            m = by_model.get(s.model)
            if m is None:
                continue
            key = f"{where}.stages[{i}].model"
            if m.postprocess is not None:
                root.problem(key, f"model {s.model!r} is a detection model; a stage classifies "
                             "each crop (one class and score per box)")
            elif m.preprocess is None:
                root.problem(key, f"model {s.model!r} has no [models.preprocess]: a stage makes "
                             "its model's tensor from each crop with it")


def _cycle(start: str, ref: str, by_pipe: dict[str, PipelineConfig]) -> list[str] | None:
    """The path start -> ref -> ... -> start when ``ref`` leads back to ``start``."""
    path = [start, ref]
    seen = {start}
    stack = [(ref, path)]
    while stack:
        name, path = stack.pop()
        if name == start:
            return path
        if name in seen or name not in by_pipe:
            continue
        seen.add(name)
        stack.extend((r, [*path, r]) for r in by_pipe[name].models)
    return None
