"""Reload by content: a served file replaced in place under the same path is noticed by
``edged ctl reload`` and SIGHUP (its sha256 differs from the live one's), put through the
pre-swap check, and said (``changed`` and ``why``); the live artifact's digest is in
``edged status`` and in ``edged_live_artifact_info``.

A real daemon serves copies of the shipped digits files from the test's folder; the
test copies other bytes over them, as an operator copying a new export would.
"""

from __future__ import annotations

import hashlib
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from support.configs import digits_config, variant
from support.daemons import Daemon, metric, metrics
from support.paths import MODELS
from support.slow_model import make_slow_model
from support.waits import wait_until


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def replace(path: Path, source: Path) -> None:
    """Copy ``source``'s bytes over ``path`` as ``cp`` would (same path, same inode)."""
    path.write_bytes(source.read_bytes())


def wrong_answers(path: Path) -> Path:
    """A model with the digits contract whose logits are its first ten pixels: it loads
    and runs, and the check against the reference refuses it."""
    graph = helper.make_graph(
        [helper.make_node("Flatten", ["input"], ["flat"], axis=1),
         helper.make_node("Slice", ["flat", "start", "end", "axis"], ["logits"])],
        "wrong", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 28, 28])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        [helper.make_tensor("start", TensorProto.INT64, [1], [0]),
         helper.make_tensor("end", TensorProto.INT64, [1], [10]),
         helper.make_tensor("axis", TensorProto.INT64, [1], [1])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("content")
    ref, lite = tmp / "digits.onnx", tmp / "lite.onnx"
    shutil.copy(MODELS / "cnn-fp32.onnx", ref)
    shutil.copy(MODELS / "cnn-int8.onnx", lite)
    shutil.copy(MODELS / "cnn-int8.onnx.golden.npz", tmp / "lite.onnx.golden.npz")
    cfg = digits_config(tmp, variant_tables=[variant("main", ref), variant("lite", lite)])
    d = Daemon(cfg, tmp, metrics=True)
    try:
        yield {"d": d, "ref": ref, "lite": lite, "tmp": tmp}
    finally:
        d.stop()


def model(d: Daemon) -> dict[str, Any]:
    return next(m for m in d.ctl({"op": "status"})["models"] if m["name"] == "digits")


def live_digest(d: Daemon) -> str:
    text = metrics(d)
    found = [ln for ln in text.splitlines() if ln.startswith("edged_live_artifact_info{")]
    assert len(found) == 1, found  # one series per model: the live artifact
    return found[0].split('sha256="')[1].split('"')[0]


def answers(d: Daemon) -> np.ndarray:
    x = np.load(MODELS / "validation.npz")["x"][:1].astype(np.float32)[:, None] / 255.0
    with d.client() as c:
        return np.asarray(c.infer("digits", x).outputs["logits"])


def test_a_file_replaced_in_place_is_reloaded_checked_and_said(served: dict[str, Any]) -> None:
    d, ref = served["d"], served["ref"]
    assert model(d)["digest"] == sha(ref) == live_digest(d)
    before = answers(d)
    replace(ref, MODELS / "small-fp32.onnx")
    r = d.ctl({"op": "reload"})
    assert r["status"] == "OK", r
    assert r["reload"]["changed"] == ["digits"]
    why = r["reload"]["why"]["digits"]
    assert f"main: {ref} changed on disk (sha256 {sha(MODELS / 'cnn-fp32.onnx')[:12]} -> " \
           f"{sha(ref)[:12]})" in why, why
    assert "pre-swap check: same inputs and outputs" in why
    assert model(d)["digest"] == sha(ref) == live_digest(d)
    assert not np.allclose(answers(d), before)  # the new bytes serve
    # Nothing changed since: nothing to do.
    assert d.ctl({"op": "reload"})["reload"]["changed"] == []


def test_a_new_file_with_other_inputs_is_refused_and_the_old_serves_on(
        served: dict[str, Any]) -> None:
    d, ref, tmp = served["d"], served["ref"], served["tmp"]
    live = model(d)["digest"]
    replace(ref, make_slow_model(tmp / "other.onnx", 10))
    r = d.ctl({"op": "reload"})
    assert r["status"] == "INVALID_ARGUMENT", r
    assert "changed on disk" in r["error"] and "are not the served ones" in r["error"]
    assert "input float32 [-1, 1, 28, 28]" in r["error"]
    assert model(d)["digest"] == live == live_digest(d)
    answers(d)  # still served by the old session


def test_sighup_notices_it_too(served: dict[str, Any]) -> None:
    d, ref = served["d"], served["ref"]
    replace(ref, MODELS / "cnn-fp32.onnx")
    reloads = metric(metrics(d), "edged_config_reloads_total", result="ok")
    d.signal(signal.SIGHUP)
    wait_until(lambda: metric(metrics(d), "edged_config_reloads_total", result="ok")
               > reloads, 60, "the SIGHUP reload")
    assert model(d)["digest"] == sha(MODELS / "cnn-fp32.onnx") == live_digest(d)
    assert "changed on disk" in d.ctl({"op": "status"})["last_reload"]["why"]["digits"]


def test_a_changed_rung_that_fails_its_check_is_refused(served: dict[str, Any]) -> None:
    d, lite, tmp = served["d"], served["lite"], served["tmp"]
    assert d.ctl({"op": "swap", "model": "digits", "variant": "lite"})["status"] == "OK"
    live = model(d)["digest"]
    assert live == sha(lite)
    replace(lite, wrong_answers(tmp / "wrong.onnx"))
    r = d.ctl({"op": "reload"})
    assert r["status"] == "INVALID_ARGUMENT", r
    assert "lite: " in r["error"] and "refused by the pre-swap check" in r["error"], r
    m = model(d)
    assert (m["active_variant"], m["digest"]) == ("lite", live)
    d.ctl({"op": "swap", "model": "digits", "variant": "auto"})


def test_a_reload_that_replaces_a_model_under_frame_load_fails_no_request(
        tmp_path: Path) -> None:
    """Each reload replaces the digits model (its ``max_queue`` changed) while four clients
    send camera frames, which the daemon decodes and resizes off the event loop: a frame
    admitted by the model going out is still computed by it (``Model.drain`` waits for
    what was admitted before it stops accepting). Before, 7 to 10 of 15 such reloads
    failed a frame with UNAVAILABLE ("shutting down", "unloaded")."""
    import threading

    from support.configs import DIGITS_PREPROCESS, config, model_table
    from support.digits import X

    def write(max_queue: int) -> Path:
        return config(tmp_path, models=[model_table(
            "digits", [variant("cnn-fp32", MODELS / "cnn-fp32.onnx")], max_batch_size=8,
            max_queue=max_queue, preprocess=DIGITS_PREPROCESS)],
            server="drain_timeout_s = 2.0\n")

    d = Daemon(write(256), tmp_path)
    stop = threading.Event()
    replies: list[tuple[str, str | None]] = []

    def send() -> None:
        with d.client(timeout_s=30) as c:
            i = 0
            while not stop.is_set():
                frame = np.kron(X[i % len(X)], np.ones((40, 40), np.uint8))  # 1120x1120
                r = c.infer("digits", frame, raise_on_error=False)
                replies.append((r.status, r.header.get("error")))
                i += 1

    threads = [threading.Thread(target=send) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        for k in range(15):
            seen = len(replies)
            wait_until(lambda seen=seen: len(replies) >= seen + 20, 30,
                       "frames answered between reloads")
            write(257 + k)
            r = d.ctl({"op": "reload"})
            assert r["status"] == "OK" and r["reload"]["changed"] == ["digits"], r
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        d.stop()
    failed = [r for r in replies if r[0] != "OK"]
    assert not failed and len(replies) > 300, failed[:5]
