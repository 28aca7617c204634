"""The KServe v2 endpoint against Triton's own client library (tritonclient), on a real daemon.

Nobody here wrote tritonclient: if it reads edged's answers, so will Triton's tools and
anything written against Triton. Answers are compared with the native ZeroMQ client's for
the same input; errors are checked as the client shows them (its status and edged's text).
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest

tg = pytest.importorskip("tritonclient.grpc", reason="the kserve extra is not installed "
                         "(pip install 'edged[kserve]')")
th = pytest.importorskip("tritonclient.http", reason="the kserve extra is not installed "
                         "(pip install 'edged[kserve]')")
import grpc  # noqa: E402
import tritonclient.grpc.aio as tga  # noqa: E402
from support.configs import (  # noqa: E402
    digits_config,
    one_variant_model,
    person_config,
    slow_table,
)
from support.daemons import Daemon, free_port, metric, metrics, received  # noqa: E402
from support.faults import make_batch_collapsing_model  # noqa: E402
from support.paths import MODELS  # noqa: E402
from support.person import TRUE_BOX, iou, photo  # noqa: E402
from support.slow_model import BASE_TRIP, BUSY, make_slow_model  # noqa: E402
from support.waits import wait_computing, wait_until  # noqa: E402
from tritonclient.grpc import service_pb2, service_pb2_grpc  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

from edged.client import build_infer  # noqa: E402

VAL = np.load(MODELS / "validation.npz")
MAX_MESSAGE = 8 << 20


def digits_x(n: int = 1, start: int = 0) -> np.ndarray:
    return (VAL["x"][start:start + n].astype(np.float32) / 255.0)[:, None]


def slow_block(path: Path, name: str, max_batch: int, max_queue: int) -> str:
    return slow_table(path, name=name, max_batch_size=max_batch, max_queue=max_queue)


def kserve_config(tmp: Path, grpc_port: int, http_port: int, grpc_server: str) -> Path:
    slow = make_slow_model(tmp / "slow.onnx", BASE_TRIP)
    extra = (slow_block(slow, "slow", 8, 64) + slow_block(slow, "slow1", 1, 1)
             + one_variant_model("collapse", make_batch_collapsing_model(tmp / "collapse.onnx"),
                                 max_batch_size=4)
             + one_variant_model("broken", tmp / "missing.onnx"))
    person = person_config(tmp).read_text()
    person = person[person.index("[[models]]"):]
    server = (f"[server.limits]\nmax_message_bytes = {MAX_MESSAGE}\n"
              f'[server.kserve]\ngrpc = "127.0.0.1:{grpc_port}"\n'
              f'http = "127.0.0.1:{http_port}"\ngrpc_server = "{grpc_server}"\n')
    return digits_config(tmp, variants=("cnn-fp32",), server=server,
                         extra_models=extra + person)


@pytest.fixture(scope="module", params=["threads", "loop"])
def kd(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Any:
    """The daemon with each gRPC server (``[server.kserve] grpc_server``): every test runs
    against both."""
    tmp = tmp_path_factory.mktemp("kserve")
    for _ in range(3):  # free_port races other processes: take others on a clash
        g, h = free_port(), free_port()
        try:
            d = Daemon(kserve_config(tmp, g, h, request.param), tmp, metrics=True)
            break
        except RuntimeError as e:
            if "in use" not in str(e):
                raise
    d.grpc_url, d.http_url = f"127.0.0.1:{g}", f"127.0.0.1:{h}"  # type: ignore[attr-defined]
    yield d
    d.stop()


def gclient(d: Any) -> Any:
    return tg.InferenceServerClient(d.grpc_url)


def hclient(d: Any, concurrency: int = 1) -> Any:
    return th.InferenceServerClient(d.http_url, concurrency=concurrency, network_timeout=60)


def ginput(x: np.ndarray, name: str = "input") -> Any:
    i = tg.InferInput(name, list(x.shape), tg.np_to_triton_dtype(x.dtype))
    i.set_data_from_numpy(x)
    return i


def hinput(x: np.ndarray, name: str = "input", binary: bool = True) -> Any:
    i = th.InferInput(name, list(x.shape), th.np_to_triton_dtype(x.dtype))
    i.set_data_from_numpy(x, binary_data=binary)
    return i


def native(d: Daemon, model: str, x: Any, **kw: Any) -> Any:
    with d.client(timeout_s=60) as c:
        return c.infer(model, x, **kw)


def collect(done: list[Any]) -> Any:
    """An ``async_infer`` callback that keeps (result, error)."""
    return lambda result, error: done.append((result, error))


def queue_depth(d: Daemon, model: str) -> int:
    """Requests waiting in ``model``'s queue (not the one computing)."""
    return int(next(m["queue_depth"] for m in d.ctl({"op": "models"})["models"]
                    if m["name"] == model))


def grpc_error(fn: Any) -> tuple[str, str]:
    with pytest.raises(InferenceServerException) as e:
        fn()
    return e.value.status(), e.value.message()


def http_error(d: Any, path: str, body: bytes | None = None,
               headers: dict[str, str] | None = None) -> tuple[int, str]:
    """Status and edged's message as a plain HTTP client sees them (the body is JSON)."""
    req = urllib.request.Request(f"http://{d.http_url}{path}", data=body,
                                 headers=headers or {}, method="POST" if body else "GET")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    return e.value.code, json.loads(e.value.read())["error"]


# -- health and metadata ---------------------------------------------------------------

def test_health_and_metadata_over_grpc(kd: Any) -> None:
    c = gclient(kd)
    assert c.is_server_live() and c.is_server_ready()
    assert c.is_model_ready("digits") and not c.is_model_ready("nope")
    assert not c.is_model_ready("broken")  # its artifact failed to load
    md = c.get_server_metadata(as_json=True)
    assert md["name"] == "edged" and "binary_tensor_data" in md["extensions"]
    m = c.get_model_metadata("digits", as_json=True)
    assert m["inputs"] == [{"name": "input", "datatype": "FP32", "shape": ["-1", "1", "28", "28"]}]
    assert m["outputs"] == [{"name": "logits", "datatype": "FP32", "shape": ["-1", "10"]}]
    cfg = c.get_model_config("digits").config
    assert cfg.max_batch_size == 8 and list(cfg.input[0].dims) == [1, 28, 28]
    assert cfg.input[0].data_type == tg.model_config_pb2.TYPE_FP32
    assert list(cfg.output[0].dims) == [10]
    p = c.get_model_metadata("person", as_json=True)
    assert {"name": "detections", "datatype": "FP32", "shape": ["-1", "6"]} in p["outputs"]


def test_health_and_metadata_over_http(kd: Any) -> None:
    c = hclient(kd)
    assert c.is_server_live() and c.is_server_ready()
    assert c.is_model_ready("digits") and not c.is_model_ready("broken")
    assert "binary_tensor_data" in c.get_server_metadata()["extensions"]
    m = c.get_model_metadata("digits")
    assert m["inputs"][0] == {"name": "input", "datatype": "FP32", "shape": [-1, 1, 28, 28]}
    cfg = c.get_model_config("digits")
    assert cfg["max_batch_size"] == 8 and cfg["input"][0]["data_type"] == "TYPE_FP32"
    assert cfg["input"][0]["dims"] == [1, 28, 28]


def test_health_and_metadata_over_grpc_aio(kd: Any) -> None:
    async def go() -> None:
        c = tga.InferenceServerClient(kd.grpc_url)
        try:
            assert await c.is_server_ready() and await c.is_model_ready("digits")
            cfg = await c.get_model_config("digits", as_json=True)
            assert cfg["config"]["max_batch_size"] == 8
        finally:
            await c.close()
    asyncio.run(go())


# -- inference ------------------------------------------------------------------------

def test_digits_give_the_native_logits_over_grpc_and_http(kd: Any) -> None:
    x = digits_x(3, start=5)
    want = native(kd, "digits", x).outputs["logits"]
    assert np.array_equal(np.argmax(want, 1), VAL["y"][5:8])
    r = gclient(kd).infer("digits", [ginput(x)], request_id="r1")
    assert r.get_response().id == "r1"
    np.testing.assert_array_equal(r.as_numpy("logits"), want)
    params = r.get_response(as_json=True)["parameters"]
    assert params["variant"]["string_param"] == "cnn-fp32"
    h = hclient(kd)
    for binary_in in (True, False):
        for binary_out in (True, False):
            r2 = h.infer("digits", [hinput(x, binary=binary_in)], outputs=[
                th.InferRequestedOutput("logits", binary_data=binary_out)])
            np.testing.assert_allclose(r2.as_numpy("logits"), want, rtol=1e-6)
            if binary_out:  # raw bytes: bit for bit
                np.testing.assert_array_equal(r2.as_numpy("logits"), want)


def test_typed_grpc_contents_are_read_like_raw(kd: Any) -> None:
    """Other OIP clients send ``contents.fp32_contents`` instead of raw bytes."""
    x = digits_x(1, start=2)
    want = native(kd, "digits", x).outputs["logits"]
    with grpc.insecure_channel(kd.grpc_url) as ch:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(ch)
        req = service_pb2.ModelInferRequest(model_name="digits", id="typed")
        t = req.inputs.add(name="input", datatype="FP32", shape=list(x.shape))
        t.contents.fp32_contents.extend(x.ravel().tolist())
        resp = stub.ModelInfer(req, timeout=30)
        got = np.frombuffer(resp.raw_output_contents[0], "<f4").reshape(resp.outputs[0].shape)
        np.testing.assert_array_equal(got, want)
        # Raw bytes of the wrong length: refused before any backend, naming the input.
        bad = service_pb2.ModelInferRequest(model_name="digits")
        bad.inputs.add(name="input", datatype="FP32", shape=[1, 1, 28, 28])
        bad.raw_input_contents.append(b"\0" * 100)
        with pytest.raises(grpc.RpcError) as e:
            stub.ModelInfer(bad, timeout=30)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "100 bytes" in e.value.details() and "3136" in e.value.details()


def test_a_body_that_is_not_a_request_is_invalid_argument(kd: Any) -> None:
    """ModelInfer takes raw bytes and parses them itself: bytes that are no
    ModelInferRequest are the client's error, and the next request is answered."""
    x = digits_x(1, start=3)
    with grpc.insecure_channel(kd.grpc_url) as ch:
        infer = ch.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        with pytest.raises(grpc.RpcError) as e:
            infer(b"\xff\xff\xff\xff", timeout=30)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "not a ModelInferRequest" in e.value.details()
    r = gclient(kd).infer("digits", [ginput(x)])
    np.testing.assert_array_equal(r.as_numpy("logits"), native(kd, "digits", x).outputs["logits"])


def test_rpcs_edged_does_not_serve_are_unimplemented(kd: Any) -> None:
    """Repository, shared-memory and streaming RPCs: UNIMPLEMENTED, on either server."""
    with grpc.insecure_channel(kd.grpc_url) as ch:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(ch)
        with pytest.raises(grpc.RpcError) as e:
            stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(), timeout=30)
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
        with pytest.raises(grpc.RpcError) as e:
            list(stub.ModelStreamInfer(iter([service_pb2.ModelInferRequest(
                model_name="digits")]), timeout=30))
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert gclient(kd).is_server_live()


def test_the_person_detector_answers_detections(kd: Any) -> None:
    frame, _ = photo("grace_hopper")  # BGR 600x512, as a camera app has it
    want = native(kd, "person", frame).detections
    r = gclient(kd).infer("person", [ginput(frame, "image_tensor:0")])
    dets = r.as_numpy("detections")
    assert dets.dtype == np.float32 and dets.shape == (len(want), 6)
    np.testing.assert_allclose(dets, np.column_stack([want.boxes, want.scores, want.classes]),
                               rtol=1e-5, atol=1e-3)
    assert dets[0, 4] > 0.9 and iou(tuple(dets[0, :4]), TRUE_BOX["grace_hopper"]) >= 0.5
    assert r.as_numpy("detection_boxes:0") is None  # raw outputs only on request
    # Raw outputs on request, beside the detections; detection parameters map.
    r = gclient(kd).infer("person", [ginput(frame, "image_tensor:0")], outputs=[
        tg.InferRequestedOutput("detection_boxes:0"), tg.InferRequestedOutput("detections")])
    assert r.as_numpy("detection_boxes:0").shape == (1, 100, 4)
    assert r.as_numpy("detections").shape[1] == 6
    r = gclient(kd).infer("person", [ginput(frame, "image_tensor:0")],
                          parameters={"conf": 0.999})
    assert r.as_numpy("detections").shape == (0, 6)
    h = hclient(kd).infer("person", [hinput(frame, "image_tensor:0")])
    np.testing.assert_array_equal(h.as_numpy("detections"), dets)


def test_many_requests_in_flight_from_the_aio_client(kd: Any) -> None:
    x = digits_x(32)
    want = np.concatenate([native(kd, "digits", x[i:i + 8]).outputs["logits"]
                           for i in range(0, 32, 8)])

    async def go() -> list[Any]:
        c = tga.InferenceServerClient(kd.grpc_url)
        try:
            return await asyncio.gather(*(
                c.infer("digits", [ginput(x[i:i + 1])], request_id=str(i)) for i in range(32)))
        finally:
            await c.close()

    results = asyncio.run(go())
    for i, r in enumerate(results):
        assert r.get_response().id == str(i)
        np.testing.assert_allclose(r.as_numpy("logits"), want[i:i + 1], rtol=1e-5, atol=1e-5)


def test_kserve_and_native_requests_batch_together(kd: Any) -> None:
    """While a long batch computes, 4 native and 4 KServe requests queue: the next batch
    (max_batch_size 8) takes all of them."""
    x = np.zeros((1, 64), np.float32)
    before = metrics(kd)
    replies: dict[str, Any] = {}

    def grpc_side() -> None:
        c = gclient(kd)
        done = []
        for i in range(4):
            c.async_infer("slow", [ginput(x, "x")], callback=collect(done),
                          request_id=f"k{i}")
        wait_until(lambda: len(done) == 4, 60, "4 KServe replies")
        replies["kserve"] = done

    with kd.client(timeout_s=60) as c:
        since = received(kd)
        c.send(*build_infer("slow", np.full((1, 64), BUSY, np.float32), id="busy"))
        wait_computing(kd, "slow", since)
        t = threading.Thread(target=grpc_side)
        t.start()
        for i in range(4):
            c.send(*build_infer("slow", x, id=f"n{i}"))
        native_replies = [c.recv(60) for _ in range(5)]
        t.join(60)
    kserve = replies["kserve"]
    assert all(e is None for _, e in kserve), kserve
    batches = {r.header["id"]: r.header["timing"]["batch"] for r in native_replies}
    assert batches.pop("busy") == 1
    kbatches = [r.get_response(as_json=True)["parameters"]["batch"]["int64_param"]
                for r, _ in kserve]
    assert set(batches.values()) == {8}, batches
    assert {int(b) for b in kbatches} == {8}, kbatches
    after = metrics(kd)
    for name, want in (("edged_batch_size_count", 2), ("edged_batch_size_sum", 9)):
        assert metric(after, name, model="slow") - metric(before, name, model="slow") == want
    assert metric(after, "edged_kserve_requests_total", protocol="grpc", model="slow",
                  status="OK") - metric(before, "edged_kserve_requests_total",
                                        protocol="grpc", model="slow", status="OK") == 4


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_eight_closed_loop_clients_form_batches(kd: Any, protocol: str) -> None:
    """Eight clients, each sending its next request when the last is answered, on the
    small digits model (well under ``inline_max_ms``): while one batch computes the others
    queue, so batches of more than one form: eight clients are not served one by one."""
    x = digits_x(1, start=5)
    batches: list[int] = []
    errors: list[BaseException] = []

    def client() -> None:
        try:
            if protocol == "grpc":
                c, i = gclient(kd), ginput(x)
            else:
                c, i = hclient(kd), hinput(x)
            for _ in range(25):
                r = c.infer("digits", [i]).get_response(**({"as_json": True}
                                                         if protocol == "grpc" else {}))
                b = r["parameters"]["batch"]
                batches.append(int(b["int64_param"]) if protocol == "grpc" else int(b))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=client) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert len(batches) == 200
    assert max(batches) > 1, batches


def test_model_statistics_come_from_edged_metrics(kd: Any) -> None:
    c = gclient(kd)
    c.infer("digits", [ginput(digits_x(2))])
    grpc_error(lambda: c.infer("digits", [ginput(digits_x(9))]))  # a failed request
    s = c.get_inference_statistics("digits", as_json=True)["model_stats"][0]
    assert int(s["inference_stats"]["fail"]["count"]) >= 1
    assert s["name"] == "digits" and int(s["inference_count"]) >= 2
    assert int(s["execution_count"]) >= 1
    assert int(s["inference_stats"]["success"]["count"]) >= 1
    assert int(s["inference_stats"]["compute_infer"]["ns"]) > 0
    every = hclient(kd).get_inference_statistics()["model_stats"]  # GET /v2/models/stats
    assert {"digits", "person", "slow"} <= {m["name"] for m in every}


# -- errors as the client shows them --------------------------------------------------

def test_unknown_model_is_not_found(kd: Any) -> None:
    status, msg = grpc_error(lambda: gclient(kd).infer("nope", [ginput(digits_x())]))
    assert status == "StatusCode.NOT_FOUND" and "unknown model 'nope'" in msg and "digits" in msg
    status, msg = grpc_error(lambda: gclient(kd).get_model_metadata("nope"))
    assert status == "StatusCode.NOT_FOUND"
    with pytest.raises(InferenceServerException) as e:
        hclient(kd).infer("nope", [hinput(digits_x())])
    assert e.value.status() == "404" and "unknown model 'nope'" in e.value.message()
    assert http_error(kd, "/v2/models/nope")[0] == 404


@pytest.mark.parametrize("x,name,words", [
    (np.zeros((1, 1, 27, 28), np.float32), "input", ["[1, 1, 27, 28]", "float32"]),
    (np.zeros((1, 1, 28, 28), np.int64), "input", ["int64", "expects float32"]),
    (np.zeros((1, 1, 28, 28), np.float32), "pixels", ["no input 'pixels'"]),
    (np.zeros((9, 1, 28, 28), np.float32), "input", ["max_batch_size 8"]),
])
def test_bad_inputs_are_invalid_argument(kd: Any, x: np.ndarray, name: str,
                                         words: list[str]) -> None:
    status, msg = grpc_error(lambda: gclient(kd).infer("digits", [ginput(x, name)]))
    assert status == "StatusCode.INVALID_ARGUMENT", msg
    assert all(w in msg for w in words), msg
    with pytest.raises(InferenceServerException) as e:
        hclient(kd).infer("digits", [hinput(x, name)])
    assert e.value.status() == "400" and all(w in e.value.message() for w in words)


def test_bad_http_bodies_are_400_with_a_reason(kd: Any) -> None:
    code, msg = http_error(kd, "/v2/models/digits/infer", b"{not json")
    assert code == 400 and "not JSON" in msg
    body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 1, 28, 28],
                                   "data": [0.0] * 5}]}).encode()
    code, msg = http_error(kd, "/v2/models/digits/infer", body)
    assert code == 400 and "5 values" in msg and "784" in msg
    head = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 1, 28, 28],
                                   "parameters": {"binary_data_size": 3136}}]}).encode()
    code, msg = http_error(kd, "/v2/models/digits/infer", head + b"\0" * 3000,
                           {"Inference-Header-Content-Length": str(len(head))})
    assert code == 400 and "runs past" in msg


def test_too_large_requests_are_resource_exhausted(kd: Any) -> None:
    big = np.zeros((1, MAX_MESSAGE // 4 + 1000), np.float32)
    status, msg = grpc_error(lambda: gclient(kd).infer("digits", [ginput(big)]))
    assert status == "StatusCode.RESOURCE_EXHAUSTED", msg
    with pytest.raises(InferenceServerException) as e:
        hclient(kd).infer("digits", [hinput(big)])
    assert e.value.status() == "413" and "max_message_bytes" in e.value.message()
    assert gclient(kd).is_server_ready()


def test_a_full_queue_is_resource_exhausted(kd: Any) -> None:
    """slow1: one row per batch, one request queued; the third concurrent one is refused."""
    busy = np.full((1, 64), BUSY, np.float32)  # ~1 s of compute: the queue stays full
    quick = np.zeros((1, 64), np.float32)
    c = gclient(kd)
    done: list[Any] = []
    since = received(kd)
    c.async_infer("slow1", [ginput(busy, "x")], callback=collect(done), request_id="q0")
    wait_computing(kd, "slow1", since)
    c.async_infer("slow1", [ginput(quick, "x")], callback=collect(done), request_id="q1")
    wait_until(lambda: queue_depth(kd, "slow1") == 1, 10, "q1 queued behind q0")
    status, msg = grpc_error(lambda: c.infer("slow1", [ginput(quick, "x")]))
    assert status == "StatusCode.RESOURCE_EXHAUSTED" and "queue of model 'slow1' is full" in msg
    with pytest.raises(InferenceServerException) as e:
        hclient(kd).infer("slow1", [hinput(quick, "x")])
    assert e.value.status() == "429"
    wait_until(lambda: len(done) == 2, 60, "q0 and q1 answered")
    assert [e for _, e in done] == [None, None]


def test_a_request_that_would_miss_its_timeout_is_deadline_exceeded(kd: Any) -> None:
    """Triton's ``timeout`` parameter (µs) becomes edged's deadline: never computed."""
    x = np.zeros((1, 64), np.float32)
    with kd.client(timeout_s=60) as c:
        since = received(kd)
        c.send(*build_infer("slow1", np.full((1, 64), BUSY, np.float32), id="busy"))
        wait_computing(kd, "slow1", since)
        status, msg = grpc_error(lambda: gclient(kd).infer("slow1", [ginput(x, "x")],
                                                           timeout=50_000))
        assert status == "StatusCode.DEADLINE_EXCEEDED" and "not computed" in msg
        with pytest.raises(InferenceServerException) as e:
            hclient(kd).infer("slow1", [hinput(x, "x")], timeout=50_000)
        assert e.value.status() == "504" and "not computed" in e.value.message()
        answered = time.monotonic()
        assert c.recv(60).ok
        assert time.monotonic() - answered > 0.05  # both came while "busy" still computed


def test_a_model_that_failed_to_load_is_unavailable(kd: Any) -> None:
    x = np.zeros((1, 4), np.float32)
    status, msg = grpc_error(lambda: gclient(kd).infer("broken", [ginput(x, "x")]))
    assert status == "StatusCode.UNAVAILABLE" and "missing.onnx" in msg
    with pytest.raises(InferenceServerException) as e:
        hclient(kd).infer("broken", [hinput(x, "x")])
    assert e.value.status() == "503"


def test_a_failing_batch_is_internal_and_the_model_goes_on(kd: Any) -> None:
    two = np.arange(8, dtype=np.float32).reshape(2, 4)
    status, msg = grpc_error(lambda: gclient(kd).infer("collapse", [ginput(two, "x")]))
    assert status == "StatusCode.INTERNAL" and "expected 2 rows" in msg
    with pytest.raises(InferenceServerException) as e:
        hclient(kd).infer("collapse", [hinput(two, "x")])
    assert e.value.status() == "500"
    one = two[:1]
    np.testing.assert_array_equal(
        gclient(kd).infer("collapse", [ginput(one, "x")]).as_numpy("y"), one)


def test_errors_are_counted_by_protocol_and_status(kd: Any) -> None:
    text = metrics(kd)
    assert metric(text, "edged_kserve_requests_total", protocol="grpc",
                  status="NOT_FOUND") >= 1
    assert metric(text, "edged_kserve_requests_total", protocol="http",
                  status="INVALID_ARGUMENT") >= 1
    assert metric(text, "edged_kserve_request_duration_seconds_count", protocol="grpc") >= 1
    status = kd.ctl({"op": "status"})
    assert set(status["kserve"]) == {"grpc", "http"}


# -- lifecycle: reload and drain ------------------------------------------------------

def test_a_reload_that_removes_the_endpoint_closes_it(tmp_path: Path) -> None:
    g, h = free_port(), free_port()
    server = f'[server.kserve]\ngrpc = "127.0.0.1:{g}"\nhttp = "127.0.0.1:{h}"\n'
    cfg = digits_config(tmp_path, variants=("cnn-fp32",), server=server)
    d = Daemon(cfg, tmp_path)
    try:
        assert tg.InferenceServerClient(f"127.0.0.1:{g}").is_server_ready()
        grpc_only = f'[server.kserve]\ngrpc = "127.0.0.1:{g}"\n'
        cfg.write_text(cfg.read_text().replace(server, grpc_only))
        r = d.ctl({"op": "reload"})
        assert r["status"] == "OK", r
        assert tg.InferenceServerClient(f"127.0.0.1:{g}").is_server_ready()
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(f"http://127.0.0.1:{h}/v2/health/ready", timeout=5)
        # the other gRPC server on the same address: closed and reopened by the reload
        on_loop = grpc_only + 'grpc_server = "loop"\n'
        cfg.write_text(cfg.read_text().replace(grpc_only, on_loop))
        assert d.ctl({"op": "reload"})["status"] == "OK"
        r = tg.InferenceServerClient(f"127.0.0.1:{g}").infer("digits", [ginput(digits_x())])
        assert r.as_numpy("logits").shape == (1, 10)
        cfg.write_text(cfg.read_text().replace(on_loop, ""))
        assert d.ctl({"op": "reload"})["status"] == "OK"
        assert d.ctl({"op": "status"})["kserve"] == {}
        status, _ = grpc_error(lambda: tg.InferenceServerClient(f"127.0.0.1:{g}")
                               .is_server_live(client_timeout=2))
        assert status in ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED")
        with d.client() as c:  # the native endpoint never noticed
            assert c.infer("digits", digits_x()).ok
    finally:
        d.stop()


def test_a_drain_answers_kserve_requests_in_flight(tmp_path: Path) -> None:
    g = free_port()
    slow = make_slow_model(tmp_path / "slow.onnx", BASE_TRIP)
    cfg = digits_config(tmp_path, variants=("cnn-fp32",),
                        server=f'drain_timeout_s = 30\n[server.kserve]\ngrpc = "127.0.0.1:{g}"\n',
                        extra_models=slow_block(slow, "slow", 8, 64))
    d = Daemon(cfg, tmp_path, metrics=True)
    c = tg.InferenceServerClient(f"127.0.0.1:{g}")
    done: list[Any] = []
    busy = np.full((1, 64), BUSY, np.float32)
    for i in range(3):
        c.async_infer("slow", [ginput(busy if i == 0 else busy[:, :] * 0, "x")],
                      callback=collect(done), request_id=str(i))
    wait_until(lambda: received(d) == 3, 30, "the daemon holding all 3 requests")
    d.signal(signal.SIGTERM)
    assert d.proc.wait(60) == 0
    assert len(done) == 3 and all(e is None for _, e in done), done
    assert "Traceback" not in d.log()
    d.stop()


@pytest.mark.parametrize("protocol", ["kserve-grpc", "kserve-http"])
def test_edged_bench_speaks_kserve(kd: Any, tmp_path: Path, protocol: str) -> None:
    import subprocess
    import sys

    out = tmp_path / "bench.json"
    address = kd.grpc_url if protocol == "kserve-grpc" else kd.http_url
    r = subprocess.run([sys.executable, "-m", "edged", "bench", "--endpoint", kd.tcp,
                        "--model", "digits", "--duration", "1", "--in-flight", "2",
                        "--protocol", protocol, "--kserve", address, "--json", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rnd = json.loads(out.read_text())["rounds"][0]["daemon"]
    assert rnd["protocol"] == protocol and rnd["ok"] > 0 and set(rnd["statuses"]) == {"OK"}
    assert rnd["variants"] == {"cnn-fp32": rnd["ok"]}


def test_a_stream_parameter_keeps_the_freshest_frame(kd: Any) -> None:
    """``stream``: while a frame of a camera waits, a newer one replaces it (ABORTED)."""
    x = np.zeros((1, 64), np.float32)
    c = gclient(kd)
    with kd.client(timeout_s=60) as n:
        since = received(kd)
        n.send(*build_infer("slow", np.full((1, 64), BUSY / 2, np.float32), id="busy"))
        wait_computing(kd, "slow", since)
        done: list[Any] = []
        c.async_infer("slow", [ginput(x, "x")], callback=collect(done), request_id="old",
                      parameters={"stream": "cam-1"})
        wait_until(lambda: queue_depth(kd, "slow") == 1, 10, "the old frame waiting")
        r = c.infer("slow", [ginput(x, "x")], request_id="new", parameters={"stream": "cam-1"})
        assert r.get_response().id == "new"
        assert n.recv(60).ok
    wait_until(lambda: bool(done), 60, "the old frame answered")
    err = done[0][1]
    assert err is not None and err.status() == "StatusCode.ABORTED", done
    assert "superseded by a newer frame" in err.message()
