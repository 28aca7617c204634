"""Stream limits: per-stream frame-rate caps, counters, a bounded table.

The rate and memory tests run against the real daemon on the shipped digits model; the
table's bookkeeping is also checked in process with a made-up clock (no sleeping).
"""

from __future__ import annotations

import os
import re
import time
import tracemalloc
import urllib.request
from pathlib import Path

import numpy as np
import psutil
import pytest
import zmq
from support.configs import digits_config, slow_config
from support.daemons import Daemon
from support.waits import wait_computing

from edged.client import build_infer
from edged.errors import Dropped
from edged.model.streams import StreamTable

X64 = np.ones((1, 64), np.float32)  # the slow model's input

X = np.zeros((1, 1, 28, 28), np.float32)
#: docs/streams.md: "100,000 distinct stream ids grow the daemon's RSS by less than 24 MB"
RSS_BOUND_MB = 24
STREAM_IDS = int(os.environ.get("EDGED_TEST_STREAM_IDS", "6000"))
HEADER = (b'{"v":1,"id":%d,"model":"digits","stream":"cam-%d","inputs":[{"dtype":"float32",'
          b'"shape":[1,1,28,28]}]}')


def test_table_admits_max_fps_exactly_under_a_jittery_100fps_sender() -> None:
    t = StreamTable()
    rng = np.random.default_rng(1)
    admitted = 0
    now = 0.0
    for _ in range(1000):  # 10 s at 100 fps, each frame +-3 ms late or early
        now += 0.01
        try:
            t.admit("cam", now + rng.uniform(-0.003, 0.003), 10.0)
            admitted += 1
        except Dropped as e:
            assert "limited to 10 frames/s" in str(e)
    assert 95 <= admitted <= 101


def test_table_is_bounded_and_forgets_idle_streams() -> None:
    t = StreamTable(max_streams=1000, idle_s=60.0)
    for i in range(100_000):
        t.admit(f"s{i}", i * 1e-4, None)
    assert len(t) == 1000
    assert t.top(1)[0]["received"] == 1
    t.admit("late", 10.0 + 61.0, None)  # everything else is now idle for over 60 s
    assert len(t) == 1


def metrics(d: Daemon) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{d.metrics_port}/metrics").read().decode()


def counter(text: str, outcome: str) -> float:
    m = re.search(rf'^edged_stream_frames_total\{{model="digits",outcome="{outcome}"\}} (\S+)',
                  text, re.M)
    return float(m.group(1)) if m else 0.0


@pytest.fixture(scope="module")
def sd(tmp_path_factory: pytest.TempPathFactory) -> Daemon:
    tmp = tmp_path_factory.mktemp("streams")
    d = Daemon(digits_config(tmp, model_extra="max_stream_fps = 50.0"), tmp, metrics=True)
    yield d
    d.stop()


def test_max_fps_holds_within_10_percent_under_a_100fps_sender(sd: Daemon) -> None:
    seconds, fps = 3.0, 10.0
    with sd.client(timeout_s=30) as c:
        start = time.monotonic()
        n = 0
        while time.monotonic() - start < seconds:
            c.send(*build_infer("digits", X, stream="cam-rate", max_fps=fps))
            n += 1
            time.sleep(max(0.0, start + n / 100.0 - time.monotonic()))
        elapsed = time.monotonic() - start
        replies = [c.recv() for _ in range(n)]
    ok = sum(r.status == "OK" for r in replies)
    dropped = [r for r in replies if r.status == "DROPPED"]
    assert ok + len(dropped) == n
    assert abs(ok / elapsed - fps) <= 0.1 * fps, (ok, elapsed, n)
    assert all("limited to 10 frames/s" in r.header["error"] for r in dropped)
    status = sd.ctl({"op": "status"})
    m = next(x for x in status["models"] if x["name"] == "digits")
    top = next(s for s in m["streams"]["top"] if s["stream"] == "cam-rate")
    assert top["received"] == n and top["served"] == ok and top["dropped_rate"] == len(dropped)
    text = metrics(sd)
    assert counter(text, "dropped_rate") >= len(dropped)
    assert counter(text, "served") >= ok


def test_model_max_stream_fps_applies_without_a_request_limit(sd: Daemon) -> None:
    with sd.client() as c:
        replies = [c.infer("digits", X, stream="burst", raise_on_error=False)
                   for _ in range(5)]
    # 50 fps: back-to-back requests (a few ms apart) cannot all pass
    assert replies[0].status == "OK"
    assert any(r.status == "DROPPED" for r in replies[1:])


def test_frames_replaced_in_the_queue_count_as_stale(tmp_path: Path) -> None:
    d = Daemon(slow_config(tmp_path), tmp_path, metrics=True)
    try:
        with d.client() as c:
            c.send(*build_infer("slow", X64, id="busy"))
            wait_computing(d, "slow")
            for i in range(3):
                c.send(*build_infer("slow", X64, id=f"cam-{i}", stream="cam"))
            statuses = sorted(c.recv(20).status for _ in range(4))
        assert statuses == ["DROPPED", "DROPPED", "OK", "OK"]
        m = next(x for x in d.ctl({"op": "status"})["models"] if x["name"] == "slow")
        assert m["streams"]["top"] == [{"stream": "cam", "received": 3, "served": 1,
                                        "dropped_stale": 2, "dropped_rate": 0}]
    finally:
        d.stop()


def test_max_fps_needs_a_stream(sd: Daemon) -> None:
    with sd.client() as c:
        r = c.infer("digits", X, max_fps=5, raise_on_error=False)
    assert r.status == "INVALID_ARGUMENT" and "stream" in r.header["error"]


def test_many_stream_ids_leave_rss_within_the_documented_bound(tmp_path: Path) -> None:
    """STREAM_IDS distinct ids (the lead's 100,000 with EDGED_TEST_STREAM_IDS=100000; the
    default keeps this test under a minute on 2 loaded cores) after the table is full."""
    d = Daemon(digits_config(tmp_path), tmp_path)
    try:
        proc = psutil.Process(d.pid)
        payload = X.tobytes()

        def send_ids(first: int, count: int) -> None:
            window = 256
            with zmq.Context() as ctx, ctx.socket(zmq.DEALER) as s:
                s.setsockopt(zmq.RCVTIMEO, 60000)
                s.connect(d.tcp)
                sent = got = 0
                while got < count:
                    while sent < count and sent - got < window:
                        s.send_multipart([HEADER % (first + sent, first + sent), payload])
                        sent += 1
                    reply = s.recv_multipart()
                    assert b'"status":"OK"' in reply[0], reply[0]
                    got += 1

        send_ids(0, 5_000)  # fills the table (4096 streams) and warms the allocator
        before = proc.memory_info().rss
        send_ids(5_000, STREAM_IDS)
        grown_mb = (proc.memory_info().rss - before) / 2**20
        print(f"RSS grew {grown_mb:.1f} MB over {STREAM_IDS} more distinct stream ids")
        m = next(x for x in d.ctl({"op": "status"})["models"] if x["name"] == "digits")
        assert m["streams"]["tracked"] == 4096
        assert grown_mb < RSS_BOUND_MB, grown_mb
    finally:
        d.stop()


def test_100000_ids_in_process_stay_within_the_table_bound() -> None:
    """docs/streams.md: a full table holds 4096 entries of at most 512 bytes each (2 MiB)."""
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    t = StreamTable()
    peak_after_fill = 0
    for i in range(100_000):
        t.admit(f"camera-{i:08d}", 1.0, 10.0)
        if i == 10_000:
            peak_after_fill = tracemalloc.get_traced_memory()[0] - base
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    assert len(t) == 4096
    assert held < 4096 * 512, held
    assert held < peak_after_fill * 1.5, (held, peak_after_fill)  # no growth once full
