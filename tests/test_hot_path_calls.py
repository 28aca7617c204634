"""The hot path's guard: the Python calls one request costs a real daemon, counted.

Why counts and not times: a count is the same on any CPU, clock or load, so a change that
puts work back on a request's path (a per-request object, a metrics lookup, a hop through
the event loop or a thread) fails here and not in a benchmark on one machine
(docs/architecture.md, "The hot path"). The daemon runs under
``edged.testing.callcount``, which counts every Python call on its serving threads; each
figure is the cheapest of several samples (a timer firing meanwhile does not count).

The ceilings are the design's counts (measured when it was built, Python 3.11) plus about
10 % for library versions: a change that needs more must say why here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edged.testing.callcount import calls_per_request
from edged.testing.configs import model_table, variant, write_config
from edged.testing.harness import Daemon

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "models/digits/cnn-fp32.onnx"

#: a lone request on an idle model, computed by the thread that received it (the express
#: lane): 150 calls when built, all on the event loop, none on a worker
EXPRESS_CEILING = 165
#: the same request through the model's worker (``inline_max_ms = 0``): 171 on the loop
#: and 39 on the worker when built
WORKER_CEILING = 230
#: each request of a batch of 8 (``max_delay_ms`` holds them together): 120 when built
BATCHED_CEILING = 132


def _daemon(tmp_path: Path, **batching: float) -> tuple[Daemon, Path]:
    counts = tmp_path / "counts.sock"
    cfg = write_config(tmp_path / "edged.toml", models=[model_table(
        "digits", [variant("fp32", DIGITS, options={"threads": 1})],
        max_batch_size=8, **batching)])
    d = Daemon(cfg, tmp_path / "d", metrics=True,
               launcher=("-m", "edged.testing.callcount", "--counts", str(counts)))
    return d, counts


def _infer_one(c: object, x: np.ndarray) -> None:
    r = c.infer("digits", {"input": x})  # type: ignore[attr-defined]
    assert r.header["timing"]["batch"] == 1


@pytest.fixture
def x() -> np.ndarray:
    return np.random.default_rng(0).random((1, 1, 28, 28)).astype(np.float32)


def test_a_lone_request_on_an_idle_model_takes_the_express_lane(tmp_path: Path,
                                                               x: np.ndarray) -> None:
    d, counts = _daemon(tmp_path, inline_max_ms=5.0)
    try:
        with d.client() as c:
            for _ in range(20):  # warm: the compute-time estimate, the series looked up
                c.infer("digits", {"input": x})
            calls = calls_per_request(counts, lambda: _infer_one(c, x))
    finally:
        d.stop()
    assert calls.get("worker", 0) == 0, f"the express lane hopped to the worker: {calls}"
    assert calls["loop"] <= EXPRESS_CEILING, (
        f"one idle request now costs {calls['loop']} Python calls (ceiling "
        f"{EXPRESS_CEILING}): something was put back on the hot path")


def test_a_lone_request_through_the_worker(tmp_path: Path, x: np.ndarray) -> None:
    d, counts = _daemon(tmp_path, inline_max_ms=0.0)
    try:
        with d.client() as c:
            for _ in range(20):
                c.infer("digits", {"input": x})
            calls = calls_per_request(counts, lambda: _infer_one(c, x))
    finally:
        d.stop()
    assert calls.get("worker", 0) > 0  # it did go through the worker
    total = sum(calls.values())
    assert total <= WORKER_CEILING, f"{calls}: over the ceiling {WORKER_CEILING}"


def test_each_request_of_a_batch_of_8(tmp_path: Path, x: np.ndarray) -> None:
    d, counts = _daemon(tmp_path, max_delay_ms=500.0)
    header = {"v": 1, "op": "infer", "model": "digits",
              "inputs": [{"name": "input", "dtype": "float32", "shape": [1, 1, 28, 28]}]}
    try:
        with d.client() as c:
            def eight() -> None:
                for i in range(8):
                    c.send({**header, "id": i}, [x])
                batches = {c.recv().header["timing"]["batch"] for _ in range(8)}
                assert batches == {8}, f"the 8 requests did not form one batch: {batches}"

            for _ in range(3):
                eight()
            calls = calls_per_request(counts, eight, samples=5)
    finally:
        d.stop()
    per_request = sum(calls.values()) / 8
    assert per_request <= BATCHED_CEILING, (
        f"{per_request:.0f} calls per request in a batch of 8 ({calls}); ceiling "
        f"{BATCHED_CEILING}")
