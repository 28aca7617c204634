"""Batching options, off by default: ``batch_window`` (after a batch, the next is held
until the clients just answered are back, for at most the window; a lone client is
never held) and ``inline_max_ms`` (a lone request on an idle model computes on the event
loop: two thread hand-offs fewer, the loop blocked meanwhile).

A real daemon and the slow ONNX model (its Loop keeps ORT busy for a known while)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.configs import digits_config, model_table, variant
from support.daemons import Daemon, received
from support.slow_model import make_slow_model
from support.waits import wait_computing

from edged.client import build_infer
from edged.config.file import ConfigError, load_config

X = np.zeros((1, 64), np.float32)


def window_config(tmp: Path, window: float, extra: str = "") -> Path:
    model = make_slow_model(tmp / "slow.onnx", 150_000)
    slow = model_table("slow", [variant("loop", model)], max_batch_size=4,
                       batch_window=window, extra=extra)
    return digits_config(tmp, extra_models=slow)


def _sequence(d: Daemon) -> dict[str, dict[str, Any]]:
    """A computes; B waits behind it; C is sent the moment A's reply arrives."""
    with d.client(timeout_s=30) as c:
        for i in range(2):  # the batcher learns the compute time
            c.call(*build_infer("slow", X, id=f"warm{i}"))
        lone = c.call(*build_infer("slow", X, id="lone"))
        before = received(d)
        c.send(*build_infer("slow", X, id="A"))
        wait_computing(d, "slow", since=before)
        c.send(*build_infer("slow", X, id="B"))
        a = c.recv(30)
        assert a.header["id"] == "A", a.header
        c.send(*build_infer("slow", X, id="C"))
        got = {r.header["id"]: r.header for r in (c.recv(30), c.recv(30))}
    return {"lone": lone.header, "A": a.header, **got}


@pytest.mark.parametrize("window", [0.0, 1.0])
def test_batch_window_lets_the_answered_client_join_the_next_batch(
        make_daemon: Any, tmp_path: Path, window: float) -> None:
    d = make_daemon(window_config(tmp_path, window), metrics=True)
    r = _sequence(d)
    assert all(h["status"] == "OK" for h in r.values()), r
    lone = r["lone"]["timing"]
    # An idle model runs a lone request at once, window or not.
    assert lone["batch"] == 1 and lone["queue_us"] < lone["compute_us"] / 2, lone
    if window:
        assert r["B"]["timing"]["batch"] == r["C"]["timing"]["batch"] == 2, r
    else:
        assert r["B"]["timing"]["batch"] == 1, r  # B started the moment A finished


def test_batch_window_holds_for_every_client_a_batch_answered(
        make_daemon: Any, tmp_path: Path) -> None:
    """A batch of two completes with nothing waiting: its two clients send again, the
    second a moment after the first. The first is held for the second (one batch of
    two), not started alone on the idle model with the second behind it."""
    d = make_daemon(window_config(tmp_path, 1.0), metrics=True)
    with d.client(timeout_s=30) as c:
        for i in range(2):  # the batcher learns the compute time
            c.call(*build_infer("slow", X, id=f"warm{i}"))
        before = received(d)
        c.send(*build_infer("slow", X, id="A"))
        wait_computing(d, "slow", since=before)
        for rid in ("B", "C"):
            c.send(*build_infer("slow", X, id=rid))
        first = {r.header["id"]: r.header for r in (c.recv(30), c.recv(30), c.recv(30))}
        assert first["B"]["timing"]["batch"] == first["C"]["timing"]["batch"] == 2, first
        compute_s = first["B"]["timing"]["compute_us"] / 1e6
        c.send(*build_infer("slow", X, id="B2"))
        time.sleep(min(0.02, compute_s / 4))  # well inside the window (one compute time)
        c.send(*build_infer("slow", X, id="C2"))
        again = {r.header["id"]: r.header for r in (c.recv(30), c.recv(30))}
    assert all(h["status"] == "OK" for h in again.values()), again
    assert again["B2"]["timing"]["batch"] == again["C2"]["timing"]["batch"] == 2, again


def test_batch_window_must_be_a_fraction(tmp_path: Path) -> None:
    p = window_config(tmp_path, 1.5)
    with pytest.raises(ConfigError, match=r"batch_window.*fraction"):
        load_config(p)


@pytest.mark.parametrize("inline", [False, True])
def test_inline_compute_runs_a_lone_request_on_the_loop(make_daemon: Any, tmp_path: Path,
                                                        inline: bool) -> None:
    """Observable by what the loop can do meanwhile: a health request sent while the lone
    request computes is answered first when the worker computes, after it when inline."""
    d = make_daemon(window_config(tmp_path, 0.0, "inline_max_ms = 60000" if inline else ""))
    with d.client(timeout_s=30) as c, d.client(timeout_s=30) as h:
        for i in range(2):  # the batcher learns the compute time
            c.call(*build_infer("slow", X, id=f"warm{i}"))
        c.send(*build_infer("slow", X, id="A"))
        # A fixed wait, not wait_computing: when inline, the loop that would answer the
        # status query is the one computing.
        time.sleep(0.03)
        h.send({"v": 1, "op": "health", "id": "hz"})
        health = h.recv(30)
        t_health = time.monotonic()
        a = c.recv(30)
        t_a = time.monotonic()
    assert a.header["status"] == "OK" and a.header["timing"]["batch"] == 1, a.header
    assert health.header["status"] == "OK"
    compute_s = a.header["timing"]["compute_us"] / 1e6
    if inline:  # the loop was computing: health waited for A's reply
        assert t_a - t_health < compute_s / 2, (t_a - t_health, compute_s)
    else:
        assert t_a - t_health > compute_s / 4, (t_a - t_health, compute_s)


def test_inline_max_ms_must_not_be_negative(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="inline_max_ms"):
        load_config(window_config(tmp_path, 0.0, "inline_max_ms = -1"))


def test_max_delay_waits_for_a_fuller_batch(make_daemon: Any, tmp_path: Path) -> None:
    """``max_delay_ms``: a request waits up to that long for others to join its batch;
    what arrives meanwhile computes with it, up to ``max_batch_size``."""
    cfg = digits_config(tmp_path, model_extra="max_delay_ms = 400.0")
    d: Daemon = make_daemon(cfg)
    img = np.zeros((28, 28), np.uint8)
    with d.client(timeout_s=30) as c:
        c.send(*build_infer("digits", img, id="first"))
        time.sleep(0.05)
        for i in range(2):
            c.send(*build_infer("digits", img, id=f"late{i}"))
        got = {r.header["id"]: r.header for r in (c.recv(30), c.recv(30), c.recv(30))}
    assert {h["timing"]["batch"] for h in got.values()} == {3}, got
