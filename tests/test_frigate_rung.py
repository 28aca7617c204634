"""The INT8 rung of a model Frigate sent: built in the background from frames Frigate
sent, accepted by edged.verify's check on other frames, offered to the governor, swapped
to, and offered again after a restart (edged/frigate_ladder.py, server/frigate_rungs.py).

The model is the trained digits-det, sent as ``yologeneric`` the way Frigate's YOLOv9
config sends frames (nchw float 0..1); its held-out scenes are the camera.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.daemons import Daemon, free_port
from support.paths import ROOT

from edged.frigate_client import FrigateDetector

pytest.importorskip("onnx", reason="model transfer checks graphs with onnx")

DIGITS = ROOT / "models" / "digits-det" / "det-fp32.onnx"


def config(tmp: Path, port: int) -> Path:
    root = tmp / "sysfs"
    root.mkdir(exist_ok=True)
    p = tmp / "edged.toml"
    p.write_text(f"""
[server]
drain_timeout_s = 2.0
state_dir = "{tmp / 'state'}"
[[server.frigate]]
endpoint = "tcp://127.0.0.1:{port}"
accept_models = true
timeout_ms = 20000
int8_frames = 12
[metrics]
listen = "off"
[[models]]
name = "unused"
[models.preprocess]
color = "gray"
width = 28
height = 28
[[models.variants]]
name = "fp32"
backend = "onnxruntime"
path = "{ROOT / 'models' / 'digits' / 'cnn-fp32.onnx'}"
[governor]
enabled = true
sysfs_root = "{root}"
interval_s = 0.2
swap_min_interval_s = 0
[[governor.levels]]
name = "warm"
enter_c = 70.0
exit_c = 65.0
ladder_steps = 1
""")
    return p


def scenes() -> list[np.ndarray]:
    with np.load(ROOT / "models" / "digits-det" / "val.npz") as z:
        images = z["images"]
    return [np.ascontiguousarray(i.transpose(2, 0, 1)[None].astype(np.float32) / 255.0)
            for i in images]


def model_status(d: Daemon, name: str) -> dict[str, Any]:
    r = d.ctl({"op": "status"})
    return next(m for m in r["models"] if m["name"] == name)


def wait_for(what: str, check: Any, feed: Any, timeout: float = 240.0) -> Any:
    end = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < end, f"timed out waiting for {what}"
        feed()
        time.sleep(0.2)


def test_a_sent_model_gets_a_checked_int8_rung_the_governor_swaps_to(tmp_path: Path) -> None:
    port = free_port()
    cfg = config(tmp_path, port)
    d = Daemon(cfg, tmp_path)
    name = f"frigate@tcp://127.0.0.1:{port}"
    frames = scenes()
    try:
        f = FrigateDetector(f"tcp://127.0.0.1:{port}", DIGITS, "yologeneric", 20000)
        assert f.ready, f.events
        for x in frames[:12]:  # the ring fills: the build starts
            assert f.detect_raw(x)[0, 1] > 0.5

        def rung() -> dict[str, Any] | None:
            g = d.ctl({"op": "status"})["frigate_rungs"].get(f"tcp://127.0.0.1:{port}", {})
            assert g.get("state") not in ("refused", "failed"), g
            return g if g.get("state") == "offered" else None

        k = [12]

        def feed() -> None:
            f.detect_raw(frames[k[0] % len(frames)])
            k[0] += 1

        g = wait_for("the INT8 rung", rung, feed)
        assert "det.recall" in g["check"], g
        assert model_status(d, name)["variants"] == ["det-fp32.onnx", "det-fp32.onnx-int8"]
        assert "INT8 rung accepted" in d.log()
        from edged.status_text import format_status

        assert f"int8 rung tcp://127.0.0.1:{port}: offered" in format_status(
            d.ctl({"op": "status"}))
        state = tmp_path / "state" / "frigate" / "models"
        assert len(list(state.glob("*.int8.onnx"))) == 1

        # the governor moves it down its ladder; verification runs on frames Frigate sent
        assert d.ctl({"op": "level", "level": "warm"})["status"] == "OK"
        wait_for("the swap to int8",
                 lambda: model_status(d, name)["active_variant"] == "det-fp32.onnx-int8", feed)
        r = f.detect_raw(frames[0])
        assert r[0, 1] > 0.5  # the int8 rung still finds the digits
        f.close()
    finally:
        d.stop()
    # after a restart the rung is on the ladder at once: no rebuild
    d = Daemon(cfg, tmp_path)
    try:
        f = FrigateDetector(f"tcp://127.0.0.1:{port}", DIGITS, "yologeneric", 20000)
        assert f.ready and f.events.transfers == 0
        assert model_status(d, name)["variants"] == ["det-fp32.onnx", "det-fp32.onnx-int8"]
        assert "building an INT8 rung" not in d.log()
        f.close()
    finally:
        d.stop()
