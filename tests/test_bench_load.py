"""The load generator's reply trace (``edged.bench.loadgen.drive``), as ``bench_governor``
reads it: several inputs in turn, every reply's columns, an early stop."""

from __future__ import annotations

import argparse
import multiprocessing as mp
import threading
import time
from typing import Any

import numpy as np
import pytest
from support.daemons import Daemon
from support.ort import ort_session
from support.paths import MODELS

from edged.bench.loadgen import drive
from edged.client import build_infer


def test_a_traced_run_cycles_its_inputs_and_stops_when_told(daemon: Daemon) -> None:
    xs = (np.load(MODELS / "validation.npz")["x"][:8].astype(np.float32) / 255.0)[:, None]
    want = ort_session(MODELS / "cnn-fp32.onnx").run(None, {"input": xs})[0].argmax(axis=1)
    header, first = build_infer("digits", xs[:1])
    cycle = [build_infer("digits", xs[j:j + 1])[1] for j in range(len(xs))]
    stop = mp.get_context("spawn").Event()
    ns = argparse.Namespace(endpoint=daemon.ipc, clients=2, in_flight=1,
                            duration=float("inf"))
    out: dict[str, Any] = {}
    t = threading.Thread(target=lambda: out.update(
        drive(ns, header, first, "trace", stop=stop, trace=True, cycle=cycle)))
    t.start()
    time.sleep(3.0)  # pacing: the clients run for a while, however many replies that is
    stop.set()
    t.join(60)
    assert not t.is_alive(), "the clients did not stop (duration is infinite)"
    assert len(out["traces"]) == 2 and out["statuses"] == {"OK": out["ok"]}
    for tr in out["traces"]:
        n = len(tr["send"])
        assert n > 8 and all(len(col) == n for col in tr.values())
        assert set(tr["status"]) == {"OK"} and set(tr["variant"]) == {"cnn-fp32"}
        assert set(tr["item"]) == set(range(8))
        assert all(s < r for s, r in zip(tr["send"], tr["recv"], strict=True))
        assert all(b >= 1 for b in tr["batch"]) and all(c > 0 for c in tr["compute_us"])
        assert list(tr["top"]) == [int(want[i]) for i in tr["item"]]
    assert sum(len(tr["send"]) for tr in out["traces"]) == out["replies"]


def test_a_trace_is_for_native_socket_clients(daemon: Daemon) -> None:
    header, frames = build_infer("digits", np.zeros((1, 1, 28, 28), np.float32))
    ns = argparse.Namespace(endpoint=daemon.ipc, clients=1, in_flight=1, duration=1.0,
                            transport="shm")
    with pytest.raises(ValueError, match="native socket clients"):
        drive(ns, header, frames, "shm", trace=True)
