"""A pipeline on a Frigate endpoint (``[[server.frigate]] model = "<pipeline>"``,
``label_from = "<stage>"``): each row of Frigate's ``[20, 6]`` reply carries the stage's class
where the stage read the box, the detector's where it did not (counted), through the real
daemon, Frigate's plugin double (its handshake and requests) and the shipped digits pipeline
(models/digits-det, then models/digits-crops on each box's crop). Bad tables are refused at
load naming the key.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zmq
from support.daemons import Daemon, free_port, metric, metrics
from support.paths import ROOT
from support.pipelines import held_out, pipeline_config

from edged.cli.status_text import format_status
from edged.config.file import load_config
from edged.config.pipelines import StageConfig
from edged.errors import ConfigError
from edged.metrics import Metrics
from edged.model.pipeline.run import FAILED, FRESH, NOT_SELECTED
from edged.protocols.frigate.stage_class import StageClass
from edged.protocols.frigate.wire import RESULT_BYTES
from edged.testing.frigate_plugin import FrigateDetector
from edged.testing.scene_eval import iou
from edged.testing.scenes import camera_frame

READER = "digits-reader"
DIGITS = [str(d) for d in range(10)]

#: the example's stage reading at most 2 boxes of a frame; and one whose answers are all
#: late (its own load rule off, so its misses move no member's variant)
MORE = """
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
labels = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"]

[[models]]
name = "reader-late"
kind = "pipeline"
detector = "digits-det"
[models.overload]
step_down = false
[[models.stages]]
name = "digit"
model = "digits-crops"
padding = 0.1
square = true
contrast = "border"
labels = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"]
"""


def endpoints(ports: dict[str, int]) -> str:
    """One Frigate endpoint per pipeline: generous deadlines (a shared CI machine) but the
    late one's 1 ms."""
    out = ""
    for model, port in ports.items():
        timeout = 1 if model == "reader-late" else 20000
        out += (f'[[server.frigate]]\nendpoint = "tcp://127.0.0.1:{port}"\nmodel = "{model}"\n'
                f'label_from = "digit"\ntimeout_ms = {timeout}\n')
    return out


@pytest.fixture(scope="module")
def fp(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("frigate-pipeline")
    for _ in range(3):  # free_port races other processes: take others on a clash
        ports = {READER: free_port(), "reader-k2": free_port(), "reader-late": free_port()}
        try:
            d = Daemon(pipeline_config(tmp, extra=MORE, server=endpoints(ports)), tmp,
                       metrics=True)
            break
        except RuntimeError as e:
            if "in use" not in str(e):
                raise
    d.frigate = {m: f"tcp://127.0.0.1:{p}" for m, p in ports.items()}  # type: ignore[attr-defined]
    yield d
    d.stop()


def plugin(d: Daemon, model: str, ctx: zmq.Context) -> FrigateDetector:
    """Frigate's zmq detector on ``model``'s endpoint, after its start-up handshake."""
    f = FrigateDetector(d.frigate[model], "/config/digits.onnx", "yologeneric",  # type: ignore[attr-defined]
                        request_timeout_ms=20000, ctx=ctx)
    assert f.ready, f.events
    return f


def tensor(frame_bgr: np.ndarray) -> np.ndarray:
    """What Frigate sends for a region: RGB, nhwc, uint8 (its defaults)."""
    return np.ascontiguousarray(frame_bgr[None, :, :, ::-1])


def boxes(rows: np.ndarray, w: int, h: int) -> np.ndarray:
    """Frigate's normalised ``y1, x1, y2, x2`` -> pixel ``x1, y1, x2, y2``."""
    return np.stack([rows[:, 3] * w, rows[:, 2] * h, rows[:, 5] * w, rows[:, 4] * h], axis=1)


def matched(frigate: np.ndarray, native: np.ndarray, w: int, h: int) -> list[int]:
    """For each native row, the Frigate row with the same box (their best-first orders may
    differ where two scores tie)."""
    got = frigate[frigate[:, 1] > 0]
    assert len(got) == min(len(native), 20), (got, native)
    fb = boxes(got, w, h)
    out = []
    for row in native:
        k = int(np.argmin(np.abs(fb - row[:4]).sum(axis=1)))
        assert np.abs(fb[k] - row[:4]).max() < 0.5, (fb[k], row[:4])
        out.append(k)
    assert sorted(out) == list(range(len(got)))
    return out


# -- the shipped pipeline on a Frigate endpoint --------------------------------------------------


def test_frigate_rows_carry_the_stage_label_the_native_pipeline_reads(fp: Daemon) -> None:
    images, truth = held_out()
    before = metrics(fp)
    right = total = differ = 0
    with zmq.Context() as ctx, fp.client(timeout_s=60) as c:
        f = plugin(fp, READER, ctx)
        assert "each box's class read by its stage 'digit'" in f.events.answers[-1]["message"]
        for image, gt in zip(images, truth, strict=True):
            native = c.infer(READER, image).detections
            got = f.detect_raw(tensor(image))
            if not len(native):
                assert not got.any()
                continue
            assert set(native.column("digit_state").tolist()) == {FRESH}
            order = matched(got, native.rows, 160, 160)
            for row, k in zip(native.rows, order, strict=True):
                digit = int(row[6])
                assert got[k, 0] == digit  # the stage's label, as the native reply reads it
                assert got[k, 1] == pytest.approx(row[4], abs=1e-3)  # the detector's score
                differ += int(digit != int(row[5]))
            # against the scene's truth: the rows name the digits the detector found
            found = boxes(got[got[:, 1] > 0], 160, 160)
            for g in gt:
                hit = np.flatnonzero(iou(found, g[None, :4])[:, 0] >= 0.5)
                if hit.size:
                    total += 1
                    right += int(got[hit[0], 0] == g[4])
        f.close()
    # some boxes the detector labels wrong: the rows carry the reader's digit there
    assert differ >= 3 and total >= 150 and right / total >= 0.95, (differ, right, total)
    after = metrics(fp)
    address = fp.frigate[READER]  # type: ignore[attr-defined]
    assert metric(after, "edged_frigate_label_fallbacks_total", endpoint=address) == \
        metric(before, "edged_frigate_label_fallbacks_total", endpoint=address) == 0
    # each request counted once, under the pipeline's name, as a native one is
    ok = (metric(after, "edged_frigate_requests_total", endpoint=address, status="OK")
          - metric(before, "edged_frigate_requests_total", endpoint=address, status="OK"))
    assert ok == len(images)


def test_boxes_beyond_the_stage_carry_the_detector_class_and_are_counted(fp: Daemon) -> None:
    frame = camera_frame((0, 3, 5, 7, 9), 320, 180)
    address = fp.frigate["reader-k2"]  # type: ignore[attr-defined]
    before = metric(metrics(fp), "edged_frigate_label_fallbacks_total", endpoint=address,
                    stage="digit", reason="not_selected")
    with zmq.Context() as ctx, fp.client(timeout_s=60) as c:
        native = c.infer("reader-k2", frame).detections
        f = plugin(fp, "reader-k2", ctx)
        got = f.detect_raw(tensor(frame))
        f.close()
    assert len(native) == 5
    states = native.column("digit_state").tolist()
    assert states == [FRESH, FRESH] + [NOT_SELECTED] * 3
    order = matched(got, native.rows, 320, 180)
    want = [int(r[6]) if s == FRESH else int(r[5]) for r, s in zip(native.rows, states,
                                                                    strict=True)]
    assert [int(got[k, 0]) for k in order] == want
    after = metric(metrics(fp), "edged_frigate_label_fallbacks_total", endpoint=address,
                   stage="digit", reason="not_selected")
    assert after - before == 3


def test_a_stage_that_fails_falls_back_to_the_detector_class(fp: Daemon) -> None:
    """Its model unloaded: every box still answered, with the detector's class, each row
    counted and the reason logged; the handshake says so; labels come back with the model."""
    images, _ = held_out()
    address = fp.frigate[READER]  # type: ignore[attr-defined]
    scenes = []  # scenes whose reader and detector disagree on a box
    with fp.client(timeout_s=60) as c:
        for i, image in enumerate(images):
            d = c.infer(READER, image).detections
            if len(d) and (d.column("digit_class") != d.classes).any():
                scenes.append(i)
            if len(scenes) == 3:
                break
    assert scenes
    before = metric(metrics(fp), "edged_frigate_label_fallbacks_total", endpoint=address,
                    stage="digit", reason="failed")
    assert fp.ctl({"op": "unload", "model": "digits-crops"})["status"] == "OK"
    try:
        sent = 0
        with zmq.Context() as ctx, fp.client(timeout_s=60) as c:
            f = plugin(fp, READER, ctx)
            message = f.events.answers[-1]["message"]
            assert "boxes carry the detector's class until it serves" in message, message
            for i in scenes:
                det = c.infer("digits-det", images[i]).detections
                piped = c.infer(READER, images[i]).detections
                assert set(piped.column("digit_state").tolist()) == {FAILED}
                got = f.detect_raw(tensor(images[i]))
                order = matched(got, det.rows, 160, 160)
                assert [int(got[k, 0]) for k in order] == det.classes.astype(int).tolist()
                sent += len(det)
            f.close()
        after = metric(metrics(fp), "edged_frigate_label_fallbacks_total", endpoint=address,
                       stage="digit", reason="failed")
        assert after - before == sent
        said = [ln for ln in fp.log().splitlines() if f"frigate {address}: a row" in ln]
        assert len(said) == 1, said  # once a minute, not per row
        assert "a row stage 'digit' did not label (failed: UNAVAILABLE: model 'digits-crops' " \
               "is unloaded) was sent with the detector's class" in said[0]
    finally:
        assert fp.ctl({"op": "load", "model": "digits-crops"})["status"] == "OK"
    with zmq.Context() as ctx, fp.client(timeout_s=60) as c:
        f = plugin(fp, READER, ctx)
        piped = c.infer(READER, images[scenes[0]]).detections
        got = f.detect_raw(tensor(images[scenes[0]]))
        f.close()
    order = matched(got, piped.rows, 160, 160)
    assert [int(got[k, 0]) for k in order] == piped.column("digit_class").astype(int).tolist()


def test_a_late_frame_is_answered_zeros_once_and_never_computed(fp: Daemon) -> None:
    """timeout_ms (Frigate's request_timeout_ms) bounds a pipeline's frame as a model's: with
    1 ms, frames that cannot be answered in time get 480 zero bytes, one reply each, and
    never reach the detector."""
    frame = tensor(camera_frame((1, 2), 320, 180))
    address = fp.frigate["reader-late"]  # type: ignore[attr-defined]
    header = json.dumps({"shape": list(frame.shape), "dtype": "uint8",
                         "model_type": "yologeneric"}).encode()
    before = metrics(fp)
    with zmq.Context() as ctx:
        socks = []
        for _ in range(6):
            s = ctx.socket(zmq.REQ)
            s.setsockopt(zmq.RCVTIMEO, 20000)
            s.setsockopt(zmq.LINGER, 0)
            s.connect(address)
            socks.append(s)
        for _ in range(3):
            for s in socks:
                s.send_multipart([header, frame.tobytes()])
            for s in socks:
                reply = s.recv_multipart()
                assert len(reply) == 1 and len(reply[0]) == RESULT_BYTES
        for s in socks:
            s.close()
    after = metrics(fp)

    def grew(name: str, **labels: str) -> float:
        return metric(after, name, **labels) - metric(before, name, **labels)

    assert grew("edged_frigate_requests_total", endpoint=address) == 18
    assert grew("edged_frigate_requests_total", endpoint=address,
                status="DEADLINE_EXCEEDED") >= 1
    assert grew("edged_requests_total", model="reader-late") == 18
    # only the frames answered OK ran on the detector (nothing else used it meanwhile)
    assert grew("edged_batch_size_sum", model="digits-det") == \
        grew("edged_frigate_requests_total", endpoint=address, status="OK")


def test_status_shows_the_endpoint_serving_the_pipeline(fp: Daemon) -> None:
    r = fp.ctl({"op": "status"})
    address = fp.frigate[READER]  # type: ignore[attr-defined]
    assert r["frigate"][address] == READER
    rows = [ln.split(None, 2) for ln in format_status(r).splitlines()
            if ln.startswith("frigate ")]
    assert ["frigate", address, f"pipeline {READER} (class from stage digit)"] in \
        [[a, b, c.strip()] for a, b, c in rows]


def test_a_reload_that_changes_the_stage_labels_is_followed(fp: Daemon) -> None:
    """Runs after the other daemon tests: the reader-k2 stage loses its labels 5..9 by a
    reload; its rows read as 5..9 then carry the detector's class, counted ``unlabelled``."""
    frame = camera_frame((1, 6), 320, 180)
    address = fp.frigate["reader-k2"]  # type: ignore[attr-defined]
    text = fp.config.read_text()
    full = 'labels = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"]\n\n[[models]]\n' \
           'name = "reader-late"'
    assert full in text
    fp.config.write_text(text.replace(full, full.replace(', "5", "6", "7", "8", "9"', "")))
    try:
        assert fp.ctl({"op": "reload"})["status"] == "OK"
        before = metric(metrics(fp), "edged_frigate_label_fallbacks_total", endpoint=address,
                        stage="digit", reason="unlabelled")
        with zmq.Context() as ctx, fp.client(timeout_s=60) as c:
            native = c.infer("reader-k2", frame).detections
            f = plugin(fp, "reader-k2", ctx)
            got = f.detect_raw(tensor(frame))
            f.close()
        read = native.column("digit_class").astype(int).tolist()
        assert sorted(read) == [1, 6]
        order = matched(got, native.rows, 320, 180)
        want = [r if r < 5 else int(d) for r, d in zip(read, native.classes, strict=True)]
        assert [int(got[k, 0]) for k in order] == want
        after = metric(metrics(fp), "edged_frigate_label_fallbacks_total", endpoint=address,
                       stage="digit", reason="unlabelled")
        assert after - before == 1
    finally:
        fp.config.write_text(text)
        assert fp.ctl({"op": "reload"})["status"] == "OK"


# -- which class a row carries, on its own ---------------------------------------------------------


def test_a_class_the_labels_do_not_name_or_a_clashing_fallback_never_reaches_frigate() -> None:
    """The room's choice of class on a pipeline's answer: the stage's where it read the box
    with one of its labels; else the detector's, unless the detector's labels (from its
    model file, so not checked at load) name that Frigate id otherwise: left out."""
    m = Metrics()
    stage = StageConfig(name="digit", model="m", labels=("zero", "one", "two"))
    sc = StageClass(m, "ipc:///x", stage, {})
    # x1 y1 x2 y2 score class | digit_class digit_score digit_state
    rows = np.array([[0, 0, 1, 1, .9, 5, 1, .8, FRESH],    # the stage's label: 1
                     [0, 0, 1, 1, .8, 5, 7, .9, FRESH],    # 7: no label names it
                     [0, 0, 1, 1, .7, 1, -1, 0, FAILED],   # detector's 1 ('one' in both)
                     [0, 0, 1, 1, .6, 2, -1, 0, FAILED]],  # detector's 2 is 'car', not 'two'
                    np.float32)
    header = {"columns": ["x1", "y1", "x2", "y2", "score", "class", "digit_class",
                          "digit_score", "digit_state"],
              "labels": {"0": "zero", "1": "one", "2": "car", "5": "five"},
              "stages": {"digit": {"status": "failed", "error": "INTERNAL: boom"}}}
    out = sc.rows(rows, header)
    assert out[:, 5].tolist() == [1, 5, 1] and out[:, 4].tolist() == pytest.approx([.9, .8, .7])
    text = m.registry.get_sample_value
    assert text("edged_frigate_label_fallbacks_total",
                {"endpoint": "ipc:///x", "stage": "digit", "reason": "unlabelled"}) == 1
    assert text("edged_frigate_label_fallbacks_total",
                {"endpoint": "ipc:///x", "stage": "digit", "reason": "failed"}) == 1
    assert text("edged_frigate_label_fallbacks_total",
                {"endpoint": "ipc:///x", "stage": "digit", "reason": "clash"}) == 1
    # an answer without the stage's columns (a pipeline's header always has them): every
    # row the detector's, counted failed
    assert sc.rows(rows[:, :6], {"columns": header["columns"][:6],
                                 "labels": header["labels"]})[:, 5].tolist() == [5, 5, 1]


# -- refused at load, naming the key --------------------------------------------------------------


def refusal(tmp: Path, table: str, extra: str = "") -> str:
    """The problems of the example's models plus ``extra`` with ``table`` as endpoint 0."""
    server = '[[server.frigate]]\nendpoint = "tcp://127.0.0.1:5599"\n' + table
    with pytest.raises(ConfigError) as e:
        load_config(pipeline_config(tmp, extra=extra, server=server))
    return "\n".join(e.value.problems)


def test_bad_tables_are_refused_naming_the_key(tmp_path: Path) -> None:
    assert "server.frigate[0].label_from: 'digt' is not a stage of pipeline 'digits-reader' " \
           "(its stages: digit)" in refusal(tmp_path, 'model = "digits-reader"\n'
                                                      'label_from = "digt"\n')
    msg = refusal(tmp_path, 'model = "digits-reader"\n')
    assert "server.frigate[0].label_from: missing: 'digits-reader' is a pipeline; name the " \
           "stage whose class Frigate gets (its stages: digit)" in msg
    assert "serve its detector 'digits-det' instead" in msg
    assert "server.frigate[0].label_from: 'digits-det' is not a pipeline" in \
        refusal(tmp_path, 'model = "digits-det"\nlabel_from = "digit"\n')
    msg = refusal(tmp_path, 'model = "digits-reader"\naccept_models = true\n')
    assert "server.frigate[0].model: give either model" in msg
    assert "server.frigate[0].label_from: applies to an endpoint serving a configured " \
           "pipeline" in refusal(tmp_path, 'accept_models = true\nlabel_from = "digit"\n')
    assert "server.frigate[0].model: no model or pipeline named 'nope'" in \
        refusal(tmp_path, 'model = "nope"\n')


def stage_pipeline(labels: str, detector_labels: str = "") -> str:
    """A pipeline 'p' whose stage has ``labels`` (TOML), over a detector 'det' (the digits
    detector, with ``detector_labels`` in its postprocess table when given)."""
    return f"""
[[models]]
name = "det"
[models.preprocess]
width = 160
height = 160
[models.postprocess]
kind = "detect"
decoder = "yolov8"
{detector_labels}
[[models.variants]]
name = "v"
backend = "null"
path = "unused"

[[models]]
name = "p"
kind = "pipeline"
detector = "det"
[[models.stages]]
name = "s"
model = "digits-crops"
{labels}
"""


def test_a_stage_whose_ids_frigate_lacks_or_that_names_none_is_refused(tmp_path: Path) -> None:
    wide = "labels = [" + ", ".join(f'"c{i}"' for i in range(95)) + "]"
    msg = refusal(tmp_path, 'model = "p"\nlabel_from = "s"\n', stage_pipeline(wide))
    assert "server.frigate[0].label_from: stage 's' answers 95 class ids (0..94); Frigate's " \
           "labelmap holds ids 0..90" in msg and "ids 91..94 are outside it" in msg
    assert "class_map = { 91 = 0 }" in msg
    mapped = 'model = "p"\nlabel_from = "s"\nclass_map = { 91 = 80, 92 = 81, 93 = 82, 94 = 83 }\n'
    server = '[[server.frigate]]\nendpoint = "tcp://127.0.0.1:5599"\n' + mapped
    assert load_config(pipeline_config(tmp_path, extra=stage_pipeline(wide), server=server))
    assert "server.frigate[0].label_from: stage 's' names no labels" in \
        refusal(tmp_path, 'model = "p"\nlabel_from = "s"\n', stage_pipeline(""))


def test_a_detector_naming_the_stage_ids_otherwise_is_refused(tmp_path: Path) -> None:
    """A row the stage did not label falls back to the detector's class, through the same
    labelmap: the two must not name one Frigate id differently."""
    labels = 'labels = ["0", "1", "2"]'
    msg = refusal(tmp_path, 'model = "p"\nlabel_from = "s"\n',
                  stage_pipeline(labels, 'labels = ["0", "car", "2"]'))
    assert "server.frigate[0].label_from: a row stage 's' did not label carries the " \
           "detector 'det''s class" in msg and "Frigate ids 1 ('car' / '1')" in msg
    server = '[[server.frigate]]\nendpoint = "tcp://127.0.0.1:5599"\nmodel = "p"\n' \
             'label_from = "s"\n'
    cfg = load_config(pipeline_config(tmp_path, server=server, extra=stage_pipeline(
        labels, 'labels = ["0", "1", "2", "3"]')))
    assert cfg.server.frigate[0].label_from == "s"
    assert cfg.pipeline("p").overload.step_down is True  # a Frigate pipeline: deadlines count
    assert cfg.pipeline(READER).overload.step_down is False


def test_labelmap_command_prints_the_stage_labels_and_the_detector_s(tmp_path: Path) -> None:
    server = ('[[server.frigate]]\nendpoint = "tcp://127.0.0.1:5599"\nmodel = "digits-reader"\n'
              'label_from = "digit"\nclass_map = { 9 = 20 }\n')
    p = pipeline_config(tmp_path, server=server)
    out = subprocess.run([sys.executable, "-m", "edged", "frigate", "labelmap", READER,
                          "--config", str(p)], capture_output=True, text=True, timeout=60,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "".join(f"{d} {d}\n" for d in range(9)) + "20 9\n"
