"""Pipelines before any model runs: the config (every bad one refused at load, naming its
key), and the pure parts: which boxes a stage reads, the crops, the track-reuse rule, the
step-down plan."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.paths import ROOT
from support.pipelines import EXAMPLE, example_models, pipeline_config

from edged.config.file import load_config
from edged.config.pipelines import StageConfig
from edged.errors import ConfigError
from edged.model.pipeline.crops import (
    border_contrast,
    box_region,
    crop_window,
    cut,
    read_scores,
    select,
)
from edged.model.pipeline.plan import StepPlan
from edged.model.pipeline.reuse import TrackResults


def problems(tmp: Path, pipelines: str, models: str | None = None) -> list[str]:
    with pytest.raises(ConfigError) as e:
        load_config(pipeline_config(tmp, extra=pipelines, models=models))
    return e.value.problems


def one(probs: list[str], key: str) -> str:
    """The one problem naming ``key`` (its message after the key)."""
    hits = [p for p in probs if f": {key}: " in p]
    assert len(hits) == 1, (key, probs)
    return hits[0].split(f": {key}: ", 1)[1]


def pipe(name: str, detector: str, *stages: str, extra: str = "") -> str:
    """A pipeline entry; each stage ``"name=model"``."""
    text = f'[[models]]\nname = "{name}"\nkind = "pipeline"\ndetector = "{detector}"\n{extra}'
    for s in stages:
        sname, model = s.split("=")
        text += f'[[models.stages]]\nname = "{sname}"\nmodel = "{model}"\n'
    return text


# the example's entries: models[0] digits-det, models[1] digits, models[2] digits-reader;
# a test's own pipelines follow from models[4]


def test_the_shipped_example_loads_with_its_pipeline() -> None:
    cfg = load_config(EXAMPLE)
    (p,) = cfg.pipelines
    assert (p.name, p.detector, p.models) == ("digits-reader", "digits-det",
                                              ("digits-det", "digits-crops"))
    (s,) = p.stages
    assert (s.max_crops, s.padding, s.square, s.contrast, s.reinfer_interval) == \
        (16, 0.1, True, "border", 10)
    assert p.step_down_order == ("digit", "detector")
    assert cfg.model("digits-reader") is None and cfg.pipeline("digits-reader") is p


def test_a_first_stage_that_is_not_a_detector_is_refused(tmp_path: Path) -> None:
    msg = one(problems(tmp_path, pipe("p", "digits", "d=digits")), "models[4].detector")
    assert "'digits' is not a detection model" in msg


def test_a_cycle_is_refused_naming_each_key_on_it(tmp_path: Path) -> None:
    probs = problems(tmp_path, pipe("a", "digits-det", "x=b") + pipe("b", "a", "y=digits")
                     + pipe("c", "digits-det", "z=c"))
    assert one(probs, "models[4].stages[0].model").startswith("'a' -> 'b' -> 'a' is a cycle")
    assert one(probs, "models[5].detector").startswith("'b' -> 'a' -> 'b' is a cycle")
    assert one(probs, "models[6].stages[0].model").startswith("'c' -> 'c' is a cycle")


def test_unknown_models_and_nesting_are_refused(tmp_path: Path) -> None:
    probs = problems(tmp_path, pipe("p", "nope", "d=digitz") + pipe("q", "digits-det", "e=p"))
    assert one(probs, "models[4].detector").startswith("unknown model 'nope'; models in this "
                                                       "config: digits-det, digits-crops, "
                                                       "digits")
    assert "unknown model 'digitz'" in one(probs, "models[4].stages[0].model")
    assert "'p' is a pipeline; pipelines do not nest" in one(probs, "models[5].stages[0].model")


def test_a_stage_must_classify_crops_with_its_own_preprocessing(tmp_path: Path) -> None:
    raw = (f'[[models]]\nname = "raw"\n[[models.variants]]\nname = "v"\n'
           f'backend = "onnxruntime"\npath = "{ROOT}/models/digits/small-fp32.onnx"\n')
    probs = problems(tmp_path, raw + pipe("p", "digits-det", "a=digits-det", "b=raw"))
    assert "is a detection model; a stage classifies each crop" in one(
        probs, "models[5].stages[0].model")
    assert "has no [models.preprocess]" in one(probs, "models[5].stages[1].model")


def test_stage_keys_are_checked_each_naming_its_key(tmp_path: Path) -> None:
    bad = pipe("p", "digits-det", extra='step_down_order = ["d", "detector", "x", "d"]\n') + (
        '[[models.stages]]\nname = "d"\nmodel = "digits"\nmax_crop = 3\nmax_crops = 0\n'
        'padding = -1.0\ncontrast = "auto"\nactivation = "relu"\nreinfer_area_growth = 1.0\n'
        '[[models.stages]]\nname = "9bad"\nmodel = "digits"\n'
        '[[models.stages]]\nname = "detector"\nmodel = "digits"\n')
    probs = problems(tmp_path, bad)
    s = "models[4].stages[0]"
    assert "unknown key (did you mean 'max_crops'?)" in one(probs, f"{s}.max_crop")
    assert "must be between 1 and 1000" in one(probs, f"{s}.max_crops")
    assert "between 0 and 2" in one(probs, f"{s}.padding")
    assert "must be one of 'none', 'border'" in one(probs, f"{s}.contrast")
    assert "must be one of 'softmax', 'sigmoid', 'none'" in one(probs, f"{s}.activation")
    assert "must be > 1" in one(probs, f"{s}.reinfer_area_growth")
    assert "names reply columns" in one(probs, "models[4].stages[1].name")
    assert "the detector's name in step_down_order" in one(probs, "models[4].stages[2].name")
    order = [p for p in probs if ": models[4].step_down_order: " in p]
    assert any("'x': not a stage of this pipeline" in p for p in order), probs
    assert any("'d' named twice" in p for p in order), probs


def test_a_missing_member_of_the_order_a_kind_typo_and_a_name_clash(tmp_path: Path) -> None:
    probs = problems(tmp_path, pipe("p", "digits-det", "d=digits",
                                    extra='step_down_order = ["detector"]\n')
                     + pipe("digits", "digits-det", "e=digits")
                     + '[[models]]\nname = "q"\nkind = "pipelin"\n')
    assert "must name every member once; missing 'd'" in one(probs, "models[4].step_down_order")
    assert "model name 'digits' is used twice" in one(probs, "models")
    assert "must be one of 'model', 'pipeline'" in one(probs, "models[6].kind")


def test_serve_refuses_a_bad_pipeline_at_load_naming_the_key(tmp_path: Path) -> None:
    cfg = pipeline_config(tmp_path, extra=pipe("p", "digits", "d=nope"))
    r = subprocess.run([sys.executable, "-m", "edged", "serve", "--config", str(cfg)],
                       capture_output=True, text=True, timeout=60, cwd=str(ROOT))
    assert r.returncode == 4, r.stderr  # a bad config: the CLI's code 4
    assert "models[4].detector: model 'digits' is not a detection model" in r.stderr
    assert "models[4].stages[0].model: unknown model 'nope'" in r.stderr


# -- the pure parts ------------------------------------------------------------------------

DETS = np.array([[0, 0, 10, 10, 0.9, 1], [20, 0, 30, 10, 0.8, 2], [40, 0, 50, 10, 0.7, 1],
                 [60, 0, 70, 10, 0.2, 1], [80, 0, 90, 10, 0.6, 3]], np.float32)


def test_a_stage_reads_its_classes_above_its_score_at_most_k_best_first() -> None:
    assert select(DETS, StageConfig("s", "m")).tolist() == [0, 1, 2, 3, 4]
    assert select(DETS, StageConfig("s", "m", min_score=0.5, max_crops=3)).tolist() == [0, 1, 2]
    assert select(DETS, StageConfig("s", "m", classes=(1, 3), min_score=0.5)).tolist() == [0, 2, 4]
    assert select(DETS, StageConfig("s", "m", classes=(1,), max_crops=1)).tolist() == [0]
    assert select(DETS[:0], StageConfig("s", "m")).tolist() == []


def test_crops_are_squared_and_padded_with_the_boxs_own_border_colour() -> None:
    box = np.array([10, 20, 30, 60], np.float32)  # 20 x 40
    assert crop_window(box, StageConfig("s", "m")) == (10, 20, 30, 60)
    assert crop_window(box, StageConfig("s", "m", padding=0.25)) == (5, 10, 35, 70)
    assert crop_window(box, StageConfig("s", "m", square=True)) == (0, 20, 40, 60)
    assert box_region(box, 25, 50) == (10, 20, 25, 50)  # the box's pixels, clipped
    # a grey sign (the box) on a red photograph: the crop holds the sign and its colour,
    # never the photograph, also where the window runs past the frame
    frame = np.zeros((50, 50, 3), np.uint8)
    frame[:] = (0, 0, 255)
    frame[20:60, 10:30] = 200
    frame[30:50, 18:22] = 20  # a dark stroke inside the box
    crop = cut(frame, np.array([10, 20, 30, 50], np.float32),
               StageConfig("s", "m", square=True, padding=0.1))
    assert crop.shape == (36, 36, 3)
    assert not (crop == (0, 0, 255)).all(axis=2).any()  # no photograph
    assert (crop[0, 0] == 200).all() and (crop[-1, -1] == 200).all()
    assert cut(frame, np.array([49.6, 49.6, 49.9, 49.9]), StageConfig("s", "m")).shape == \
        (1, 1, 3)  # at least a pixel
    # contrast = "border": the sign is the background (0), the stroke the ink (255)
    g = cut(frame, np.array([10, 20, 30, 50], np.float32),
            StageConfig("s", "m", square=True, padding=0.1, contrast="border"))
    assert g.shape == (36, 36) and g.max() == 255 and g[0, 0] == 0 and g[3, 18] == 0
    # grey frames stay grey, one channel or none
    grey = frame[:, :, 0].copy()
    assert cut(grey, box, StageConfig("s", "m", square=True)).shape == (40, 40)
    assert cut(grey[:, :, None], box, StageConfig("s", "m", square=True)).shape == (40, 40, 1)
    # a crop over twice the stage input is shrunk first, aspect kept
    big = cut(np.full((720, 1280, 3), 90, np.uint8), np.array([100, 100, 500, 300.0]),
              StageConfig("s", "m", square=True), (28, 28))
    assert big.shape == (56, 56, 3)


def test_border_contrast_makes_ink_bright_whatever_its_colour() -> None:
    dark_on_light = np.full((20, 20, 3), 220, np.uint8)
    dark_on_light[5:15, 8:12] = (20, 30, 200)
    light_on_dark = 255 - dark_on_light
    for crop in (dark_on_light, light_on_dark):
        g = border_contrast(crop)
        assert g.shape == (20, 20) and g.dtype == np.uint8
        assert g[10, 10] == 255 and g[0, 0] == 0
    assert not border_contrast(np.full((4, 4), 7, np.uint8)).any()


def test_scores_after_each_activation() -> None:
    logits = np.array([[1.0, 3.0, 0.0], [0.0, 0.0, 5.0]], np.float32)
    cls, score = read_scores(logits, "softmax")
    assert cls.tolist() == [1, 2] and score[1] == pytest.approx(np.exp(5) / (2 + np.exp(5)))
    assert read_scores(logits, "none")[1].tolist() == [3.0, 5.0]
    assert read_scores(logits, "sigmoid")[1][0] == pytest.approx(1 / (1 + np.exp(-3)))


def test_a_track_is_carried_for_its_interval_unless_its_box_grows() -> None:
    t = TrackResults()
    intervals = {"s": 3}
    seen = []
    for f in range(1, 8):
        frame = t.next_frame("cam", intervals, now=float(f))
        area = 100.0 if f < 6 else 130.0  # grows by 1.3 on frame 6
        kept = t.carried("cam", "s", 7, area, frame, 3, 1.2)
        if kept is None:
            t.keep("cam", "s", 7, 4, 0.9, area, frame)
        seen.append("c" if kept else "f")
    # fresh on 1, carried 2-3, fresh on 4 (3 frames on), carried 5, fresh on 6 (grew)
    assert "".join(seen) == "fccfcfc"
    assert t.carried("other", "s", 7, 100.0, 1, 3, 1.2) is None  # streams do not mix


def test_track_results_are_bounded_like_the_stream_table() -> None:
    t = TrackResults(max_streams=10, idle_s=60.0)
    for i in range(100):
        frame = t.next_frame(f"s{i}", {"s": 5}, now=float(i))
        t.keep(f"s{i}", "s", 1, 0, 1.0, 1.0, frame)
    assert len(t) == 10
    t.next_frame("late", {"s": 5}, now=1000.0)
    assert len(t) == 1


def test_the_plan_steps_and_sheds_the_optional_stage_before_the_detector() -> None:
    cfg = load_config(EXAMPLE)
    ladders = {m.name: [v.name for v in m.variants] for m in cfg.models}
    plan = StepPlan(cfg.pipelines[0], ladders)
    assert plan.names == ["all heaviest", "digit: cnn-int8", "digit: shed",
                          "detector: det-int8", "detector: det128-fp32"]
    at = [plan.at(i) for i in range(len(plan) + 1)]
    assert [a.indexes["digits-crops"] for a in at] == [0, 1, 1, 1, 1]
    assert [a.indexes["digits-det"] for a in at] == [0, 0, 0, 1, 2]
    assert [sorted(a.shed) for a in at] == [[], [], ["digit"], ["digit"], ["digit"]]


def test_a_required_stage_is_stepped_down_but_never_shed(tmp_path: Path) -> None:
    text = example_models().replace('reinfer_interval = 10', 'optional = false')
    cfg = load_config(pipeline_config(tmp_path, models=text))
    ladders = {m.name: [v.name for v in m.variants] for m in cfg.models}
    plan = StepPlan(cfg.pipelines[0], ladders)
    assert "digit: shed" not in plan.names and not plan.at(len(plan)).shed


def test_a_large_crop_is_shrunk_to_twice_the_stage_input_first() -> None:
    frame = np.zeros((720, 1280, 3), np.uint8)
    frame[100:340, 200:440] = 200  # a 240 x 240 box
    box = np.array([200, 100, 440, 340], np.float32)
    assert cut(frame, box, StageConfig("s", "m")).shape == (240, 240, 3)
    small = cut(frame, box, StageConfig("s", "m"), fit=(28, 28))
    assert small.shape == (56, 56, 3) and small.min() == 200
    wide = cut(frame, np.array([0, 0, 600, 100], np.float32), StageConfig("s", "m"), (28, 28))
    assert wide.shape == (56, 336, 3)  # the aspect is kept; the model's resize stretches
    assert cut(frame, box, StageConfig("s", "m"), fit=(224, 224)).shape == (240, 240, 3)
