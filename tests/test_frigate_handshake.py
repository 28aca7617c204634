"""Frigate's start-up handshake and model transfer against the real daemon.

The client is ``edged.testing.frigate_plugin.FrigateDetector``, written after Frigate's ``zmq``
plugin as docs/frigate.md describes it (REQ, handshake with 30 s waits, socket reset and a
new handshake after a timeout). Models: the shipped person detector (configured, and sent
as ``ssd``), the trained digits-det sent as ``yologeneric``, and one small graph per
Frigate ``model_type`` with exactly that type's input/output names and shapes.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import zmq
from support import frigate_graphs as fg
from support.configs import person_config
from support.daemons import Daemon, free_port
from support.paths import ROOT
from support.person import TRUE_BOX, iou, photo

from edged.testing.frigate_plugin import FrigateDetector

pytest.importorskip("onnx", reason="model transfer checks graphs with onnx")

PERSON = ROOT / "models" / "person" / "ssdlite-fp32.onnx"
DIGITS = ROOT / "models" / "digits-det" / "det-fp32.onnx"
SENT = ("yologeneric", "yologeneric-rows", "yolo-anchors", "yolonas", "yolox", "dfine",
        "rfdetr", "ssd-openvino", "person", "digits")
# slow shared CI cores: inference waits are generous here; the 200 ms client has its own test
WAIT_MS = 20000


def config(tmp: Path, ports: dict[str, int]) -> Path:
    p = person_config(tmp)
    tables = [f'[[server.frigate]]\nendpoint = "tcp://127.0.0.1:{ports["configured"]}"\n'
              'model = "person"\ntimeout_ms = 20000\n']
    for k in SENT:
        tables.append(f'[[server.frigate]]\nendpoint = "tcp://127.0.0.1:{ports[k]}"\n'
                      "accept_models = true\ntimeout_ms = 20000\n")
    tables.append(f'[[server.frigate]]\nendpoint = "tcp://127.0.0.1:{ports["small"]}"\n'
                  "accept_models = true\nmax_model_bytes = 100000\n")
    tables.append(f'[[server.frigate]]\nendpoint = "tcp://127.0.0.1:{ports["pinned"]}"\n'
                  'accept_models = true\nmodel_type = "yolox"\n')
    tables.append(f'[[server.frigate]]\nendpoint = "tcp://0.0.0.0:{ports["public"]}"\n'
                  "accept_models = true\n")
    text = p.read_text().replace(
        "[server]\n", f'[server]\ninsecure = true\nstate_dir = "{tmp / "state"}"\n', 1)
    p.write_text(text.replace("[metrics]", "".join(tables) + "[metrics]", 1))
    return p


def url(port: int) -> str:
    return f"tcp://127.0.0.1:{port}"


def grace_tensor(size: int = 320) -> np.ndarray:
    grace, _ = photo("grace_hopper")
    return np.ascontiguousarray(cv2.cvtColor(cv2.resize(grace, (size, size)),
                                             cv2.COLOR_BGR2RGB)[None])


def check_person(r: np.ndarray) -> None:
    assert r[0, 0] == 0 and r[0, 1] > 0.9, r[:3]
    y1, x1, y2, x2 = r[0, 2:]
    x1t, y1t, x2t, y2t = TRUE_BOX["grace_hopper"]
    assert iou((x1, y1, x2, y2), (x1t / 512, y1t / 600, x2t / 512, y2t / 600)) >= 0.5, r[0]
    k = int((r[:, 1] > 0).sum())
    assert np.all(r[k:] == 0)


def digits_case() -> tuple[np.ndarray, np.ndarray]:
    """One held-out scene as Frigate's YOLOv9 config sends it (nchw float 0..1), and its
    true boxes (x1, y1, x2, y2, class) in pixels of 160x160."""
    with np.load(ROOT / "models" / "digits-det" / "val.npz") as z:
        image, boxes = z["images"][0], z["boxes"]
    tensor = np.ascontiguousarray(image.transpose(2, 0, 1)[None].astype(np.float32) / 255.0)
    return tensor, boxes[boxes[:, 0] == 0][:, 1:]


def sent_case(key: str) -> tuple[str | Path, bytes | None, str, np.ndarray, Any]:
    """(model path as Frigate names it, bytes to send, model_type, tensor, expected)."""
    if key == "person":
        return PERSON, None, "ssd", grace_tensor(), check_person
    if key == "digits":
        tensor, truth = digits_case()
        return DIGITS, None, "yologeneric", tensor, truth
    g = fg.ALL[key]()
    tensor = np.zeros(g.shape, g.dtype)
    return f"/config/model_cache/{key}-test.onnx", g.data, g.model_type, tensor, g.want


def first_answer(f: FrigateDetector, tensor: np.ndarray, timeout_s: float = 60.0
                 ) -> np.ndarray:
    """The first non-zero reply: a graph that fits two types (``[1, N, K]``: YOLOX or a
    row-wise yolo-generic) is served again as Frigate's header names it, zeros meanwhile."""
    end = time.monotonic() + timeout_s
    while True:
        r = f.detect_raw(tensor)
        if r[0, 1] > 0 or time.monotonic() > end:
            return r
        time.sleep(0.1)


def check_sent(key: str, r: np.ndarray, expected: Any) -> None:
    if key == "person":
        expected(r)
    elif key == "digits":
        y1, x1, y2, x2 = r[0, 2:] * 160
        best = max(iou((x1, y1, x2, y2), tuple(t[:4])) for t in expected
                   if int(t[4]) == int(r[0, 0]))
        assert r[0, 1] > 0.5 and best >= 0.5, (r[:3], expected)
    else:
        assert np.allclose(r[0], expected, atol=1e-3), (r[0], expected)
        assert np.all(r[1:] == 0), r[:3]


def detector(port: int, key: str, timeout_ms: int = WAIT_MS, ctx: Any = None
             ) -> FrigateDetector:
    path, data, model_type, _, _ = sent_case(key)
    return FrigateDetector(url(port), path, model_type, timeout_ms, ctx=ctx, model_bytes=data)


def metrics_text(d: Daemon) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{d.metrics_port}/metrics").read().decode()


@pytest.fixture(scope="module")
def fd(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("frigate-handshake")
    ports = {k: free_port() for k in ("configured", *SENT, "small", "pinned", "public")}
    d = Daemon(config(tmp, ports), tmp, metrics=True)
    d.ports = ports  # type: ignore[attr-defined]
    yield d
    d.stop()


def test_configured_model_answers_available_and_loaded_and_finds_the_person(fd: Daemon
                                                                            ) -> None:
    port = fd.ports["configured"]  # type: ignore[attr-defined]
    f = FrigateDetector(url(port), "/config/model_cache/yolov9-t-320.onnx", "ssd", WAIT_MS)
    try:
        assert f.ready and f.events.transfers == 0, f.events
        a = f.events.answers[0]
        assert set(a) == {"model_available", "model_loaded", "model_name", "message"}
        assert a["model_available"] is True and a["model_loaded"] is True
        assert a["model_name"] == "yolov9-t-320.onnx"
        check_person(f.detect_raw(grace_tensor()))
    finally:
        f.close()


def test_repeated_handshakes_never_reload_and_log_once(fd: Daemon) -> None:
    port = fd.ports["configured"]  # type: ignore[attr-defined]
    loads = fd.log().count("model loaded model=person ")
    for _ in range(5):
        f = FrigateDetector(url(port), "/m/repeat.onnx", "ssd", WAIT_MS)
        assert f.ready
        f.close()
    assert fd.log().count("model loaded model=person ") == loads
    assert fd.log().count("Frigate's model 'repeat.onnx' is served by") == 1


def test_a_timeout_resets_the_socket_and_the_new_handshake_is_answered(fd: Daemon) -> None:
    """1 ms: no inference answers in time, so the client resets and asks again."""
    port = fd.ports["configured"]  # type: ignore[attr-defined]
    loads = fd.log().count("model loaded model=person ")
    f = FrigateDetector(url(port), "/m/reset.onnx", "ssd", request_timeout_ms=1)
    try:
        assert f.ready
        assert np.all(f.detect_raw(grace_tensor()) == 0)  # Frigate's zeros on a timeout
        assert f.events.timeouts == 1 and f.events.resets == 1 and f.events.handshakes == 2
        assert f.ready  # the second handshake was answered at once
    finally:
        f.close()
    assert fd.log().count("model loaded model=person ") == loads


@pytest.mark.parametrize("key", SENT)
def test_a_sent_model_of_each_type_is_stored_loaded_and_decoded(fd: Daemon, key: str) -> None:
    port = fd.ports[key]  # type: ignore[attr-defined]
    _, _, _, tensor, expected = sent_case(key)
    f = detector(port, key)
    try:
        assert f.ready, (f.events.answers, f.events.errors, fd.log_tail())
        first, second = f.events.answers
        assert first["model_available"] is False and f.events.transfers == 1
        assert set(second) == {"model_saved", "model_loaded", "model_name", "message"}
        assert second["model_saved"] is True and second["model_loaded"] is True
        check_sent(key, first_answer(f, tensor), expected)
    finally:
        f.close()
    # a second Frigate detector on the same endpoint finds it without a transfer
    g = detector(port, key)
    try:
        assert g.ready and g.events.transfers == 0
        check_sent(key, g.detect_raw(tensor), expected)
    finally:
        g.close()


def test_a_sent_model_takes_other_sizes_and_dtypes_fitted(fd: Daemon) -> None:
    """Frigate's model block may say another size or dtype than the sent model's input:
    the tensor is fitted like a frame, and the boxes still come back normalised to it."""
    port = fd.ports["rfdetr"]  # type: ignore[attr-defined]
    want = fg.rfdetr().want
    f = detector(port, "rfdetr")
    try:
        assert f.ready
        for tensor in (np.zeros((1, 640, 640, 3), np.uint8),
                       np.zeros((1, 3, 320, 320), np.float32) + 200.0):  # as sent
            r = f.detect_raw(tensor)
            assert np.allclose(r[0], want, atol=1e-3), (tensor.shape, r[0])
    finally:
        f.close()


def test_a_model_type_other_than_the_sent_models_gets_zeros_and_one_warning(fd: Daemon
                                                                            ) -> None:
    port = fd.ports["yolox"]  # type: ignore[attr-defined]
    g = fg.yolox()
    for _ in range(3):
        f = FrigateDetector(url(port), "/config/model_cache/yolox-test.onnx", "rfdetr", WAIT_MS,
                            model_bytes=g.data)
        try:
            assert f.ready
            assert np.all(f.detect_raw(np.zeros(g.shape, np.float32)) == 0)
        finally:
            f.close()
    assert fd.log().count("Frigate sends model_type 'rfdetr'") == 1
    assert "set model_type: yolox in Frigate's model block" in fd.log()


def test_the_store_is_content_addressed_with_a_name_index(fd: Daemon) -> None:
    store = fd.tmp / "state" / "store"
    index = json.loads((store / "index.json").read_text())
    import hashlib

    sha = hashlib.sha256(PERSON.read_bytes()).hexdigest()
    m = index["models"][f"frigate@{url(fd.ports['person'])}"]  # type: ignore[attr-defined]
    (entry,) = [v for v in m["versions"] if v["name"] == "ssdlite-fp32.onnx"]
    assert entry["digest"] == sha and entry["meta"]["model_type"] == "ssd"
    assert m["serving"] == sha
    assert (store / "versions" / sha / f"{sha}.onnx").read_bytes() == PERSON.read_bytes()
    assert not list(store.rglob("*.tmp"))


def manage(port: int, frames: list[bytes]) -> dict[str, Any]:
    with zmq.Context() as ctx, ctx.socket(zmq.REQ) as s:
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.RCVTIMEO, 60000)
        s.connect(url(port))
        s.send_multipart(frames)
        reply = s.recv_multipart()
    assert len(reply) == 1, reply
    return json.loads(reply[0])


def data_msg(name: str, blob: bytes) -> list[bytes]:
    return [json.dumps({"model_data": True, "model_name": name}).encode(), blob]


@pytest.mark.parametrize("where,frames,expect", [
    ("small", data_msg("trunc.onnx", PERSON.read_bytes()[:60000]), "not an ONNX model"),
    ("small", data_msg("text.onnx", b"this is not a model at all"), "not an ONNX model"),
    ("small", data_msg("big.onnx", bytes(100001)), "at most 100000"),
    ("pinned", data_msg("v9.onnx", fg.yologeneric().data), "does not fit model_type 'yolox'"),
    ("configured", data_msg("x.onnx", fg.yolox().data), "takes no model files"),
    ("public", data_msg("x.onnx", fg.yolox().data), "no CURVE"),
    ("small", [b'{"model_request": true}'], "model_name must be a non-empty string"),
    ("small", [b'{"model_data": true}', b"x"], "model_name must be a non-empty string"),
    ("small", [b'{"model_request": true, "model_name": "../../etc/passwd"}'], "no path"),
    ("small", [b'{"model_request": "yes", "model_name": "a.onnx"}'], "must be true"),
    ("small", [json.dumps({"model_data": True, "model_name": "a.onnx"}).encode()],
     "two frames"),
])
def test_bad_management_messages_get_a_json_answer(fd: Daemon, where: str,
                                                   frames: list[bytes], expect: str) -> None:
    a = manage(fd.ports[where], frames)  # type: ignore[attr-defined]
    assert expect in a["message"], a
    assert a.get("model_saved", False) is False and a.get("model_available", False) is False
    # the daemon goes on serving other endpoints
    f = FrigateDetector(url(fd.ports["configured"]), "/m/after.onnx", "ssd", WAIT_MS)  # type: ignore
    try:
        check_person(f.detect_raw(grace_tensor()))
    finally:
        f.close()


def test_refused_transfer_on_a_network_endpoint_is_what_frigate_logs(fd: Daemon) -> None:
    f = FrigateDetector(url(fd.ports["public"]), "/m/public-only.onnx", "yolox",  # type: ignore
                        WAIT_MS, model_bytes=fg.yolox().data)
    try:
        assert not f.ready and f.events.transfers == 1
        assert "no CURVE" in f.events.answers[0]["message"]
        assert f.events.answers[1]["model_saved"] is False
        assert np.all(f.detect_raw(np.zeros((1, 3, 416, 416), np.float32)) == 0)
    finally:
        f.close()


def test_inflight_gauge_counts_frigate_requests_back_to_zero(fd: Daemon) -> None:
    port = fd.ports["configured"]  # type: ignore[attr-defined]
    with zmq.Context() as ctx, ctx.socket(zmq.REQ) as s:
        s.setsockopt(zmq.RCVTIMEO, 60000)
        s.connect(url(port))
        s.send_multipart([b"not json", b"x"])
        assert len(s.recv_multipart()[0]) == 480
    text = metrics_text(fd)
    m = re.search(r"^edged_inflight_requests (\S+)$", text, re.M)
    assert m is not None and float(m.group(1)) == 0.0, m


def test_after_a_restart_sent_models_are_served_from_disk(fd: Daemon) -> None:
    """Last: restarts the module's daemon on the same ports and state directory."""
    for key in SENT:  # every endpoint has its model (the type test may run alone)
        f = detector(fd.ports[key], key)  # type: ignore[attr-defined]
        assert f.ready
        f.close()
    fd.stop()
    d = Daemon(fd.config, fd.tmp, metrics=True)
    try:
        for key in SENT:
            f = detector(d_port := fd.ports[key], key)  # type: ignore[attr-defined]
            try:
                assert f.ready and f.events.transfers == 0, (d_port, f.events.answers)
                a = f.events.answers[0]
                assert a["model_available"] is True and a["model_loaded"] is True
                _, _, _, tensor, expected = sent_case(key)
                check_sent(key, f.detect_raw(tensor), expected)
            finally:
                f.close()
        assert "serving stored model" in d.log()
    finally:
        d.stop()


def test_a_configured_model_that_failed_is_available_but_not_loaded(tmp_path: Path) -> None:
    port = free_port()
    p = person_config(tmp_path, required=False)
    text = p.read_text().replace("ssdlite-fp32.onnx", "missing.onnx").replace(
        "ssdlite-int8.onnx", "missing-too.onnx")
    p.write_text(text.replace(
        "[metrics]", f'[[server.frigate]]\nendpoint = "{url(port)}"\nmodel = "person"\n'
        "[metrics]", 1))
    d = Daemon(p, tmp_path)
    try:
        f = FrigateDetector(url(port), "/m/x.onnx", "ssd", WAIT_MS)
        a = f.events.answers[0]
        assert not f.ready and a["model_available"] is True and a["model_loaded"] is False
        assert "failed" in a["message"] and "missing.onnx" in a["message"], a
        f.close()
    finally:
        d.stop()


def test_a_handshake_during_start_up_is_answered_once_the_model_is_ready(tmp_path: Path
                                                                         ) -> None:
    port = free_port()
    p = person_config(tmp_path)
    p.write_text(p.read_text().replace(
        "[metrics]", f'[[server.frigate]]\nendpoint = "{url(port)}"\nmodel = "person"\n'
        "timeout_ms = 20000\n[metrics]", 1))
    d = Daemon(p, tmp_path, wait=False)
    try:
        f = FrigateDetector(url(port), "/m/early.onnx", "ssd", WAIT_MS)
        try:
            assert f.ready, (f.events, d.log_tail())
            check_person(f.detect_raw(grace_tensor()))
        finally:
            f.close()
    finally:
        d.stop()
