"""Offload to a remote KServe v2 server: a second edged daemon serving its KServe endpoint on
loopback stands in for the bigger machine (same model files, so answers must agree)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tritonclient.grpc", reason="the kserve extra is not installed "
                    "(pip install 'edged[kserve]')")
from support.configs import digits_config, slow_table
from support.daemons import Daemon, free_port, metric, metrics, received
from support.paths import MODELS
from support.slow_model import BASE_TRIP, BUSY, make_slow_model
from support.sysfs import make_thermal_zone
from support.waits import wait_computing, wait_until

from edged.backends.base import TensorSpec
from edged.client import build_infer
from edged.protocols.kserve.remote import RemoteError, RemoteTensor, metadata_mismatch

VAL = np.load(MODELS / "validation.npz")
X = (VAL["x"][:4].astype(np.float32) / 255.0)[:, None]
LEVELS = """
[[governor.levels]]
name = "hot"
enter_c = 80.0
exit_c = 75.0
offload = ["digits"]
"""


def remote_daemon(tmp: Path, scheme: str) -> tuple[Daemon, str]:
    port = free_port()
    tmp.mkdir(parents=True, exist_ok=True)
    slow = make_slow_model(tmp / "slow.onnx", BASE_TRIP)
    key = "grpc" if scheme == "grpc" else "http"
    cfg = digits_config(tmp, variants=("cnn-fp32",),
                        server=f'[server.kserve]\n{key} = "127.0.0.1:{port}"\n',
                        extra_models=slow_table(slow, max_batch_size=8, max_queue=64))
    return Daemon(cfg, tmp), f"{scheme}://127.0.0.1:{port}"


def local_daemon(tmp: Path, url: str) -> Daemon:
    root = tmp / "sysroot"
    tmp.mkdir(parents=True, exist_ok=True)
    make_thermal_zone(root, 0, "cpu-thermal", 45000, trips=[(95000, "passive", 0)])
    slow = make_slow_model(tmp / "slow.onnx", BASE_TRIP)
    offload = (f'[offload]\nurl = "{url}"\ntimeout_ms = 5000\nhealth_interval_s = 0.2\n'
               '[[offload.models]]\nmodel = "digits"\nvariant = "cnn-fp32"\n'
               '[[offload.models]]\nmodel = "slow"\n')
    governor = (f'[governor]\nenabled = true\nsysfs_root = "{root}"\ninterval_s = 0.1\n'
                f"dwell_s = 0.1\n{LEVELS}")
    cfg = digits_config(tmp, variants=("cnn-fp32",), governor=governor,
                        extra_models=slow_table(slow, max_batch_size=8, max_queue=64) + offload)
    return Daemon(cfg, tmp, metrics=True)


def offloaded(d: Daemon, outcome: str, model: str = "digits") -> float:
    return metric(metrics(d), "edged_offload_requests_total", model=model, outcome=outcome)


def up(d: Daemon) -> dict[str, bool]:
    return d.ctl({"op": "status"})["offload"]["up"]


@pytest.fixture(params=["grpc", "http"])
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    remote, url = remote_daemon(tmp_path / "remote", request.param)
    local = local_daemon(tmp_path / "local", url)
    yield local, remote
    local.stop()
    remote.stop()


def test_a_hot_level_offloads_and_a_dead_remote_falls_back(pair: Any) -> None:
    local, remote = pair
    with local.client(timeout_s=30) as c:
        want = c.infer("digits", X).outputs["logits"]
    wait_until(lambda: up(local) == {"digits": True, "slow": True}, 15, what="remote healthy")
    models = local.ctl({"op": "status"})["offload"]["models"]
    assert models["digits"] == {"remote_model": "digits", "counts_as": "cnn-fp32"}
    assert local.ctl({"op": "level", "level": "hot"})["status"] == "OK"
    wait_until(lambda: local.ctl({"op": "status"})["governor"]["level"] == "hot", 15,
               what="hot")
    with local.client(timeout_s=30) as c:
        r = c.infer("digits", X)
        assert r.header["variant"] == "remote:digits", r.header
        np.testing.assert_allclose(r.outputs["logits"], want, rtol=1e-5, atol=1e-5)
        assert c.infer("slow", np.zeros((1, 64), np.float32)).header["variant"] == "loop"
    text = metrics(local)
    assert metric(text, "edged_offload_requests_total", model="digits", reason="governor",
                  outcome="remote") == 1
    assert metric(text, "edged_offload_remote_duration_seconds_count", model="digits") == 1
    assert metric(text, "edged_requests_total", model="digits", variant="remote:digits",
                  status="OK") == 1
    # The remote dies: the next request is computed here, and once the health check has
    # seen it, the remote is not tried at all.
    remote.stop()
    with local.client(timeout_s=30) as c:
        r = c.infer("digits", X)
        assert r.ok and r.header["variant"] == "cnn-fp32", r.header
        np.testing.assert_allclose(r.outputs["logits"], want, rtol=1e-5, atol=1e-5)
        wait_until(lambda: up(local)["digits"] is False, 15, what="remote marked down")
        tried = offloaded(local, "fallen_back")
        for _ in range(3):
            assert c.infer("digits", X).header["variant"] == "cnn-fp32"
    assert offloaded(local, "fallen_back") == tried <= 1
    assert metric(metrics(local), "edged_offload_remote_up", model="digits") == 0
    assert local.ctl({"op": "level", "level": "auto"})["status"] == "OK"


def test_a_request_that_would_miss_its_deadline_here_goes_to_the_remote(pair: Any) -> None:
    local, _ = pair
    busy = np.full((1, 64), BUSY, np.float32)
    wait_until(lambda: up(local)["slow"], 15, what="remote healthy")
    with local.client(timeout_s=60) as c:
        assert c.infer("slow", busy).header["variant"] == "loop"  # teaches the EWMA
        since = received(local)
        c.send(*build_infer("slow", busy, id="busy"))
        wait_computing(local, "slow", since)
        r = c.infer("slow", np.zeros((1, 64), np.float32), timeout_ms=400)
        assert r.ok and r.header["variant"] == "remote:slow", r.header
        # Without a deadline it waits its turn here.
        c.send(*build_infer("slow", np.zeros((1, 64), np.float32), id="patient"))
        got = {c.recv(60).header["id"]: None for _ in range(2)}
        assert set(got) == {"busy", "patient"}
    assert metric(metrics(local), "edged_offload_requests_total", model="slow",
                  reason="deadline", outcome="remote") == 1


# -- the remote model's metadata against the local model's tensors ------------------------

def _spec(name: str, shape: tuple[int, ...], dtype: Any = np.float32) -> TensorSpec:
    return TensorSpec(name, np.dtype(dtype), shape)


def _remote(inputs: list[tuple[str, str, list[int]]],
            outputs: list[tuple[str, str, list[int]]]) -> dict[str, list[RemoteTensor]]:
    return {k: [RemoteTensor.read({"name": n, "datatype": d, "shape": s}) for n, d, s in v]
            for k, v in (("inputs", inputs), ("outputs", outputs))}


DIGITS_IN, DIGITS_OUT = [_spec("input", (-1, 1, 28, 28))], [_spec("logits", (-1, 10))]


def test_a_remote_with_the_same_tensors_matches_and_dynamic_dims_are_compatible() -> None:
    same = _remote([("input", "FP32", [-1, 1, 28, 28])], [("logits", "FP32", [-1, 10])])
    assert metadata_mismatch(DIGITS_IN, DIGITS_OUT, same) is None
    # A fixed size on one side, -1 on the other; an extra output the remote has; gRPC's
    # int64 dims read as strings.
    fixed = _remote([("input", "FP32", [8, 1, -1, "28"])],  # type: ignore[list-item]
                    [("logits", "FP32", [8, 10]), ("probs", "FP32", [-1, 10])])
    assert metadata_mismatch(DIGITS_IN, DIGITS_OUT, fixed) is None
    # A server that does not describe its model cannot be checked, and is not refused.
    assert metadata_mismatch(DIGITS_IN, DIGITS_OUT, _remote([], [])) is None


def test_each_difference_from_the_local_tensors_is_named() -> None:
    why = metadata_mismatch(DIGITS_IN, DIGITS_OUT, _remote(
        [("input", "FP16", [-1, 1, 28, 28]), ("mask", "BOOL", [-1])],
        [("logits", "FP32", [-1, 12])]))
    assert why is not None
    assert "input 'input' is FP16 [-1, 1, 28, 28] on the remote, FP32 [-1, 1, 28, 28] here" \
        in why, why
    assert "the remote also needs input(s) 'mask'" in why, why
    assert "output 'logits' is FP32 [-1, 12] on the remote, FP32 [-1, 10] here" in why, why
    rank = metadata_mismatch(DIGITS_IN, DIGITS_OUT, _remote(
        [("input", "FP32", [1, 28, 28])], [("scores", "FP32", [-1, 10])]))
    assert rank is not None and "input 'input' is FP32 [1, 28, 28] on the remote" in rank
    assert "output 'logits' (FP32 [-1, 10]) is not in the remote model" in rank, rank
    with pytest.raises(RemoteError, match="unreadable tensor"):
        RemoteTensor.read({"name": "x", "shape": [1]})
