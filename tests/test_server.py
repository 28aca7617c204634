"""The serving core against a real daemon over real ZeroMQ sockets."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import onnxruntime as ort
import pytest
import zmq
from support.configs import digits_config, slow_config
from support.daemons import Daemon, inflight, received
from support.paths import MODELS
from support.waits import wait_computing, wait_until

from edged.client import Client, build_infer

VAL = np.load(MODELS / "validation.npz")
X = VAL["x"]  # uint8 [M,28,28]
Y = VAL["y"]


def tensor(i: int) -> np.ndarray:
    return (X[i].astype(np.float32) / 255.0)[None, None]


@pytest.fixture(scope="module")
def reference() -> ort.InferenceSession:
    return ort.InferenceSession(str(MODELS / "cnn-fp32.onnx"), providers=["CPUExecutionProvider"])


# -- happy paths ------------------------------------------------------------------------

@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_infer_dealer_over_ipc_and_tcp(daemon: Daemon, reference: Any, transport: str) -> None:
    ep = daemon.ipc if transport == "ipc" else daemon.tcp
    with daemon.client(ep) as c:
        r = c.infer("digits", tensor(0), id="a-1")
    assert r.ok, r.header
    assert r.header["id"] == "a-1"
    assert r.header["model"] == "digits" and r.header["variant"] == "cnn-fp32"
    assert set(r.header["timing"]) >= {"queue_us", "compute_us", "batch"}
    want = reference.run(None, {"input": tensor(0)})[0]
    np.testing.assert_allclose(r.outputs["logits"], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_infer_req_client_gets_delimiter_echoed(daemon: Daemon, transport: str) -> None:
    ep = daemon.ipc if transport == "ipc" else daemon.tcp
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.REQ)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(ep)
    try:
        header, frames = build_infer("digits", tensor(1), id=7)
        s.send_multipart([json.dumps({"v": 1, **header}).encode(), *frames])
        assert s.poll(10000)
        reply = s.recv_multipart()
        h = json.loads(reply[0])
        assert h["status"] == "OK" and h["id"] == 7
        assert int(np.argmax(np.frombuffer(reply[1], np.float32))) == Y[1]
        # REQ enforces strict send/recv alternation: a second round trip works too.
        s.send_multipart([json.dumps({"v": 1, "op": "health", "id": 8}).encode()])
        assert s.poll(10000)
        assert json.loads(s.recv_multipart()[0])["id"] == 8
    finally:
        s.close()


def test_encoded_images_and_raw_frames_are_preprocessed(daemon: Daemon) -> None:
    samples = sorted((MODELS / "samples").glob("digit*"))
    assert samples
    with daemon.client() as c:
        for p in samples:
            label = int(p.name[5])
            r = c.infer("digits", p)
            assert r.ok, (p, r.header)
            assert int(np.argmax(r.outputs["logits"])) == label, p
        # A raw BGR camera frame, larger than the model input: resized + gray-converted.
        img = cv2.imread(str(samples[0]), cv2.IMREAD_COLOR)
        frame = cv2.resize(img, (96, 96), interpolation=cv2.INTER_LINEAR)
        r = c.infer("digits", frame)
        assert r.ok, r.header
        assert int(np.argmax(r.outputs["logits"])) == int(samples[0].name[5])
        # A raw uint8 gray frame HxW.
        r = c.infer("digits", X[3])
        assert r.ok and int(np.argmax(r.outputs["logits"])) == Y[3]


def test_models_and_health_ops(daemon: Daemon) -> None:
    with daemon.client() as c:
        h = c.health()
        assert h.ok and h.header["models"] == {"digits": "ready"}
        m = c.models().header["models"][0]
    assert m["name"] == "digits"
    assert m["inputs"] == [{"name": "input", "dtype": "float32", "shape": [-1, 1, 28, 28]}]
    assert m["outputs"][0]["name"] == "logits"
    assert m["variants"] == ["cnn-fp32", "cnn-int8", "small-fp32"]
    assert m["active_variant"] == "cnn-fp32" and m["state"] == "ready"


def test_output_selection_and_multirow_requests(daemon: Daemon, reference: Any) -> None:
    batch = np.concatenate([tensor(i) for i in range(5)])
    with daemon.client() as c:
        r = c.infer("digits", batch, outputs=["logits"])
        assert r.ok
        np.testing.assert_allclose(r.outputs["logits"],
                                   reference.run(None, {"input": batch})[0], atol=1e-5)
        bad = c.infer("digits", batch, outputs=["nope"], raise_on_error=False)
        assert bad.status == "INVALID_ARGUMENT" and "nope" in bad.header["error"]
        big = c.infer("digits", np.zeros((9, 1, 28, 28), np.float32), raise_on_error=False)
        assert big.status == "INVALID_ARGUMENT" and "max_batch_size" in big.header["error"]


def test_four_pipelined_clients_get_their_own_correct_answers(daemon: Daemon,
                                                              reference: Any) -> None:
    n_clients, n_req = 4, 100
    expected = reference.run(None, {"input": np.concatenate([tensor(i) for i in range(n_req)])})[0]
    results: dict[int, list[Any]] = {}

    def run(k: int) -> None:
        with daemon.client(daemon.tcp if k % 2 else daemon.ipc, timeout_s=30) as c:
            for i in range(n_req):  # all in flight at once (DEALER pipelining)
                h, f = build_infer("digits", tensor(i), id=f"c{k}-{i}")
                c.send(h, f)
            results[k] = [c.recv() for _ in range(n_req)]

    threads = [threading.Thread(target=run, args=(k,)) for k in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    batches = []
    for k in range(n_clients):
        got = results[k]
        assert len(got) == n_req
        ids = sorted(r.header["id"] for r in got)
        assert ids == sorted(f"c{k}-{i}" for i in range(n_req))
        for r in got:
            assert r.ok, r.header
            i = int(r.header["id"].split("-")[1])
            np.testing.assert_allclose(r.outputs["logits"][0], expected[i], atol=1e-4)
            batches.append(r.header["timing"]["batch"])
    assert max(batches) > 1, "no batch formed under concurrency"
    assert max(batches) <= 8


# -- bad input: each gets the right status, and the daemon keeps serving -------------------

def _raw(daemon: Daemon, frames: list[bytes], timeout: float = 5.0) -> dict[str, Any] | None:
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(daemon.tcp)
    try:
        s.send_multipart(frames)
        if not s.poll(int(timeout * 1000)):
            return None
        return dict(json.loads(s.recv_multipart()[0]))
    finally:
        s.close()


def _hdr(**kw: Any) -> bytes:
    return json.dumps({"v": 1, "id": "bad", "op": "infer", "model": "digits", **kw}).encode()


GOOD_META = [{"name": "input", "dtype": "float32", "shape": [1, 1, 28, 28]}]
GOOD = np.zeros((1, 1, 28, 28), np.float32).tobytes()

BAD_CASES = {
    "not json": ([b"{not json"], "INVALID_ARGUMENT", None),
    "json but not an object": ([b"[1,2]"], "INVALID_ARGUMENT", None),
    "invalid utf-8": ([b"\xff\xfe\x00"], "INVALID_ARGUMENT", None),
    "missing tensor frame": ([_hdr(inputs=GOOD_META)], "INVALID_ARGUMENT", "bad"),
    "extra frame": ([_hdr(inputs=GOOD_META), GOOD, GOOD], "INVALID_ARGUMENT", "bad"),
    "wrong version": ([json.dumps({"v": 2, "id": "bad"}).encode()], "UNSUPPORTED_VERSION", "bad"),
    "no version": ([json.dumps({"id": "bad", "op": "health"}).encode()],
                   "UNSUPPORTED_VERSION", "bad"),
    "version true": ([json.dumps({"v": True, "id": "bad", "op": "health"}).encode()],
                     "UNSUPPORTED_VERSION", "bad"),
    "png declared as jpeg": ([_hdr(inputs=[{"encoding": "jpeg"}]),
                              (MODELS / "samples" / "digit0_124.png").read_bytes()],
                             "INVALID_ARGUMENT", "bad"),
    "not an image at all": ([_hdr(inputs=[{"encoding": "png"}]), b"GIF89a" + b"\x00" * 64],
                            "INVALID_ARGUMENT", "bad"),
    "unknown model": ([_hdr(model="nope", inputs=GOOD_META), GOOD], "NOT_FOUND", "bad"),
    "unknown op": ([json.dumps({"v": 1, "id": "bad", "op": "explode"}).encode()],
                   "NOT_FOUND", "bad"),
    "unknown header key": ([_hdr(inputs=GOOD_META, colour="red"), GOOD],
                           "INVALID_ARGUMENT", "bad"),
    "dtype mismatch": ([_hdr(inputs=[{"name": "input", "dtype": "int32",
                                      "shape": [1, 1, 28, 28]}]), GOOD],
                       "INVALID_ARGUMENT", "bad"),
    "unknown dtype": ([_hdr(inputs=[{"dtype": "object", "shape": [1]}]), b"x"],
                      "INVALID_ARGUMENT", "bad"),
    "byte length != shape": ([_hdr(inputs=GOOD_META), GOOD[:-4]], "INVALID_ARGUMENT", "bad"),
    "negative dim": ([_hdr(inputs=[{"dtype": "float32", "shape": [1, -1, 28, 28]}]), GOOD],
                     "INVALID_ARGUMENT", "bad"),
    "huge dims": ([_hdr(inputs=[{"dtype": "float32", "shape": [1 << 30, 1 << 30]}]), GOOD],
                  "INVALID_ARGUMENT", "bad"),
    "rank too high": ([_hdr(inputs=[{"dtype": "uint8", "shape": [1] * 20}]), b"\x00"],
                      "INVALID_ARGUMENT", "bad"),
    "wrong shape": ([_hdr(inputs=[{"dtype": "float32", "shape": [1, 1, 27, 28]}]),
                     np.zeros((1, 1, 27, 28), np.float32).tobytes()], "INVALID_ARGUMENT", "bad"),
    "corrupt jpeg": ([_hdr(inputs=[{"encoding": "jpeg"}]), b"\xff\xd8\xff\xe0garbage"],
                     "INVALID_ARGUMENT", "bad"),
    "jpeg claiming 60000x60000": (
        [_hdr(inputs=[{"encoding": "jpeg"}]),
         b"\xff\xd8\xff\xc0\x00\x11\x08\xea\x60\xea\x60\x03" + b"\x00" * 64],
        "INVALID_ARGUMENT", "bad"),
    "bad timeout": ([_hdr(inputs=GOOD_META, timeout_ms=-5), GOOD], "INVALID_ARGUMENT", "bad"),
    "bad priority": ([_hdr(inputs=GOOD_META, priority="high"), GOOD], "INVALID_ARGUMENT", "bad"),
    "id too long": ([json.dumps({"v": 1, "id": "x" * 5000, "op": "health"}).encode()],
                    "INVALID_ARGUMENT", None),
    "empty inputs": ([_hdr(inputs=[])], "INVALID_ARGUMENT", "bad"),
    "zero rows": ([_hdr(inputs=[{"dtype": "float32", "shape": [0, 1, 28, 28]}]), b""],
                  "INVALID_ARGUMENT", "bad"),
}


@pytest.mark.parametrize("case", list(BAD_CASES))
def test_bad_input_gets_specific_error_and_daemon_keeps_serving(daemon: Daemon,
                                                                 case: str) -> None:
    frames, status, rid = BAD_CASES[case]
    reply = _raw(daemon, frames)
    assert reply is not None, f"{case}: no reply"
    assert reply["status"] == status, (case, reply)
    assert reply["id"] == rid
    assert isinstance(reply.get("error"), str) and len(reply["error"]) > 10
    with daemon.client() as c:
        assert c.infer("digits", tensor(2)).ok


def test_message_over_the_size_limit(make_daemon: Any, tmp_path: Path) -> None:
    cfg = digits_config(tmp_path, server="[server.limits]\nmax_message_bytes = 100000\n")
    d = make_daemon(cfg)
    # Several frames, each under the limit, adding up to more: answered by id.
    meta = [{"dtype": "uint8", "shape": [60000]}, {"dtype": "uint8", "shape": [60000]}]
    reply = _raw(d, [_hdr(inputs=meta), b"\x00" * 60000, b"\x00" * 60000])
    assert reply is not None and reply["status"] == "RESOURCE_EXHAUSTED"
    assert "limit" in reply["error"] and reply["id"] == "bad"
    # One frame over the limit but under the hard cap (2x): read and answered too.
    reply = _raw(d, [_hdr(inputs=meta[:1]), b"\x00" * 150000])
    assert reply is not None and reply["status"] == "RESOURCE_EXHAUSTED"
    assert "150" in reply["error"] and reply["id"] == "bad"
    # Above the hard cap: libzmq drops that peer before anything is allocated.
    assert _raw(d, [_hdr(inputs=meta[:1]), b"\x00" * 200001], timeout=1.0) is None
    with d.client() as c:
        assert c.infer("digits", tensor(0)).ok
    assert d.proc.poll() is None


# -- queueing behaviour on a busy model ----------------------------------------------------

X64 = np.ones((1, 64), np.float32)


@pytest.fixture
def slow_daemon(make_daemon: Any, tmp_path: Path) -> Daemon:
    return make_daemon(slow_config(tmp_path), metrics=True)


def _collect(c: Client, n: int, timeout: float = 20.0) -> dict[Any, dict[str, Any]]:
    out = {}
    for _ in range(n):
        r = c.recv(timeout)
        out[r.header["id"]] = r.header
    return out


def test_deadline_exceeded_requests_are_answered_and_not_computed(slow_daemon: Daemon) -> None:
    with slow_daemon.client() as c:
        c.send(*build_infer("slow", X64, id="busy"))
        wait_computing(slow_daemon, "slow")
        c.send(*build_infer("slow", X64, id="late", timeout_ms=30))
        first = c.recv(10)
        # The late one is answered at its deadline, while "busy" is still computing.
        assert first.header["id"] == "late", first.header
        assert first.status == "DEADLINE_EXCEEDED"
        assert "not computed" in first.header["error"]
        assert c.recv(10).header["id"] == "busy"
        r = c.infer("slow", X64, timeout_ms=10000)
        assert r.ok
    m = slow_daemon.ctl({"op": "models"})["models"]
    assert next(x for x in m if x["name"] == "slow")["queue_depth"] == 0


def test_a_compute_estimate_over_the_deadline_is_relearnt(slow_daemon: Daemon) -> None:
    """The batcher refuses a request its compute-time estimate says would be late. The
    estimate only changes when something computes, so after a quiet second one request
    goes through whatever the estimate says: a slow spell cannot lock a model into
    refusing every short-deadline request (Frigate's 200 ms) for good."""
    with slow_daemon.client(timeout_s=30) as c:
        for _ in range(2):
            assert c.infer("slow", X64).ok  # the estimate is now the slow model's time
        short = 20  # ms: well under one compute
        r = c.infer("slow", X64, timeout_ms=short, raise_on_error=False)
        assert r.status == "DEADLINE_EXCEEDED" and "would finish after" in r.header["error"]
        time.sleep(1.3)  # nothing computed for longer than PROBE_AFTER_S
        r = c.infer("slow", X64, timeout_ms=short, raise_on_error=False)
        assert r.ok, r.header  # computed: its time is learnt again
        r = c.infer("slow", X64, timeout_ms=short, raise_on_error=False)
        assert r.status == "DEADLINE_EXCEEDED"  # just computed: the estimate stands


def test_freshest_frame_wins_per_stream(slow_daemon: Daemon) -> None:
    with slow_daemon.client() as c:
        c.send(*build_infer("slow", X64, id="busy"))
        wait_computing(slow_daemon, "slow")
        for i in range(3):
            c.send(*build_infer("slow", X64, id=f"cam1-{i}", stream="cam1"))
        c.send(*build_infer("slow", X64, id="cam2-0", stream="cam2"))
        got = _collect(c, 5)
    assert got["busy"]["status"] == "OK"
    assert got["cam1-0"]["status"] == "DROPPED" and "stream" in got["cam1-0"]["error"]
    assert got["cam1-1"]["status"] == "DROPPED"
    assert got["cam1-2"]["status"] == "OK"
    assert got["cam2-0"]["status"] == "OK"


def test_queue_full_is_resource_exhausted(slow_daemon: Daemon) -> None:
    with slow_daemon.client() as c:
        c.send(*build_infer("slow", X64, id="busy"))
        wait_computing(slow_daemon, "slow")
        for i in range(5):  # max_queue = 4
            c.send(*build_infer("slow", X64, id=f"q{i}"))
        got = _collect(c, 6, timeout=30)
    statuses = [got[f"q{i}"]["status"] for i in range(5)]
    assert statuses[:4] == ["OK"] * 4
    assert statuses[4] == "RESOURCE_EXHAUSTED" and "full" in got["q4"]["error"]
    # Other models are unaffected by the full queue.
    with slow_daemon.client() as c:
        assert c.infer("digits", tensor(0)).ok


def test_priority_orders_the_queue(slow_daemon: Daemon) -> None:
    with slow_daemon.client() as c:
        c.send(*build_infer("slow", X64, id="busy"))
        wait_computing(slow_daemon, "slow")
        c.send(*build_infer("slow", X64, id="low", priority=5))
        c.send(*build_infer("slow", X64, id="high", priority=0))
        order = [c.recv(20).header["id"] for _ in range(3)]
    assert order == ["busy", "high", "low"]


def test_client_vanishing_with_requests_in_flight_costs_nothing(slow_daemon: Daemon) -> None:
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.connect(slow_daemon.tcp)
    for i in range(4):
        h, f = build_infer("slow", X64, id=i)
        s.send_multipart([json.dumps({"v": 1, **h}).encode(), *f])
    wait_until(lambda: received(slow_daemon) == 4, 10, "the four requests received")
    s.close(linger=0)
    ctx.term()
    # all four computed and their replies found no peer (ROUTER_MANDATORY: EHOSTUNREACH,
    # ignored)
    wait_until(lambda: inflight(slow_daemon) == 0, 30, "the four requests answered")
    with slow_daemon.client() as c:
        assert c.infer("slow", X64).ok
        assert c.infer("digits", tensor(0)).ok
    assert slow_daemon.proc.poll() is None
    assert "Traceback" not in slow_daemon.log()


def test_auto_batch_profiles_each_variant_and_caps_batches(make_daemon: Any,
                                                           tmp_path: Path) -> None:
    d = make_daemon(digits_config(tmp_path, model_extra="auto_batch = true\n"))
    m = d.ctl({"op": "models"})["models"][0]
    cap = m["batch_cap"]
    assert isinstance(cap, int) and 1 <= cap <= 8
    assert "auto_batch model=digits variant=cnn-fp32 rows_per_s=1:" in d.log()
    with d.client(timeout_s=30) as c:
        for i in range(64):
            c.send(*build_infer("digits", tensor(i % 8), id=i))
        batches = [c.recv().header["timing"]["batch"] for _ in range(64)]
    assert max(batches) <= cap
    r = d.ctl({"op": "swap", "model": "digits", "variant": "small-fp32"})
    assert r["status"] == "OK" and 1 <= r["model"]["batch_cap"] <= 8
    assert "auto_batch model=digits variant=small-fp32" in d.log()
