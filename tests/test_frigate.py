"""Frigate's ``zmq`` detector protocol against the real daemon.

The client here speaks Frigate's side byte for byte, as frigate/detectors/plugins/zmq_ipc.py
does: a REQ socket, ``[json header, raw tensor]`` out, one 480-byte frame back. The
model is the shipped person detector (config.toml's own block); photos from packages.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import zmq
from support.configs import person_config
from support.daemons import Daemon, free_port, metric, metrics
from support.paths import ROOT
from support.person import TRUE_BOX, iou, photo

from edged.config.file import load_config
from edged.errors import ConfigError
from edged.protocols.frigate.wire import RESULT_BYTES


def frigate_config(tmp: Path, ports: tuple[int, int], timeout_ms: float = 200.0,
                   max_batch: int = 4) -> Path:
    p = person_config(tmp)
    text = p.read_text().replace("max_batch_size = 4", f"max_batch_size = {max_batch}")
    frigate = (f'[[server.frigate]]\nendpoint = "tcp://127.0.0.1:{ports[0]}"\nmodel = "person"\n'
               f"timeout_ms = {timeout_ms}\n"
               f'[[server.frigate]]\nendpoint = "tcp://127.0.0.1:{ports[1]}"\nmodel = "person"\n'
               "min_score = 0.6\nclass_map = { 0 = 7 }\n")
    text = text.replace("[metrics]", frigate + "[metrics]", 1)
    p.write_text(text)
    return p


def frigate_tensor(frame_bgr: np.ndarray, layout: str = "nhwc", dtype: str = "uint8",
                   size: int = 320) -> np.ndarray:
    """What Frigate's detector process sends: the region resized, RGB, its model layout."""
    rgb = cv2.cvtColor(cv2.resize(frame_bgr, (size, size)), cv2.COLOR_BGR2RGB)
    t = rgb[None]
    if layout == "nchw":
        t = t.transpose(0, 3, 1, 2)
    return np.ascontiguousarray(t.astype(dtype))


def ask(sock: zmq.Socket, tensor: np.ndarray, model_type: str = "ssd") -> list[bytes]:
    header = {"shape": list(tensor.shape), "dtype": tensor.dtype.name, "model_type": model_type}
    sock.send_multipart([json.dumps(header).encode("utf-8"), tensor.tobytes(order="C")])
    return sock.recv_multipart()


def req_socket(ctx: zmq.Context, port: int) -> zmq.Socket:
    s = ctx.socket(zmq.REQ)
    s.setsockopt(zmq.RCVTIMEO, 20000)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(f"tcp://127.0.0.1:{port}")
    return s


def rows(reply: list[bytes]) -> np.ndarray:
    assert len(reply) == 1 and len(reply[0]) == RESULT_BYTES, [len(f) for f in reply]
    return np.frombuffer(reply[0], "<f4").reshape(20, 6)


@pytest.fixture(scope="module")
def fd(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("frigate")
    ports = (free_port(), free_port())
    # A generous deadline: the 2 shared cores of CI are slow; deadlines have their own test.
    d = Daemon(frigate_config(tmp, ports, timeout_ms=10000), tmp, metrics=True)
    d.frigate_ports = ports  # type: ignore[attr-defined]
    with zmq.Context() as ctx:
        d.ctx = ctx  # type: ignore[attr-defined]
        yield d
        d.stop()


def check_grace(r: np.ndarray, class_id: int) -> None:
    assert r[0, 0] == class_id and r[0, 1] > 0.9, r[:3]
    y1, x1, y2, x2 = r[0, 2:]
    x1t, y1t, x2t, y2t = TRUE_BOX["grace_hopper"]
    assert iou((x1, y1, x2, y2), (x1t / 512, y1t / 600, x2t / 512, y2t / 600)) >= 0.5, r[0]
    k = int((r[:, 1] > 0).sum())
    assert np.all(r[k:] == 0) and np.all(np.diff(r[:k, 1]) <= 0)  # zero rows after the last


@pytest.mark.parametrize("layout,dtype", [("nhwc", "uint8"), ("nchw", "float32"),
                                          ("nhwc", "float32")])
def test_person_in_row_zero_for_each_layout(fd: Daemon, layout: str, dtype: str) -> None:
    grace, _ = photo("grace_hopper")
    with req_socket(fd.ctx, fd.frigate_ports[0]) as s:
        check_grace(rows(ask(s, frigate_tensor(grace, layout, dtype))), 0)


def test_float_denorm_and_model_sized_tensor(fd: Daemon) -> None:
    grace, _ = photo("grace_hopper")
    with req_socket(fd.ctx, fd.frigate_ports[0]) as s:
        check_grace(rows(ask(s, frigate_tensor(grace, "nchw", "float32") / 255.0)), 0)
        # 300x300 is the model's own input: the identity transform, no resize
        check_grace(rows(ask(s, frigate_tensor(grace, size=300))), 0)


def test_class_map_and_min_score(fd: Daemon) -> None:
    grace, _ = photo("grace_hopper")
    with req_socket(fd.ctx, fd.frigate_ports[1]) as s:
        r = rows(ask(s, frigate_tensor(grace)))
    check_grace(r, 7)
    assert np.all(r[r[:, 1] > 0, 1] >= 0.6)


@pytest.mark.parametrize("bad", [
    [b"not json", b"x"],
    [b'{"shape":[1,320,320,3],"dtype":"complex64","model_type":"ssd"}', bytes(320 * 320 * 3)],
    [b'{"shape":[1,320,320,3],"dtype":"uint8","model_type":"ssd"}', bytes(10)],
    [b'{"shape":[1,320,320,5],"dtype":"uint8","model_type":"ssd"}', bytes(320 * 320 * 5)],
    [b'{"shape":[1,320,320,3],"dtype":"uint8"}'],
])
def test_garbage_gets_zeros_and_the_next_request_works(fd: Daemon, bad: list[bytes]) -> None:
    grace, _ = photo("grace_hopper")
    before = metric(metrics(fd), "edged_frigate_requests_total", status="INVALID_ARGUMENT")
    with req_socket(fd.ctx, fd.frigate_ports[0]) as s:
        s.send_multipart(bad)
        assert rows(s.recv_multipart()).tolist() == np.zeros((20, 6)).tolist()
        check_grace(rows(ask(s, frigate_tensor(grace))), 0)
    after = metric(metrics(fd), "edged_frigate_requests_total", status="INVALID_ARGUMENT")
    assert after == before + 1


def test_many_cameras_batch_together(fd: Daemon) -> None:
    grace, _ = photo("grace_hopper")
    tensor = frigate_tensor(grace)
    before = metrics(fd)
    results: list[np.ndarray] = []
    errors: list[BaseException] = []

    def camera() -> None:
        try:
            with req_socket(fd.ctx, fd.frigate_ports[0]) as s:
                for _ in range(15):
                    results.append(rows(ask(s, tensor)))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=camera) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 90
    statuses = re.findall(r'^edged_frigate_requests_total\{.*status="(\w+)".*\} (\S+)$',
                          metrics(fd), re.M)
    for r in results:
        assert r[0, 1] > 0, statuses
        check_grace(r, 0)
    after = metrics(fd)
    batches = (metric(after, "edged_batch_size_count", model="person")
               - metric(before, "edged_batch_size_count", model="person"))
    rows_computed = (metric(after, "edged_batch_size_sum", model="person")
                     - metric(before, "edged_batch_size_sum", model="person"))
    assert rows_computed == 90 and batches < 90  # some batches held several cameras
    ok = metric(after, "edged_frigate_requests_total", status="OK")
    assert ok - metric(before, "edged_frigate_requests_total", status="OK") == 90
    assert metric(after, "edged_frigate_request_duration_seconds_count") >= 90


def test_a_request_past_its_deadline_is_never_computed(tmp_path: Path) -> None:
    """timeout_ms (Frigate's request_timeout_ms) bounds the wait: with 1 ms, every frame that
    must wait behind a running batch is answered zeros and never reaches the model."""
    ports = (free_port(), free_port())
    d = Daemon(frigate_config(tmp_path, ports, timeout_ms=1, max_batch=1), tmp_path,
               metrics=True)
    grace, _ = photo("grace_hopper")
    tensor = frigate_tensor(grace)
    try:
        with zmq.Context() as ctx:
            socks = [req_socket(ctx, ports[0]) for _ in range(8)]
            header = json.dumps({"shape": list(tensor.shape), "dtype": "uint8",
                                 "model_type": "ssd"}).encode()
            for _ in range(3):
                for s in socks:
                    s.send_multipart([header, tensor.tobytes()])
                replies = [rows(s.recv_multipart()) for s in socks]
                assert all(r.shape == (20, 6) for r in replies)
            for s in socks:
                s.close()
        text = metrics(d)
        computed = metric(text, "edged_batch_size_sum", model="person")
        late = metric(text, "edged_frigate_requests_total", status="DEADLINE_EXCEEDED")
        ok = metric(text, "edged_frigate_requests_total", status="OK")
        every = metric(text, "edged_frigate_requests_total")
        assert late >= 1 and every == 24, text  # each request counted once, whatever its end
        assert computed == ok  # a late request never ran
    finally:
        d.stop()


def test_frigate_model_must_be_a_detector(tmp_path: Path) -> None:
    p = frigate_config(tmp_path, (free_port(), free_port()))
    text = p.read_text().replace('model = "person"\ntimeout_ms', 'model = "nope"\ntimeout_ms')
    p.write_text(text)
    with pytest.raises(ConfigError, match=r"server\.frigate\[0\]\.model.*'nope'"):
        load_config(p)
    digits = ROOT / "config.toml"
    text = digits.read_text().replace(
        "[metrics]", '[[server.frigate]]\nendpoint = "ipc://frigate.sock"\nmodel = "digits"\n'
        "class_map = { x = 1 }\npriority = 5000\n[metrics]", 1)
    q = tmp_path / "digits.toml"
    q.write_text(text.replace('path = "models/', f'path = "{ROOT}/models/'))
    with pytest.raises(ConfigError) as e:
        load_config(q)
    assert "server.frigate[0].model: model 'digits' is not a detection model" in str(e.value)
    assert "server.frigate[0].class_map.x" in str(e.value)
    assert "server.frigate[0].priority: must be 0..1000" in str(e.value)


def test_labelmap_command_prints_a_frigate_labelmap(tmp_path: Path) -> None:
    p = frigate_config(tmp_path, (free_port(), free_port()))
    out = subprocess.run([sys.executable, "-m", "edged", "frigate", "labelmap", "person",
                          "--config", str(p)], capture_output=True, text=True, timeout=60,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "0 person\n"
    out = subprocess.run([sys.executable, "-m", "edged", "frigate", "labelmap", "person",
                          "--config", str(p), "--endpoint", "1"], capture_output=True,
                         text=True, timeout=60, cwd=ROOT)
    assert out.stdout == "7 person\n", out.stderr


def test_example_frigate_config_pairs_with_a_valid_edged_table(tmp_path: Path) -> None:
    yaml = pytest.importorskip("yaml")
    text = (ROOT / "examples" / "frigate" / "config.yml").read_text()
    frigate = yaml.safe_load(text)
    assert {d["type"] for d in frigate["detectors"].values()} == {"zmq"}
    assert all(d["request_timeout_ms"] == 200 for d in frigate["detectors"].values())
    assert frigate["model"]["input_tensor"] == "nhwc" and frigate["model"]["model_type"] == "ssd"
    lines = text[text.index("#   [[server.frigate]]"):text.index("# Frigate sends")]
    table = "\n".join(line[4:] for line in lines.splitlines() if line.startswith("#   "))
    toml = (ROOT / "config.toml").read_text().replace("[metrics]", table + "\n[metrics]", 1)
    toml = toml.replace("insecure = false", "insecure = true")
    p = tmp_path / "paired.toml"
    p.write_text(toml.replace('path = "models/', f'path = "{ROOT}/models/'))
    f = load_config(p).server.frigate[0]
    assert f.model == "person" and f.timeout_ms == 200 and f.min_score == 0.4


def test_status_lists_the_frigate_endpoints(fd: Daemon) -> None:
    from edged.cli.status_text import format_status

    r = fd.ctl({"op": "status"})
    want = {f"tcp://127.0.0.1:{p}": "person" for p in fd.frigate_ports}
    assert r["frigate"] == want
    rows = [ln.split() for ln in format_status(r).splitlines() if ln.startswith("frigate ")]
    assert ["frigate", f"tcp://127.0.0.1:{fd.frigate_ports[0]}", "person"] in rows
