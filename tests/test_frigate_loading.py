"""A Frigate handshake while the configured model is still loading (server/frigate_manage.py).

Frigate waits 30 s for the answer to ``model_request``. edged holds the answer while the
endpoint's model loads: once it is ready the answer is "available and loaded"; after
``READY_WAIT_S`` (25 s) of not being ready it is "available, not loaded" with a message
saying the model is still loading, inside Frigate's 30 s (a later answer would be a
timeout, which Frigate never retries).

The models are real ONNX detectors (the SSD 4-tensor layout) whose warm-up run goes
through a ``Loop`` tied to the image input: a few million trips (a few seconds of
loading), or so many that the load never ends in the test's lifetime (the daemon is
killed after the answer). Neither wait is shortened for the test: the code has no knob
for it, and the 25 s is what Frigate meets.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.daemons import Daemon, free_port

from edged.protocols.frigate.handshake import READY_WAIT_S
from edged.testing.frigate_plugin import HANDSHAKE_WAIT_S, FrigateDetector

onnx = pytest.importorskip("onnx")

#: trips of the warm-up loop: seconds of loading on any CPU (about 1 µs a trip), or for ever
FEW_SECONDS = 2_500_000
FOREVER = 1 << 62


def slow_detector(path: Path, trips: int, fails_on_bright: bool = False) -> Path:
    """``image_tensor`` uint8 [1,300,300,3] -> num/boxes/scores/classes (one person at
    0.9); every output waits for a Loop of ``trips`` Tanh steps started from the image.
    ``fails_on_bright``: an image with a pixel of 200 or more fails (an ONNX Runtime
    error, a Gather index out of bounds); zeros, as every check at its load uses, pass."""
    from onnx import TensorProto, helper, numpy_helper
    from support.slow_model import tanh_loop_body

    body = tanh_loop_body()
    consts = {"num_detections": np.array([1], np.float32),
              "detection_boxes": np.array([[[0.1, 0.2, 0.9, 0.6]]], np.float32),
              "detection_scores": np.array([[0.9]], np.float32),
              "detection_classes": np.array([[1]], np.float32)}
    nodes = [helper.make_node("Cast", ["image_tensor"], ["xf"], to=TensorProto.FLOAT),
             helper.make_node("ReduceMean", ["xf"], ["mean"], keepdims=0),
             helper.make_node("Reshape", ["mean", "one"], ["h0"]),
             helper.make_node("Loop", ["trips", "cond", "h0"], ["h"], body=body),
             helper.make_node("Mul", ["h", "zero_c"], ["zero"])]
    inits = [numpy_helper.from_array(np.array(trips, np.int64), "trips"),
             numpy_helper.from_array(np.array(True), "cond"),
             numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array([0.0], np.float32), "zero_c")]
    if fails_on_bright:
        inits += [numpy_helper.from_array(np.zeros(2, np.float32), "bright_table"),
                  numpy_helper.from_array(np.array(0.01, np.float32), "bright_scale")]
        nodes += [helper.make_node("ReduceMax", ["xf"], ["bright_max"], keepdims=0),
                  helper.make_node("Mul", ["bright_max", "bright_scale"], ["bright_x"]),
                  helper.make_node("Floor", ["bright_x"], ["bright_floor"]),
                  helper.make_node("Cast", ["bright_floor"], ["bright_i"],
                                   to=TensorProto.INT64),
                  helper.make_node("Gather", ["bright_table", "bright_i"], ["bright_v"]),
                  helper.make_node("Mul", ["bright_v", "zero_c"], ["bright_z"]),
                  helper.make_node("Add", ["zero_l", "bright_z"], ["zero"])]
        nodes[4] = helper.make_node("Mul", ["h", "zero_c"], ["zero_l"])
    outputs = []
    for name, value in consts.items():
        inits.append(numpy_helper.from_array(value, f"{name}_c"))
        nodes.append(helper.make_node("Add", [f"{name}_c", "zero"], [name]))
        outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(value.shape)))
    graph = helper.make_graph(
        nodes, "slow_ssd",
        [helper.make_tensor_value_info("image_tensor", TensorProto.UINT8, [1, 300, 300, 3])],
        outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def config(tmp: Path, port: int, trips: int) -> Path:
    model = slow_detector(tmp / "slow-ssd.onnx", trips)
    p = tmp / "edged.toml"
    p.write_text(f"""
[server]
drain_timeout_s = 1.0
[metrics]
listen = "off"
[[server.frigate]]
endpoint = "tcp://127.0.0.1:{port}"
model = "slow"
timeout_ms = 20000
[[models]]
name = "slow"
max_batch_size = 1
[models.preprocess]
input = "image_tensor"
color = "rgb"
width = 300
height = 300
layout = "NHWC"
dtype = "uint8"
[models.postprocess]
kind = "detect"
decoder = "ssd"
resize = "stretch"
label_offset = 1
[[models.variants]]
name = "fp32"
backend = "onnxruntime"
path = "{model}"
""")
    return p


def wait_loading(d: Daemon, name: str, timeout: float = 20.0) -> dict[str, Any]:
    """The model's status entry once the daemon answers and lists it (still loading)."""
    end = time.monotonic() + timeout
    while True:
        try:
            models = d.ctl({"op": "status"}, timeout=2.0).get("models", [])
        except Exception:  # the control socket is not bound yet
            models = []
        found = next((m for m in models if m["name"] == name), None)
        if found is not None:
            return found
        assert time.monotonic() < end, d.log_tail()
        time.sleep(0.05)


def test_a_handshake_while_the_model_loads_is_answered_when_it_is_ready(tmp_path: Path
                                                                        ) -> None:
    port = free_port()
    d = Daemon(config(tmp_path, port, FEW_SECONDS), tmp_path, wait=False)
    try:
        m = wait_loading(d, "slow")
        assert m["state"] == "loading", m
        f = FrigateDetector(f"tcp://127.0.0.1:{port}", "/config/slow.onnx", "ssd", 20000)
        try:
            (a,) = f.events.answers
            assert f.ready and a["model_available"] is True and a["model_loaded"] is True, a
            assert f.handshake_s is not None and f.handshake_s < READY_WAIT_S
            # the answer waited for the load: the model is ready now and finds its person
            assert next(x for x in d.ctl({"op": "status"})["models"]
                        if x["name"] == "slow")["state"] == "ready"
            r = f.detect_raw(np.zeros((1, 300, 300, 3), np.uint8))
            assert r[0, 0] == 0 and abs(r[0, 1] - 0.9) < 1e-6, r[:2]
        finally:
            f.close()
    finally:
        d.stop()


def test_a_model_still_loading_after_25_s_is_answered_not_loaded_in_frigates_30_s(
        tmp_path: Path) -> None:
    port = free_port()
    d = Daemon(config(tmp_path, port, FOREVER), tmp_path, wait=False)
    try:
        assert wait_loading(d, "slow")["state"] == "loading"
        t0 = time.monotonic()
        f = FrigateDetector(f"tcp://127.0.0.1:{port}", "/config/slow.onnx", "ssd", 20000)
        took = time.monotonic() - t0
        try:
            (a,) = f.events.answers
            # what Frigate's plugin logs for it (not a timeout)
            assert not f.ready and f.events.errors == ["Model exists but failed to load"], \
                f.events
            assert a["model_available"] is True and a["model_loaded"] is False, a
            assert a["model_name"] == "slow.onnx"
            assert "'slow' is loading" in a["message"], a
            # held for the whole wait, answered before Frigate gives up
            assert READY_WAIT_S - 0.5 <= took < HANDSHAKE_WAIT_S, took
            # not ready: Frigate's plugin answers its own frames with zeros
            assert np.all(f.detect_raw(np.zeros((1, 300, 300, 3), np.uint8)) == 0)
        finally:
            f.close()
    finally:
        d.stop(timeout=2.0)  # the load never ends: SIGTERM, then kill
