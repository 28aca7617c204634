"""``[[server.frigate]]``: endpoints speaking Frigate's ``zmq`` detector protocol.

Why a module of its own: the table has three modes (a configured detector, a configured
pipeline whose stage names each box, or the model Frigate sends) whose keys depend on each
other, and its cross-checks against the models and pipelines (a configured model must be a
detector; a pipeline's ``label_from`` stage must send ids Frigate's labelmap holds) run
after the ``[[models]]`` entries are read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from edged.config.layouts import FRIGATE_TYPES, normalize_type
from edged.config.schema import Table, positive, zmq_endpoint

if TYPE_CHECKING:
    from edged.config.models import ModelConfig
    from edged.config.pipelines import PipelineConfig

#: Frigate's labelmap holds ids 0..90 (then the user's ``labelmap:`` overrides); its camera
#: process looks every id up, so an id it lacks (with a score over 0.4) raises there
#: (docs/frigate.md, "Labelmap"). A sent model's classes and a pipeline stage's labels are
#: held against it.
FRIGATE_IDS = 91


@dataclass(frozen=True)
class FrigateConfig:
    """One ``[[server.frigate]]`` endpoint speaking Frigate's ``zmq`` detector protocol
    for one detection model or pipeline (docs/frigate.md)."""

    endpoint: str
    model: str
    #: with a pipeline ``model``: the stage whose class is each row's class id (the score
    #: stays the detector's); a row the stage did not label carries the detector's class
    label_from: str | None = None
    #: rows below this score are left out of the reply (None: the model's ``conf``)
    min_score: float | None = None
    #: model class id -> Frigate labelmap id; ids not listed pass through unchanged
    class_map: tuple[tuple[int, int], ...] = ()
    #: colour order of the tensors Frigate sends (its model ``input_pixel_format``)
    input_pixel_format: str = "rgb"
    #: Frigate's ``request_timeout_ms``: a request older than this is never computed
    timeout_ms: float = 200.0
    #: queue priority of these requests (0 = most important; a governor level may shed
    #: requests above a priority)
    priority: int = 1
    #: serve the model Frigate sends (no configured ``model``); ``model`` is then the
    #: name the transferred model is served under, ``frigate@ENDPOINT``
    accept_models: bool = False
    #: a model file larger than this is refused with an answer
    max_model_bytes: int = 256 << 20
    #: the Frigate model_type a sent model must fit (None: whichever type its graph fits)
    model_type: str | None = None
    #: build an INT8 rung for a sent model in the background (edged.delivery.rungs)
    int8_rung: bool = True
    #: frames Frigate sent that the rung is calibrated (3/4) and checked (1/4) on
    int8_frames: int = 48
    #: new model files one client may send a minute (the same bytes again never count)
    transfers_per_minute: int = 4


def _class_map(t: Table) -> tuple[tuple[int, int], ...]:
    """``class_map = { 0 = 0, 2 = 7 }``: TOML keys are strings, so digits are checked here."""
    raw = t.get("class_map", dict, {})
    pairs: list[tuple[int, int]] = []
    for k, v in (raw or {}).items():
        if not k.isdigit():
            t.problem(f"class_map.{k}", "keys are the model's class ids (integers >= 0)")
        elif isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 65535:
            t.problem(f"class_map.{k}", f"must be a Frigate labelmap id (0..65535); got {v!r}")
        else:
            pairs.append((int(k), v))
    return tuple(sorted(pairs))


def read_frigate(t: Table) -> FrigateConfig | None:
    endpoint = t.get("endpoint", str, check=zmq_endpoint)
    accept = t.get("accept_models", bool, False)
    model = t.get("model", str, None)
    if accept and model is not None:
        t.problem("model", "give either model (a configured detector) or accept_models = "
                  "true (the model Frigate sends), not both")
    elif not accept and model is None:
        t.problem("model", "missing: name a configured detection model, or set "
                  "accept_models = true to serve the model Frigate sends")
    if accept and endpoint:
        model = f"frigate@{endpoint}"
    model_type = t.get("model_type", str, None,
                       check=lambda v: None if normalize_type(v) else
                       f"must be one of Frigate's model types: {', '.join(FRIGATE_TYPES)} "
                       "(or yolo-generic)")
    if model_type is not None and not accept:
        t.problem("model_type", "applies with accept_models = true only (a configured model "
                  "decodes as its [models.postprocess] says)")
    label_from = t.get("label_from", str, None,
                       check=lambda v: None if v.strip() else "must not be empty")
    if label_from is not None and accept:
        t.problem("label_from", "applies to an endpoint serving a configured pipeline "
                  "(model = \"<pipeline>\"); accept_models serves the model Frigate sends, "
                  "which has no stages")
    min_score = t.get("min_score", float, None,
                      check=lambda v: None if 0.0 <= v <= 1.0 else "must be between 0 and 1")
    cfg = FrigateConfig(
        endpoint=endpoint or "", model=model or "", label_from=label_from,
        min_score=min_score,
        class_map=_class_map(t),
        input_pixel_format=t.get("input_pixel_format", str, "rgb", choices=("rgb", "bgr")),
        timeout_ms=t.get("timeout_ms", float, 200.0, check=positive),
        priority=t.get("priority", int, 1,
                       check=lambda v: None if 0 <= v <= 1000 else "must be 0..1000"),
        accept_models=bool(accept),
        max_model_bytes=t.get("max_model_bytes", int, 256 << 20, check=positive),
        model_type=normalize_type(model_type) if model_type else None,
        int8_rung=t.get("int8_rung", bool, True),
        int8_frames=t.get("int8_frames", int, 48,
                          check=lambda v: None if 4 <= v <= 1024 else "must be 4..1024"),
        transfers_per_minute=t.get("transfers_per_minute", int, 4,
                                   check=lambda v: None if 1 <= v <= 10000 else
                                   "must be 1..10000"),
    )
    t.done()
    return cfg if endpoint and model else None


def check_frigate(root: Table, frigate: tuple[FrigateConfig, ...], endpoints: tuple[str, ...],
                  models: list[ModelConfig], pipelines: Sequence[PipelineConfig] = ()) -> None:
    """Each Frigate endpoint serves a configured detection model, or a configured pipeline
    with ``label_from``, on an address of its own (not one of the native ``endpoints``)."""
    by_name = {m.name: m for m in models}
    by_pipe = {p.name: p for p in pipelines}
    seen = set(endpoints)
    for i, f in enumerate(frigate):
        key = f"server.frigate[{i}]"
        m = by_name.get(f.model)
        p = by_pipe.get(f.model)
        if f.accept_models:
            pass  # its model comes from Frigate (label_from is refused by read_frigate)
        elif p is not None:
            _check_label_from(root, key, f, p, by_name.get(p.detector))
        elif m is None:
            root.problem(f"{key}.model", f"no model or pipeline named {f.model!r}; models: "
                         f"{', '.join([*by_name, *by_pipe]) or 'none'}")
        elif m.postprocess is None:
            root.problem(f"{key}.model", f"model {f.model!r} is not a detection model (Frigate "
                         "wants boxes: give it [models.postprocess] kind = \"detect\")")
        if f.label_from is not None and m is not None:
            root.problem(f"{key}.label_from", f"{f.model!r} is not a pipeline: label_from names "
                         "the stage of a pipeline whose class each row carries (a model "
                         "answers its own classes)")
        if f.endpoint in seen:
            root.problem(f"{key}.endpoint", f"{f.endpoint} is already bound by another endpoint")
        seen.add(f.endpoint)


def _check_label_from(root: Table, key: str, f: FrigateConfig, p: PipelineConfig,
                      detector: ModelConfig | None) -> None:
    """A pipeline on a Frigate endpoint: ``label_from`` names one of its stages, whose ids
    (through ``class_map``) Frigate's labelmap holds and mean what the detector's same ids
    mean, since a row the stage did not label falls back to the detector's class."""
    stages = ", ".join(s.name for s in p.stages)
    if f.label_from is None:
        root.problem(f"{key}.label_from", f"missing: {f.model!r} is a pipeline; name the "
                     f"stage whose class Frigate gets (its stages: {stages}). Frigate's reply "
                     "has one class per box, so without it the stages' results would reach "
                     f"nobody: serve its detector {p.detector!r} instead")
        return
    stage = next((s for s in p.stages if s.name == f.label_from), None)
    if stage is None:
        root.problem(f"{key}.label_from", f"{f.label_from!r} is not a stage of pipeline "
                     f"{f.model!r} (its stages: {stages})")
        return
    if stage.labels is None:
        root.problem(f"{key}.label_from", f"stage {stage.name!r} names no labels (give it "
                     "labels or labels_file): Frigate shows each class id through its "
                     "labelmap, so edged must know the ids the stage sends to hold them "
                     f"against it (ids 0..{FRIGATE_IDS - 1}) and to print the labelmap")
        return
    class_map = dict(f.class_map)
    out = outside_labelmap(len(stage.labels), class_map)
    if out:
        root.problem(f"{key}.label_from", f"stage {stage.name!r} answers {len(stage.labels)} "
                     f"class ids (0..{len(stage.labels) - 1}); Frigate's labelmap holds ids "
                     f"0..{FRIGATE_IDS - 1} and its camera process fails on an id it lacks: "
                     f"ids {out[0]}..{out[-1]} are outside it. Map them with this endpoint's "
                     f"class_map (e.g. class_map = {{ {out[0]} = 0 }})")
    det_labels = detector.postprocess.labels if detector and detector.postprocess else None
    clash = fallback_clashes(det_labels, stage.labels, class_map)
    if det_labels is not None and clash:
        ids = ", ".join(f"{i} ({d!r} / {s!r})" for i, d, s in clash[:4])
        root.problem(f"{key}.label_from", f"a row stage {stage.name!r} did not label carries "
                     f"the detector {p.detector!r}'s class, and both reach Frigate through the "
                     f"one labelmap: Frigate ids {ids} would name a detector class and a stage "
                     "class differently (detector / stage). label_from needs a stage whose ids "
                     "mean what the detector's same ids mean")


def outside_labelmap(classes: int, class_map: dict[int, int]) -> list[int]:
    """The class ids of ``0..classes-1`` that, through ``class_map``, fall outside Frigate's
    labelmap (``FRIGATE_IDS``): the one rule for a sent model's classes and a stage's labels."""
    return [c for c in range(classes) if not 0 <= class_map.get(c, c) < FRIGATE_IDS]


def fallback_clashes(detector: tuple[str, ...] | dict[str, str] | None,
                     stage: tuple[str, ...], class_map: dict[int, int]
                     ) -> list[tuple[int, str, str]]:
    """Frigate ids (after ``class_map``) that a detector class and a stage class both reach
    with different names: ``(id, detector's name, stage's name)``, by id. A detector row
    falling back onto such an id would be shown with the stage's label. ``detector`` is its
    labels (a reply header's ``{"0": name}`` too); None or empty: nothing to compare."""
    if not detector:
        return []
    det = (dict(enumerate(detector)) if isinstance(detector, tuple)
           else {int(k): v for k, v in detector.items()})
    by_id = {class_map.get(c, c): name for c, name in enumerate(stage)}
    clash = {}
    for c, name in det.items():
        fid = class_map.get(c, c)
        if fid in by_id and by_id[fid] != name:
            clash[fid] = (fid, name, by_id[fid])
    return [clash[k] for k in sorted(clash)]
