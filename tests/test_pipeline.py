"""Pipelines through the real daemon, with the shipped models: the digit detector, then the
digit reader trained on its crops (models/digits-crops) on each box's crop
(examples/pipelines/digits-reader.toml; the first digits classifier, models/digits, is served
beside them and is the stage of the fault and load tests' pipelines).

Three daemons: the shipped example (plus a K = 2 pipeline and the KServe endpoint), one
whose stages' models are missing or fail (and whose load rule steps a pipeline down), and
one whose governor is pinned to levels by hand.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.daemons import Daemon, free_port, metric, metrics
from support.faults import make_batch_collapsing_model
from support.paths import ROOT
from support.pipelines import held_out, labels_param, pipeline_config, states
from support.sysfs import make_thermal_zone
from support.waits import wait_until

from edged.cli.status_text import format_status
from edged.client import InvalidArgument, build_infer
from edged.testing.scene_eval import iou
from edged.testing.scenes import camera_frame, moving_clip
from edged.testing.signs import sign_clip

pytest.importorskip("supervision", reason="track reuse needs the 'track' extra")
tg = pytest.importorskip("tritonclient.grpc", reason="the kserve extra is not installed")
th = pytest.importorskip("tritonclient.http", reason="the kserve extra is not installed")

READER = "digits-reader"
COLUMNS = ["x1", "y1", "x2", "y2", "score", "class", "digit_class", "digit_score",
           "digit_state"]

#: the same stage as the example's, reading at most 2 boxes of a frame
K2 = """
[[models]]
name = "reader-k2"
kind = "pipeline"
detector = "digits-det"
[[models.stages]]
name = "digit"
model = "digits-crops"
max_crops = 2
padding = 0.1
square = true
contrast = "border"
"""


@pytest.fixture(scope="module")
def pd(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("pipeline")
    for _ in range(3):  # free_port races other processes: take others on a clash
        g, h = free_port(), free_port()
        server = f'[server.kserve]\ngrpc = "127.0.0.1:{g}"\nhttp = "127.0.0.1:{h}"\n'
        try:
            d = Daemon(pipeline_config(tmp, extra=K2, server=server), tmp, metrics=True)
            break
        except RuntimeError as e:
            if "in use" not in str(e):
                raise
    d.grpc_url, d.http_url = f"127.0.0.1:{g}", f"127.0.0.1:{h}"  # type: ignore[attr-defined]
    yield d
    d.stop()


def ask_all(d: Daemon, model: str, frames: list[np.ndarray] | np.ndarray,
            **opts: Any) -> list[Any]:
    """Every frame to ``model``, pipelined (they batch in the daemon), replies in order."""
    out: list[Any] = [None] * len(frames)
    with d.client(timeout_s=60) as c:
        for i, f in enumerate(frames):
            c.send(*build_infer(model, f, id=i, **opts))
        for _ in frames:
            r = c.recv()
            assert r.ok, r.header
            out[r.header["id"]] = r
    return out


# -- the shipped pipeline ---------------------------------------------------------------


def test_the_shipped_pipeline_reads_the_held_out_scenes(pd: Daemon) -> None:
    from edged.detect.metrics_map import evaluate_map

    images, truth = held_out()
    alone = ask_all(pd, "digits-det", images)
    piped = ask_all(pd, READER, images)
    right = right_det = matched = 0
    labelled, detected = [], []
    for a, p, gt in zip(alone, piped, truth, strict=True):
        d = p.detections
        assert list(d.columns) == COLUMNS and p.variant == "det-fp32"
        # the pipeline's boxes are the detector's, each read afresh (<= K = 16 a frame); a
        # batch of other frames may move a score at the 0.25 threshold by a rounding error
        mine, theirs = d.rows[d.rows[:, 4] > 0.3, :6], a.detections.rows
        np.testing.assert_allclose(mine, theirs[theirs[:, 4] > 0.3], atol=1e-3)
        assert states(d, "digit") == ["fresh"] * len(d)
        stage = d.stages["digit"]
        assert (stage["status"], stage["variant"], stage["crops"]) == ("ok", "cnn-fp32", len(d))
        assert [d.stage_label("digit", k) for k in range(len(d))] == \
            [str(int(c)) for c in d.column("digit_class")]
        detected.append(d.rows[:, :6].copy())
        rows = d.rows[:, :6].copy()
        rows[:, 5] = d.column("digit_class")
        labelled.append(rows)
        if len(d) and len(gt):
            m = iou(d.rows[:, :4], gt[:, :4])
            for g in range(len(gt)):
                hit = np.flatnonzero(m[:, g] >= 0.5)
                if hit.size:
                    matched += 1
                    right += int(d.column("digit_class")[hit[0]] == gt[g, 4])
                    right_det += int(d.classes[hit[0]] == gt[g, 4])
    # docs/pipelines.md ("The shipped pipeline"): of the 171 digits the read boxes find, the
    # reader reads 98.2 % right (the detector's class 89.5 %), mAP 89.5 with its labels
    # against 80.8 with the detector's on the same boxes. Before the detector's fine-tuning
    # on round shapes: 166 of the 187 digits found at 0.3 (>= 170 before it trained on
    # photographs: 179 at 0.25)
    assert matched >= 160 and right / matched >= 0.95 and right > right_det, \
        (right, right_det, matched)
    mine, theirs = evaluate_map(labelled, truth).map50, evaluate_map(detected, truth).map50
    # 0.85, was 0.90 before the detector trained on photographs (89.0 here at conf 0.3)
    assert mine >= 0.85 and mine > theirs, (mine, theirs)


def test_crops_of_several_frames_and_streams_batch_at_the_stage(pd: Daemon) -> None:
    images, truth = held_out()
    busy = [i for i, t in enumerate(truth) if len(t) >= 3][:16]
    for _attempt in range(3):  # a loaded machine may hand the frames over one by one
        replies = []
        with pd.client(timeout_s=60) as c:
            for k, i in enumerate(busy):
                c.send(*build_infer(READER, images[i], id=k, stream=f"cam{k}"))
            replies = [c.recv() for _ in busy]
        assert all(r.ok for r in replies), [r.header for r in replies if not r.ok]
        stages = [r.detections.stages["digit"] for r in replies]
        assert all(s["crops"] == len(r.detections) and s["batches"] for s, r in
                   zip(stages, replies, strict=True))
        assert all(b <= 32 for s in stages for b in s["batches"])  # the stage's max_batch_size
        if any(max(s["batches"]) > s["crops"] for s in stages):
            return  # a batch held this frame's crops and others'
    pytest.fail(f"no stage batch held crops of more than one frame: {stages}")


def test_a_moving_object_is_read_once_per_interval_and_carried_between(pd: Daemon) -> None:
    def run(frames: list[np.ndarray], stream: str | None) -> list[Any]:
        out = []
        with pd.client(timeout_s=30) as c:
            for f in frames:  # in order, one at a time: a camera's frames
                out.append(c.infer(READER, f, **({"stream": stream} if stream else {}))
                           .detections)
        return out

    clip = moving_clip(30, label=6)
    dets = run(clip, "clip")
    assert all(len(d) == 1 for d in dets)
    assert len({int(d.column("track_id")[0]) for d in dets}) == 1  # one track throughout
    got = [d.stage_state("digit", 0) for d in dets]
    # reinfer_interval = 10: read on frames 0, 10 and 20, carried on the others
    assert got == (["fresh"] + ["carried"] * 9) * 3
    assert {d.stage_label("digit", 0) for d in dets} == {"6"}
    assert [d.stages["digit"]["crops"] for d in dets[:2]] == [1, 0]
    assert dets[1].stages["digit"]["carried"] == 1
    # the object comes closer on frame 15 (its box's area x2.25 > 1.2): read again there
    grown = run(moving_clip(30, label=6, grow_at=15), "closer")
    fresh = [k for k, d in enumerate(grown) if d.stage_state("digit", 0) == "fresh"]
    assert fresh == [0, 10, 15, 25]
    # without a stream nothing is tracked: every frame is read
    plain = run(clip[:5], None)
    assert [d.stage_state("digit", 0) for d in plain] == ["fresh"] * 5
    assert "track_id" not in plain[0].columns


@pytest.mark.parametrize("label", [4, 7])
def test_a_digit_moving_across_a_photograph_is_read_at_most_3_times(pd: Daemon,
                                                                     label: int) -> None:
    """Issue 41: a held-out digit on a sign moving across a photograph over 30 frames. The
    detector answered 2-4 overlapping boxes of different classes for it; the tracker kept
    one, the others were read afresh on every frame (13-19 reads). With one NMS across
    classes (the example's ``agnostic = true``) and every returned box able to start a
    track, it is read on frames 0, 10 and 20 (``reinfer_interval = 10``); a box left
    untracked is counted in ``edged_pipeline_untracked_boxes_total``."""
    clip, signs = sign_clip(30, label=label, name="coffee")
    stream = f"sign-{label}"
    before = metric(metrics(pd), "edged_pipeline_untracked_boxes_total", pipeline=READER)
    reads, untracked = [], 0
    with pd.client(timeout_s=30) as c:
        for k, (f, s) in enumerate(zip(clip, signs, strict=True)):
            d = c.infer(READER, f, stream=stream).detections
            untracked += int((d.column("track_id") < 0).sum()) if len(d) else 0
            for row in range(len(d)):
                cx = (d.column("x1")[row] + d.column("x2")[row]) / 2
                cy = (d.column("y1")[row] + d.column("y2")[row]) / 2
                on_sign = s[0] <= cx <= s[2] and s[1] <= cy <= s[3]
                if on_sign and d.stage_state("digit", row) == "fresh":
                    reads.append(k)
    assert len(reads) <= 3, reads
    assert reads[0] == 0
    counted = metric(metrics(pd), "edged_pipeline_untracked_boxes_total",
                     pipeline=READER) - before
    assert counted == untracked  # what the replies said, the metric counts


def test_a_frame_with_no_detection_answers_no_boxes_with_the_columns(pd: Daemon) -> None:
    grey = np.full((720, 1280, 3), 128, np.uint8)
    with pd.client() as c:
        r = c.infer(READER, grey)
    d = r.detections
    assert len(d) == 0 and list(d.columns) == COLUMNS and d.rows.shape == (0, 9)
    assert d.stages["digit"]["status"] == "ok" and d.stages["digit"]["crops"] == 0


def test_more_objects_than_k_reads_the_best_k_and_says_so_of_the_rest(pd: Daemon) -> None:
    frame = camera_frame((0, 3, 5, 7, 9))
    with pd.client() as c:
        r = c.infer("reader-k2", frame)
    d = r.detections
    assert len(d) == 5
    got = states(d, "digit")
    assert got == ["fresh", "fresh", "not_selected", "not_selected", "not_selected"]
    assert list(d.scores) == sorted(d.scores, reverse=True)  # the best two were read
    assert d.column("digit_class")[2:].tolist() == [-1, -1, -1]
    assert d.stage_label("digit", 4) is None
    assert d.stages["digit"]["crops"] == 2


def test_bad_requests_to_a_pipeline_get_specific_errors(pd: Daemon) -> None:
    with pd.client() as c:
        with pytest.raises(InvalidArgument, match=r"takes an image .* to crop; got float32"):
            c.infer(READER, np.zeros((1, 3, 160, 160), np.float32))
        with pytest.raises(InvalidArgument, match="conf"):
            c.infer(READER, camera_frame(), conf=2.0)
        with pytest.raises(InvalidArgument, match="has no input 'input'"):
            c.infer(READER, {"input": camera_frame()})
        with pytest.raises(InvalidArgument, match="unknown output"):
            c.infer(READER, camera_frame(), outputs=["nope"])
        r = c.infer("digits-det", camera_frame())  # the members still answer on their own
        assert len(r.detections) == 5 and r.detections.columns[-1] == "class"


def test_kserve_answers_the_stage_columns_with_a_labels_parameter(pd: Daemon) -> None:
    frame = camera_frame((1, 2, 4, 6, 8))
    g = tg.InferenceServerClient(pd.grpc_url)  # type: ignore[attr-defined]
    i = tg.InferInput("images", list(frame.shape), "UINT8")
    i.set_data_from_numpy(frame)
    r = g.infer(READER, [i])
    dets = r.as_numpy("detections")
    assert dets.shape == (5, 9)
    labels = labels_param(r)
    assert labels["columns"] == COLUMNS and labels["stages"]["digit"]["status"] == "ok"
    assert labels["states"]["0"] == "fresh" and set(dets[:, 8].tolist()) == {0.0}
    assert sorted(dets[:, 6].astype(int).tolist()) == [1, 2, 4, 6, 8]  # the digits read
    meta = g.get_model_metadata(READER, as_json=True)
    assert {"name": "detections", "datatype": "FP32", "shape": ["-1", "-1"]} in meta["outputs"]
    h = th.InferenceServerClient(pd.http_url)  # type: ignore[attr-defined]
    hi = th.InferInput("images", list(frame.shape), "UINT8")
    hi.set_data_from_numpy(frame)
    hr = h.infer(READER, [hi])
    params = hr.get_response()["parameters"]
    assert json.loads(params["labels"])["columns"] == COLUMNS
    np.testing.assert_allclose(hr.as_numpy("detections"), dets, atol=1e-4)


def test_models_op_and_status_show_the_pipeline_with_its_members(pd: Daemon) -> None:
    with pd.client() as c:
        listed = c.models().header["pipelines"]
    assert [p["name"] for p in listed] == [READER, "reader-k2"]
    status = pd.ctl({"op": "status"})
    (p,) = [p for p in status["pipelines"] if p["name"] == READER]
    assert p["stages"][0]["variants"] == ["cnn-fp32", "cnn-int8"]
    text = format_status(status)
    assert f"PIPELINE {READER}  ready" in text
    assert "  detector        digits-det    ready    [det-fp32] > det-int8 > det128-fp32" in text
    assert ("  stage digit     digits-crops  ready    [cnn-fp32] > cnn-int8  "
            "(optional, K=16, reused 10 frames)") in text
    assert "step-down order: digit, detector; position 0/4: all heaviest" in text
    m = metrics(pd)
    assert metric(m, "edged_pipeline_boxes_total", pipeline=READER, stage="digit",
                  state="carried") >= 50


# -- stage models missing or failing; the load rule ------------------------------------------

FAULTY = """
[[models]]
name = "gone"
[models.preprocess]
color = "gray"
width = 28
height = 28
[[models.variants]]
name = "v1"
backend = "onnxruntime"
path = "{missing}"

[[models]]
name = "broken"
max_batch_size = 8
[models.preprocess]
color = "gray"
width = 2
height = 2
[[models.variants]]
name = "v1"
backend = "onnxruntime"
path = "{collapse}"

[[models]]
name = "faulty"
kind = "pipeline"
detector = "digits-det"
[[models.stages]]
name = "digit"
model = "digits"
square = true
contrast = "border"
[[models.stages]]
name = "gone"
model = "gone"
[[models.stages]]
name = "broken"
model = "broken"

[[models]]
name = "loaded"
kind = "pipeline"
detector = "digits-det"
[models.overload]
step_down = true
window_s = 1.0
dwell_s = 60.0
[[models.stages]]
name = "digit"
model = "digits"
"""


@pytest.fixture(scope="module")
def fd(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("pipeline-faults")
    collapse = make_batch_collapsing_model(tmp / "collapse.onnx", (1, 2, 2))
    extra = FAULTY.format(missing=tmp / "missing.onnx", collapse=collapse)
    d = Daemon(pipeline_config(tmp, extra=extra), tmp, metrics=True)
    yield d
    d.stop()


def test_a_stage_model_missing_or_failing_leaves_the_boxes_answered(fd: Daemon) -> None:
    frame = camera_frame((0, 3, 5, 7, 9))
    with fd.client() as c:
        r = c.infer("faulty", frame)
        alone = c.infer("digits-det", frame)
    d = r.detections
    np.testing.assert_allclose(d.rows[:, :6], alone.detections.rows, atol=1e-3)
    assert len(d) == 5
    assert states(d, "digit") == ["fresh"] * 5  # the working stage is read as ever
    gone, broken = d.stages["gone"], d.stages["broken"]
    assert states(d, "gone") == ["failed"] * 5 and d.stage_label("gone", 0) is None
    assert gone["status"] == "failed" and "model 'gone' is failed" in gone["error"]
    assert "missing.onnx" in gone["error"]
    assert states(d, "broken") == ["failed"] * 5
    assert broken["status"] == "failed" and broken["error"].startswith("INTERNAL")
    assert "returned shape [1, 1, 2, 2]" in broken["error"]
    m = metrics(fd)
    assert metric(m, "edged_pipeline_boxes_total", pipeline="faulty", stage="gone",
                  state="failed") == 5


def test_a_stage_model_unloaded_at_run_time_is_said_per_box(fd: Daemon) -> None:
    frame = camera_frame((1, 2))
    assert fd.ctl({"op": "unload", "model": "digits"})["status"] == "OK"
    try:
        with fd.client() as c:
            d = c.infer("faulty", frame).detections
        assert len(d) == 2 and states(d, "digit") == ["failed", "failed"]
        assert "model 'digits' is" in d.stages["digit"]["error"]
    finally:
        assert fd.ctl({"op": "load", "model": "digits"})["status"] == "OK"
    with fd.client() as c:
        assert states(c.infer("faulty", frame).detections, "digit") == ["fresh", "fresh"]


def pipeline_status(d: Daemon, name: str) -> dict[str, Any]:
    return next(p for p in d.ctl({"op": "status"})["pipelines"] if p["name"] == name)


def test_load_steps_the_optional_stage_down_and_sheds_it_before_the_detector(
        fd: Daemon) -> None:
    """Runs last on its daemon: it leaves the members stepped down."""
    frame = camera_frame((0, 3))
    stop = threading.Event()

    def late_requests() -> None:  # every answer past its 1 ms deadline
        with fd.client(timeout_s=30) as c:
            while not stop.is_set():
                for k in range(20):
                    c.send(*build_infer("loaded", frame, id=k, timeout_ms=1))
                for _ in range(20):
                    c.recv()

    seen = []
    t = threading.Thread(target=late_requests, daemon=True)
    t.start()
    try:
        end = time.monotonic() + 60
        while time.monotonic() < end:
            p = pipeline_status(fd, "loaded")
            seen.append((p["step_down"]["position"], p["detector"]["active_variant"]))
            if p["step_down"]["position"] >= 3:
                break
            time.sleep(0.05)
    finally:
        stop.set()
        t.join(30)
    assert seen[-1][0] == 3, seen  # one step at a time: the stage's rungs, then shed
    assert {v for _, v in seen} == {"det-fp32"}  # the detector never moved meanwhile
    assert p["step_down"]["at"] == "digit: shed" and p["overload"]["asks"] == "digit: shed"
    wait_until(lambda: pipeline_status(fd, "loaded")["stages"][0]["active_variant"]
               == "small-fp32", timeout=30, what="digits on its lightest rung")
    with fd.client() as c:
        d = c.infer("loaded", frame).detections
    assert states(d, "digit") == ["shed", "shed"]
    assert d.stages["digit"]["reason"].startswith("overload: ")


# -- the governor ----------------------------------------------------------------------------

LEVELS = """
[governor]
enabled = true
sysfs_root = "{root}"
interval_s = 0.1
swap_min_interval_s = 0
[[governor.levels]]
name = "warm"
enter_c = 70.0
ladder_steps = 1
[[governor.levels]]
name = "hot"
enter_c = 80.0
ladder_steps = 2
[[governor.levels]]
name = "severe"
enter_c = 90.0
ladder_steps = 3
"""


@pytest.fixture(scope="module")
def gd(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("pipeline-governor")
    root = tmp / "sysroot"
    make_thermal_zone(root, 0, "cpu-thermal", 45000)
    d = Daemon(pipeline_config(tmp, extra=LEVELS.format(root=root)), tmp)
    yield d
    d.stop()


def variants(d: Daemon) -> tuple[str, str]:
    p = pipeline_status(d, READER)
    return p["detector"]["active_variant"], p["stages"][0]["active_variant"]


def test_the_governor_steps_and_sheds_the_stage_before_the_detector(gd: Daemon) -> None:
    frame = camera_frame((0, 3, 5))

    def read() -> Any:
        with gd.client() as c:
            return c.infer(READER, frame).detections

    steps = []
    for level, want in (("warm", ("det-fp32", "cnn-int8")), ("hot", ("det-fp32", "cnn-int8")),
                        ("severe", ("det-int8", "cnn-int8"))):
        assert gd.ctl({"op": "level", "level": level})["status"] == "OK"
        wait_until(lambda w=want: variants(gd) == w, timeout=30, what=f"{level}: {want}")
        d = read()
        steps.append((level, states(d, "digit"), d.stages["digit"].get("variant")))
        if level == "hot":
            assert d.stages["digit"]["reason"].startswith("governor level hot")
            text = format_status(gd.ctl({"op": "status"}))
            assert "  stage digit     digits-crops  shed     cnn-fp32 > [cnn-int8]" in text
            assert "position 2/4: digit: shed" in text
    assert steps == [("warm", ["fresh"] * 3, "cnn-int8"), ("hot", ["shed"] * 3, "cnn-int8"),
                     ("severe", ["shed"] * 3, "cnn-int8")]
    assert gd.ctl({"op": "level", "level": "auto"})["status"] == "OK"
    wait_until(lambda: variants(gd) == ("det-fp32", "cnn-fp32"), timeout=30,
               what="back to the heaviest rungs")
    assert states(read(), "digit") == ["fresh"] * 3


def test_edged_infer_prints_each_box_with_its_stage_label(pd: Daemon, tmp_path: Path) -> None:
    scene = ROOT / "models" / "digits-det" / "samples" / "scene010_5digits.png"
    r = subprocess.run([sys.executable, "-m", "edged", "infer", READER, str(scene),
                        "--endpoint", pd.tcp, "--draw", str(tmp_path / "out.jpg")],
                       capture_output=True, text=True, timeout=60, cwd=str(ROOT))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[1].split() == ["label", "score", "x1", "y1", "x2", "y2", "digit"]
    rows = [ln.split() for ln in lines[2:7]]
    assert all(row[0] == row[-1] for row in rows), r.stdout  # the samples read as detected
    assert (tmp_path / "out.jpg").exists()


def test_the_kserve_page_pipeline_snippet_runs_as_written(pd: Daemon) -> None:
    """docs/kserve.md's pipeline snippet, whole (imports, client, input), run by Python from
    a checkout against this daemon's gRPC listener in place of the page's port: it prints
    the digit read in each box."""
    import subprocess
    import sys

    from support.docs import fenced

    (block,) = [b for b in fenced(ROOT / "docs" / "kserve.md")
                if b.language == "python" and "digits-reader" in b.text]
    code = block.text.replace("127.0.0.1:8011", pd.grpc_url)  # type: ignore[attr-defined]
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    digits = [int(float(x)) for x in r.stdout.strip().strip("[]").split()]
    assert digits and set(digits) <= set(range(10)), r.stdout
