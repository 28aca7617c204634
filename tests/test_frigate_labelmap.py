"""A model Frigate sends must answer only class ids Frigate's labelmap holds (0..90): its
camera process looks every id up and fails on one it lacks. Checked at the transfer, like
the rest of the model's contract (edged/protocols/frigate/model_check.py): a model with
more classes is refused, or its ids are mapped by the endpoint's ``class_map``, and the
answer says which; a layout whose ids are values (SSD, D-FINE, YOLO-NAS) has rows outside
the labelmap dropped from its replies.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from support import frigate_graphs as fg
from support.daemons import Daemon, free_port

from edged.protocols.frigate.model_check import check_model, labelmap_fit
from edged.protocols.frigate.wire import encode_result
from edged.testing.frigate_plugin import FrigateDetector

pytest.importorskip("onnx", reason="model transfer checks graphs with onnx")


def test_class_ids_are_held_against_frigates_labelmap() -> None:
    wide = check_model(fg.yologeneric(classes=95).data)
    assert wide.classes == 95
    why, _ = labelmap_fit(wide, {})
    assert why is not None and "ids 91..94 are outside it" in why and "class_map" in why
    why, note = labelmap_fit(wide, {91: 0, 92: 1, 93: 2, 94: 3})
    assert why is None and note.startswith("class ids 91, 92, 93, 94 mapped by class_map")
    assert labelmap_fit(check_model(fg.yolox().data), {}) == (
        None, "class ids 0..79 fit Frigate's labelmap")
    assert check_model(fg.rfdetr().data).classes == 90
    assert check_model(fg.dfine().data).classes is None  # ids are values: dropped in replies


def test_a_reply_never_carries_an_id_outside_the_labelmap() -> None:
    dets = np.array([[0, 0, 10, 10, 0.9, 120], [0, 0, 10, 10, 0.8, 3]], np.float32)
    out = np.frombuffer(encode_result(dets, 20, 20, 0.0, {}, 90), np.float32).reshape(20, 6)
    assert out[0, 0] == 3 and out[0, 1] == pytest.approx(0.8) and np.all(out[1:] == 0)
    out = np.frombuffer(encode_result(dets, 20, 20, 0.0, {120: 7}, 90), np.float32)
    assert out.reshape(20, 6)[0, 0] == 7  # mapped into the labelmap: kept


def test_a_sent_model_with_ids_frigate_lacks_is_refused_or_mapped(tmp_path: Path) -> None:
    plain, mapped = free_port(), free_port()
    cfg = tmp_path / "edged.toml"
    cfg.write_text(f"""
[server]
drain_timeout_s = 1.0
state_dir = "{tmp_path / 'state'}"
[[server.frigate]]
endpoint = "tcp://127.0.0.1:{plain}"
accept_models = true
int8_rung = false
timeout_ms = 20000
[[server.frigate]]
endpoint = "tcp://127.0.0.1:{mapped}"
accept_models = true
int8_rung = false
timeout_ms = 20000
class_map = {{ 91 = 0, 92 = 0, 93 = 0, 94 = 0 }}
[metrics]
listen = "off"
[[models]]
name = "unused"
[[models.variants]]
name = "v"
backend = "null"
path = "unused"
""")
    g = fg.yologeneric(classes=95)
    d = Daemon(cfg, tmp_path)
    try:
        f = FrigateDetector(f"tcp://127.0.0.1:{plain}", "/config/wide.onnx", g.model_type,
                            20000, model_bytes=g.data)
        assert not f.ready
        assert "Frigate's labelmap holds ids 0..90" in f.events.answers[-1]["message"]
        f.close()
        f = FrigateDetector(f"tcp://127.0.0.1:{mapped}", "/config/wide.onnx", g.model_type,
                            20000, model_bytes=g.data)
        assert f.ready, f.events.answers
        assert "mapped by class_map" in f.events.answers[-1]["message"]
        r = f.detect_raw(np.zeros(g.shape, g.dtype))
        assert np.allclose(r[0], g.want, atol=1e-3)
        f.close()
    finally:
        d.stop()


def test_a_sent_model_that_regresses_is_rolled_back_and_never_served_again(
        tmp_path: Path) -> None:
    """Frigate's transfer takes a delivered version's watch window: a new model that
    misses its deadlines on every frame is replaced by the one it replaced, and the same
    bytes sent again are refused with the reason (in the answer and in edged status)."""
    from test_frigate_loading import slow_detector

    port = free_port()
    cfg = tmp_path / "edged.toml"
    cfg.write_text(f"""
[server]
drain_timeout_s = 1.0
state_dir = "{tmp_path / 'state'}"
[[server.frigate]]
endpoint = "tcp://127.0.0.1:{port}"
accept_models = true
int8_rung = false
timeout_ms = 100
[metrics]
listen = "off"
[[models]]
name = "unused"
[[models.variants]]
name = "v"
backend = "null"
path = "unused"
""")
    good = slow_detector(tmp_path / "good.onnx", 10).read_bytes()
    slow = slow_detector(tmp_path / "slow.onnx", 400_000).read_bytes()
    frame = np.zeros((1, 300, 300, 3), np.uint8)
    url = f"tcp://127.0.0.1:{port}"
    d = Daemon(cfg, tmp_path)
    try:
        f = FrigateDetector(url, "/config/good.onnx", "ssd", 20000, model_bytes=good)
        assert f.ready and f.detect_raw(frame)[0, 1] > 0.5
        f.close()
        f = FrigateDetector(url, "/config/slow.onnx", "ssd", 20000, model_bytes=slow)
        assert f.ready
        end = time.monotonic() + 60
        while "regressed in its watch window" not in d.log():
            assert time.monotonic() < end, d.log_tail()
            f.detect_raw(frame)  # zeros: past the 100 ms deadline
        f.close()
        f = FrigateDetector(url, "/config/good.onnx", "ssd", 20000, model_bytes=good)
        assert f.ready and f.events.transfers == 0 and f.detect_raw(frame)[0, 1] > 0.5
        f.close()
        f = FrigateDetector(url, "/config/slow.onnx", "ssd", 20000, model_bytes=slow)
        assert not f.ready and "rolled back here" in f.events.answers[-1]["message"]
        f.close()
        # edged status says it as it says a delivered version's rollback and refusal
        e = d.ctl({"op": "status"})["delivery"][f"frigate@{url}"]
        assert e["version"] == "good.onnx" and e["stage"] == "serving", e
        assert e["last_rollback"]["version"] == "slow.onnx", e
        assert e["last_rollback"]["by"] == "automatic", e
        assert e["last_rollback"]["reason"].startswith("deadline_misses:"), e
        assert (e["last_refusal"]["stage"], e["last_refusal"]["reason"]) == (
            "verifying", "rolled_back"), e
    finally:
        d.stop()
