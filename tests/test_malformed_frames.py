"""Every malformed frame is the client's error, on every model kind and protocol.

A frame of 5 or 2 channels, of the wrong dtype, with no pixels, or of four dimensions, sent
to a classifier (``digits``), a detector (``digits-det``) and a pipeline (``digits-reader``)
over the native protocol, KServe gRPC and HTTP, and (detector and pipeline) Frigate's, is
answered INVALID_ARGUMENT (KServe: INVALID_ARGUMENT / HTTP 400; Frigate: its all-zero reply,
counted under that status) with a sentence naming the channels, never INTERNAL: a
5-channel frame once reached OpenCV's letterbox and answered ``INTERNAL: preprocessing
failed: ... copyMakeBorder``. The real daemon, the shipped models, real sockets.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import zmq
from support.daemons import Daemon, free_port, metric, metrics
from support.pipelines import pipeline_config

from edged.testing.frigate_plugin import FrigateDetector

tg = pytest.importorskip("tritonclient.grpc", reason="the kserve extra is not installed")
th = pytest.importorskip("tritonclient.http", reason="the kserve extra is not installed")
from tritonclient.utils import InferenceServerException  # noqa: E402

MODELS = ("digits", "digits-det", "digits-reader")
#: each model's input, as KServe names it
INPUT = {"digits": "input", "digits-det": "images", "digits-reader": "images"}
FRIGATE = ("digits-det", "digits-reader")

#: name -> a frame no image model can take
MALFORMED = {
    "5 channels": np.zeros((480, 640, 5), np.uint8),
    "2 channels": np.zeros((480, 640, 2), np.uint8),
    "wrong dtype": np.zeros((480, 640, 3), np.uint16),
    "no pixels": np.zeros((0, 640, 3), np.uint8),
    "4-D": np.zeros((2, 480, 640, 3), np.uint8),
}


@pytest.fixture(scope="module")
def md(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("malformed")
    for _ in range(3):  # free_port races other processes: take others on a clash
        g, h = free_port(), free_port()
        ports = {m: free_port() for m in FRIGATE}
        server = (f'[server.kserve]\ngrpc = "127.0.0.1:{g}"\nhttp = "127.0.0.1:{h}"\n'
                  + "".join(f'[[server.frigate]]\nendpoint = "tcp://127.0.0.1:{p}"\n'
                            f'model = "{m}"\ntimeout_ms = 20000\n'
                            + ('label_from = "digit"\n' if m == "digits-reader" else "")
                            for m, p in ports.items()))
        try:
            d = Daemon(pipeline_config(tmp, server=server), tmp, metrics=True)
            break
        except RuntimeError as e:
            if "in use" not in str(e):
                raise
    d.grpc_url, d.http_url = f"127.0.0.1:{g}", f"127.0.0.1:{h}"  # type: ignore[attr-defined]
    d.frigate = {m: f"tcp://127.0.0.1:{p}" for m, p in ports.items()}  # type: ignore[attr-defined]
    yield d
    d.stop()


def names_channels(message: str) -> bool:
    return "channel" in message


@pytest.mark.parametrize("model", MODELS)
def test_native_raw_frames(md: Daemon, model: str) -> None:
    with md.client(timeout_s=60) as c:
        for what, x in MALFORMED.items():
            r = c.infer(model, x, raise_on_error=False)
            assert r.status == "INVALID_ARGUMENT", (what, r.status, r.error)
            assert names_channels(r.error), (what, r.error)
        # and the model still serves a good frame afterwards
        ok = c.infer(model, np.full((120, 160, 3), 40, np.uint8), raise_on_error=False)
        assert ok.status == "OK", ok.error


@pytest.mark.parametrize("model", MODELS)
def test_native_images_decode_to_frames_the_model_takes(md: Daemon, model: str) -> None:
    import cv2

    deep = np.full((64, 64), 50000, np.uint16)  # a 16-bit grey PNG: read as 8-bit grey
    ok, png = cv2.imencode(".png", deep)
    assert ok
    ok, jpeg = cv2.imencode(".jpg", np.full((64, 64, 3), 90, np.uint8))
    assert ok
    with md.client(timeout_s=60) as c:
        r = c.infer(model, ("png", png.tobytes()), raise_on_error=False)
        assert r.status == "OK", r.error
        r = c.infer(model, ("jpeg", jpeg.tobytes()[: len(jpeg) // 2]), raise_on_error=False)
        assert r.status == "INVALID_ARGUMENT", (r.status, r.error)


@pytest.mark.parametrize("model", MODELS)
def test_kserve_grpc_and_http(md: Any, model: str) -> None:
    g = tg.InferenceServerClient(md.grpc_url)
    h = th.InferenceServerClient(md.http_url, network_timeout=60)
    for what, x in MALFORMED.items():
        gi = tg.InferInput(INPUT[model], list(x.shape), tg.np_to_triton_dtype(x.dtype))
        gi.set_data_from_numpy(x)
        with pytest.raises(InferenceServerException) as e:
            g.infer(model, [gi])
        assert "INVALID_ARGUMENT" in str(e.value.status()), (what, e.value.status())
        assert names_channels(e.value.message()), (what, e.value.message())
        hi = th.InferInput(INPUT[model], list(x.shape), th.np_to_triton_dtype(x.dtype))
        hi.set_data_from_numpy(x, binary_data=True)
        with pytest.raises(InferenceServerException) as e:
            h.infer(model, [hi])
        assert str(e.value.status()) == "400", (what, e.value.status(), e.value.message())
        assert names_channels(e.value.message()), (what, e.value.message())
    h.close()


@pytest.mark.parametrize("model", FRIGATE)
def test_frigate_answers_zeros_counted_as_invalid_argument(md: Any, model: str) -> None:
    ctx = zmq.Context()
    f = FrigateDetector(md.frigate[model], "/config/digits.onnx", "yologeneric",
                        request_timeout_ms=20000, ctx=ctx)
    try:
        assert f.ready, f.events
        before = metric(metrics(md), "edged_frigate_requests_total", model=model,
                        status="INVALID_ARGUMENT")
        frames = [x[None] for x in MALFORMED.values()]  # Frigate's batch axis (4-D: 5-D)
        for x in frames:
            assert not f.detect_raw(x).any()
        after = metrics(md)
        assert metric(after, "edged_frigate_requests_total", model=model,
                      status="INVALID_ARGUMENT") - before == len(frames)
        assert metric(after, "edged_frigate_requests_total", model=model,
                      status="INTERNAL") == 0
    finally:
        f.close()
        ctx.term()
