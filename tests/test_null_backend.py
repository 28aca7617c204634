"""The null backend (edged/backends/null.py): a model and its batcher run with no runtime
at all, in process and in the daemon, and its options are checked like any backend's."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.configs import config, model_table, variant

from edged.backends import backend_module
from edged.backends.null import open_backend
from edged.batching.queue import Result
from edged.config.file import Config, load_config
from edged.config.server import Limits
from edged.errors import ConfigError, EdgedError
from edged.metrics import Metrics
from edged.model.model import Model
from edged.model.request import InputMeta, Request


def echo_config(tmp: Path, options: dict[str, Any], max_batch_size: int = 8) -> Path:
    """A model "echo" whose one variant is the null backend with ``options``."""
    echo = model_table("echo", [variant("null", backend="null", options=options)],
                       max_batch_size=max_batch_size)
    return config(tmp, models=[echo], name="null.toml")


def null_config(tmp: Path, options: dict[str, Any]) -> Config:
    return load_config(echo_config(tmp, options))


def test_model_batches_on_the_null_backend_and_answers_each_its_own(tmp_path: Path) -> None:
    cfg = null_config(tmp_path, {"delay_ms": 30, "batch_sizes": [1, 2, 4, 8]})

    async def go() -> list[tuple[int, Result | EdgedError]]:
        m = Model(cfg.models[0], Metrics(), Limits())
        await m.load(0)
        got: list[tuple[int, Result | EdgedError]] = []
        done = asyncio.Event()

        def respond(i: int) -> Any:
            def f(outcome: Result | EdgedError) -> None:
                got.append((i, outcome))
                if len(got) == 6:
                    done.set()
            return f

        for i in range(6):
            x = np.full((1, 4), i, np.float32)
            req = Request(op="infer", id=i, model="echo",
                          inputs=[InputMeta(None, "raw", np.dtype("float32"), (1, 4), x)])
            m.submit(m.prepare(req), respond(i), arrival=time.monotonic())
        await asyncio.wait_for(done.wait(), 10)
        await m.close()
        return got

    got = asyncio.run(go())
    assert len(got) == 6
    batches = set()
    for i, outcome in got:
        assert isinstance(outcome, Result), outcome
        assert outcome.variant == "null"
        np.testing.assert_array_equal(dict(outcome.outputs)["output"], np.full((1, 4), i))
        batches.add(outcome.batch)
    assert max(batches) > 1  # the five that queued behind the first ran together


def test_null_backend_options_are_validated_with_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as ei:
        null_config(tmp_path, {"shape": [4, 4], "batch_sizes": [4, 2]})
    text = "\n".join(ei.value.problems)
    assert "models[0].variants[0].options.shape" in text
    assert "models[0].variants[0].options.batch_sizes" in text
    assert backend_module("null").open_backend is open_backend


def test_daemon_serves_the_null_backend(make_daemon: Any, tmp_path: Path) -> None:
    d = make_daemon(echo_config(tmp_path, {"shape": [-1, 2], "batch_sizes": [4]},
                                max_batch_size=4))
    with d.client() as c:
        x = np.array([[1.5, -2.0], [3.0, 4.0], [5.0, 6.0]], np.float32)
        r = c.infer("echo", x)
        assert r.ok, r.header
        np.testing.assert_array_equal(r.outputs["output"], x)


def test_a_client_that_stops_reading_loses_no_reply(make_daemon: Any, tmp_path: Path) -> None:
    """Replies to a client that does not read pile up past the daemon's send high-water
    mark (1000 messages) and the client's receive one: the daemon keeps them in order
    and sends them once the client reads again; none is lost, none is sent twice."""
    import zmq

    echo = model_table("echo", [variant("null", backend="null", options={"shape": [-1, 2]})],
                       max_queue=8192)
    d = make_daemon(config(tmp_path, models=[echo], name="null.toml",
                           server="max_inflight_per_client = 8192"),
                    args=("--log-level", "debug"))
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.RCVHWM, 10)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(d.ipc)
    x = np.ones((1, 2), np.float32)
    n = 6000
    try:
        for i in range(n):  # well past both high-water marks, nothing read meanwhile
            s.send_multipart([b'{"v":1,"id":%d,"model":"echo","inputs":[{"dtype":"float32",'
                              b'"shape":[1,2]}]}' % i, x.tobytes()])
        time.sleep(1.0)  # the daemon answers them all; most wait in its queue
        ids = []
        poller = zmq.Poller()
        poller.register(s, zmq.POLLIN)
        while len(ids) < n and poller.poll(10_000):
            header = s.recv_multipart()[0]
            ids.append(int(header.split(b'"id":')[1].split(b",")[0]))
            assert b'"status":"OK"' in header, header
    finally:
        s.close()
        ctx.term()
    assert ids == list(range(n))
    assert "past its high-water mark; its replies wait in order" in d.log()  # it did
    with d.client() as c:  # and the daemon serves on
        assert c.infer("echo", x).ok


def test_rungs_added_to_a_served_model_serve_without_a_reload(tmp_path: Path) -> None:
    """``Model.add_rungs`` (a sent model's built ladder): the served variant serves on, the
    longer ladder can be swapped down, and a ladder whose top differs is refused unchanged."""
    two = model_table("echo", [variant("top", backend="null", options={}),
                               variant("lite", backend="null", options={}, verify=False)])
    full = load_config(config(tmp_path, models=[two])).models[0]
    served = replace(full, variants=full.variants[:1])

    async def go() -> tuple[list[str], Any, bool, list[str], str]:
        m = Model(served, Metrics(), Limits())
        await m.load(0)
        backend = m.live.loaded.backend if m.live.loaded else None
        assert not m.add_rungs(replace(full, variants=full.variants[::-1]))
        assert m.variant_names == ["top"]
        assert m.add_rungs(full)
        same = m.live.loaded is not None and m.live.loaded.backend is backend
        names = m.variant_names
        swapped = await m.swap_to(1, "operator: test")
        got: list[Result | EdgedError] = []
        done = asyncio.Event()
        x = np.ones((1, 4), np.float32)
        req = Request(op="infer", id=1, model="echo",
                      inputs=[InputMeta(None, "raw", np.dtype("float32"), (1, 4), x)])
        m.submit(m.prepare(req), lambda r: (got.append(r), done.set()),
                 arrival=time.monotonic())
        await asyncio.wait_for(done.wait(), 10)
        await m.close()
        assert isinstance(got[0], Result), got
        return names, same, swapped, m.variant_names, got[0].variant

    names, same, swapped, after, answered_by = asyncio.run(go())
    assert names == after == ["top", "lite"]
    assert same  # the served session was not reopened
    assert swapped and answered_by == "lite"
