"""A model Frigate sends takes a delivered version's stages where they apply, and ``edged
status`` shows them the same way (issue 30; edged/protocols/frigate/sent.py,
edged/delivery/board.py): gated by its contract and load, shadowed by the live frames
another client sends to the model it replaces, promoted, watched; a refusal at any stage
is the model's ``last_refusal`` with its stage and reason, and the old model serves on.

Real parts: the daemon, Frigate's plugin behaviour (``edged.testing.frigate_plugin``) as
two clients of one ``accept_models`` endpoint, SSD-shaped graphs built here (one fails on
frames with a pixel of 200 or more, which the model it would replace computes).
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from support import frigate_graphs as fg
from support.daemons import Daemon, free_port
from support.waits import wait_until
from test_frigate_loading import slow_detector

from edged.cli.status_text import format_status
from edged.testing.frigate_plugin import FrigateDetector

pytest.importorskip("onnx", reason="model transfer checks graphs with onnx")


def daemon(tmp: Path) -> tuple[Daemon, str]:
    port = free_port()
    cfg = tmp / "edged.toml"
    cfg.write_text(f"""
[server]
drain_timeout_s = 1.0
state_dir = "{tmp / 'state'}"
[[server.frigate]]
endpoint = "tcp://127.0.0.1:{port}"
accept_models = true
int8_rung = false
timeout_ms = 20000
transfers_per_minute = 10
[metrics]
listen = "off"
[[models]]
name = "unused"
[[models.variants]]
name = "v"
backend = "null"
path = "unused"
""")
    return Daemon(cfg, tmp), f"tcp://127.0.0.1:{port}"


class Camera:
    """Another Frigate client sending bright frames to the endpoint all along."""

    def __init__(self, url: str, model: bytes) -> None:
        self.f = FrigateDetector(url, "/config/good.onnx", "ssd", 20000, model_bytes=model)
        assert self.f.ready, self.f.events.answers
        self.frame = np.full((1, 300, 300, 3), 255, np.uint8)
        self.scores: list[float] = []
        self.stop = threading.Event()
        self.t = threading.Thread(target=self._run)
        self.t.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            self.scores.append(float(self.f.detect_raw(self.frame)[0, 1]))

    def end(self) -> None:
        self.stop.set()
        self.t.join(30)
        self.f.close()


def test_a_sent_model_is_shadowed_by_live_frames_gated_promoted_and_said(
        tmp_path: Path) -> None:
    d, url = daemon(tmp_path)
    name = f"frigate@{url}"
    camera = None
    try:
        camera = Camera(url, slow_detector(tmp_path / "good.onnx", 10).read_bytes())
        wait_until(lambda: len(camera.scores) >= 5, 30, "the camera's first frames")
        # a model that fails the camera's bright frames: refused at the shadow, with why
        bad = slow_detector(tmp_path / "bad.onnx", 10, fails_on_bright=True).read_bytes()
        f = FrigateDetector(url, "/config/bad.onnx", "ssd", 20000, model_bytes=bad)
        assert not f.ready
        assert "shadow batches" in f.events.answers[-1]["message"], f.events.answers
        f.close()
        e = d.ctl({"op": "status"})["delivery"][name]
        assert (e["last_refusal"]["stage"], e["last_refusal"]["reason"]) == (
            "shadowing", "errors"), e
        assert e["version"] == "good.onnx" and e["stage"] == "serving", e
        assert e["shadow"]["errors"] >= 1, e
        # a sound one: shadowed by the same frames, promoted, in its watch window
        good2 = slow_detector(tmp_path / "good2.onnx", 11).read_bytes()
        f = FrigateDetector(url, "/config/good2.onnx", "ssd", 20000, model_bytes=good2)
        assert f.ready, f.events.answers
        f.close()
        e = d.ctl({"op": "status"})["delivery"][name]
        assert e["version"] == "good2.onnx" and e["stage"] == "watching", e
        assert e["shadow"]["rows"] >= 1 and e["shadow"]["errors"] == 0, e
        assert e["watch"]["version"] == "good2.onnx", e
        assert [h["event"] for h in e["history"]][-2:] == ["refused", "promoted"], e
        assert e["source"] == f"frigate {url}", e
        text = format_status(d.ctl({"op": "status"}))
        assert f"delivery {name}: good2.onnx (" in text and "; watching" in text, text
        n = len(camera.scores)
        wait_until(lambda: len(camera.scores) >= n + 5, 30, "frames after the switch")
        camera.end()
        # every frame of the camera was answered, by the old model and then the new
        assert camera.scores and min(camera.scores) > 0.5, camera.scores[-10:]
        camera = None
        # a model with other tensors: nothing to compare a shadow with, and it says so
        g = fg.yolox()
        f = FrigateDetector(url, "/config/yolox.onnx", g.model_type, 20000,
                            model_bytes=g.data)
        assert f.ready, f.events.answers
        f.close()
        e = d.ctl({"op": "status"})["delivery"][name]
        assert e["version"] == "yolox.onnx", e
        assert "other tensors" in e["shadow"]["skipped"], e
    finally:
        if camera is not None:
            camera.end()
        d.stop()


def test_a_contract_refusal_and_a_restart_are_said_as_a_delivered_versions(
        tmp_path: Path) -> None:
    d, url = daemon(tmp_path)
    name = f"frigate@{url}"
    try:
        g = fg.yologeneric(classes=95)  # ids Frigate's labelmap lacks: refused at the gate
        f = FrigateDetector(url, "/config/wide.onnx", g.model_type, 20000, model_bytes=g.data)
        assert not f.ready
        f.close()
        e = d.ctl({"op": "status"})["delivery"][name]
        assert (e["last_refusal"]["stage"], e["last_refusal"]["reason"]) == (
            "gating", "labelmap"), e
        assert "Frigate's labelmap holds ids 0..90" in e["last_refusal"]["message"], e
        assert e["stage"] == "waiting" and not e.get("version"), e
        f = FrigateDetector(url, "/config/broken.onnx", "ssd", 20000, model_bytes=b"not onnx")
        assert not f.ready
        f.close()
        e = d.ctl({"op": "status"})["delivery"][name]
        assert (e["last_refusal"]["stage"], e["last_refusal"]["reason"]) == (
            "gating", "contract"), e
        g = fg.yolox()
        f = FrigateDetector(url, "/config/yolox.onnx", g.model_type, 20000, model_bytes=g.data)
        assert f.ready, f.events.answers
        f.close()
        e = d.ctl({"op": "status"})["delivery"][name]
        assert e["version"] == "yolox.onnx" and e["stage"] == "serving", e
        assert "shadow" not in e, e  # nothing served before it: no shadow, no watch
        d.stop()
        d = Daemon(d.config, tmp_path)  # the stored model serves again: said so

        def entry() -> dict:
            return d.ctl({"op": "status"})["delivery"].get(name) or {}

        wait_until(lambda: entry().get("version") == "yolox.onnx", 30,
                   "the stored model served again")
        e = entry()
        assert e["stage"] == "serving" and e["history"][-1]["event"] == "restored", e
        assert e["source"] == f"frigate {url}", e
    finally:
        d.stop()
