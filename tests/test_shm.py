"""Shared-memory frames against a real daemon: sync and async round trips
equal to socket frames, one specific error per bad shm request, rings gone after their
client is SIGKILLed, after idling, and when the daemon stops."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zmq
from support.configs import digits_config
from support.daemons import Daemon
from support.paths import MODELS, ROOT
from support.waits import wait_until

from edged.client import AsyncClient, Client
from edged.protocols.native.shm_frames import OFF_LOOP_BYTES
from edged.protocols.native.shm_rings import SHM_DIR, align, available

pytestmark = pytest.mark.skipif(not available(), reason="needs /dev/shm")

SHM_FAST = "[server.shm]\ncheck_s = 0.1\nidle_s = 30.0\nmax_segments_per_client = 2\n" \
           "max_bytes_per_client = 8388608\n"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    tmp = tmp_path_factory.mktemp("shm")
    d = Daemon(digits_config(tmp, server=SHM_FAST), tmp)
    yield d
    d.stop()


def digits(n: int = 1) -> np.ndarray:
    x = np.load(MODELS / "validation.npz")["x"][:n]
    return np.ascontiguousarray((x / 255.0).astype(np.float32).reshape(n, 1, 28, 28))


def segments(pid: int) -> set[str]:
    return {p.name for p in SHM_DIR.glob(f"edged-{pid}-*")}


def dealer(endpoint: str) -> zmq.Socket[Any]:
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVTIMEO, 10_000)
    s.connect(endpoint)
    return s


def ask(s: zmq.Socket[Any], header: dict[str, Any], *frames: bytes) -> dict[str, Any]:
    s.send_multipart([json.dumps({"v": 1, **header}).encode(), *frames])
    reply: dict[str, Any] = json.loads(s.recv_multipart()[0])
    return reply


def ring(s: zmq.Socket[Any], slots: int = 2, slot_bytes: int = 4096) -> dict[str, Any]:
    r = ask(s, {"op": "shm", "slots": slots, "slot_bytes": slot_bytes, "pid": os.getpid()})
    assert r["status"] == "OK", r
    return r


def write(segment: str, offset: int, arr: np.ndarray) -> None:
    with open(SHM_DIR / segment, "r+b") as f:
        f.seek(offset)
        f.write(arr.tobytes())


def shm_input(seg: str, arr: np.ndarray, offset: int = 0, **kw: Any) -> dict[str, Any]:
    return {"encoding": "shm", "segment": seg, "offset": offset, "length": arr.nbytes,
            "dtype": arr.dtype.name, "shape": list(arr.shape), **kw}


# -- round trips ---------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["ipc", "tcp"])
def test_sync_round_trip_equals_socket_frames(daemon: Daemon, where: str) -> None:
    ep = daemon.ipc if where == "ipc" else daemon.tcp
    x = digits(3)
    with Client(ep) as plain, Client(ep, shm=True) as c:
        for n in (1, 3):
            want = plain.infer("digits", x[:n]).outputs
            got = c.infer("digits", x[:n])
            assert c.shm is not None and c.shm.ring is not None, c.shm.disabled
            assert got.ok and got.outputs.keys() == want.keys()
            for k in want:
                np.testing.assert_array_equal(got.outputs[k], want[k])
        name = c.shm.ring.segment
        assert name in segments(daemon.pid)
        assert c.shm.ring.free == c.shm.slots  # every slot came back with its reply
    assert name not in segments(daemon.pid)  # close released it


def test_async_round_trip_equals_socket_frames(daemon: Daemon) -> None:
    x = digits(16)
    with Client(daemon.ipc) as plain:
        want = [plain.infer("digits", x[i:i + 1]).outputs for i in range(16)]

    async def go() -> tuple[list[Any], str | None]:
        async with AsyncClient(daemon.ipc, shm=True, shm_slots=4) as c:
            got = await asyncio.gather(*(c.infer("digits", x[i:i + 1]) for i in range(16)))
            assert c.shm is not None and c.shm.ring is not None, c.shm.disabled
            assert c.shm.ring.free == 4
            return got, c.shm.ring.segment

    got, _ = asyncio.run(go())
    for g, w in zip(got, want, strict=True):
        for k in w:
            np.testing.assert_array_equal(g.outputs[k], w[k])


def test_a_reaped_ring_is_replaced_transparently(make_daemon: Any, tmp_path: Path) -> None:
    d = make_daemon(digits_config(tmp_path, server="[server.shm]\nidle_s = 0.3\ncheck_s = 0.1"))
    x = digits(1)
    with Client(d.ipc, shm=True) as c:
        c.infer("digits", x)
        assert c.shm is not None and c.shm.ring is not None
        first = c.shm.ring.segment
        wait_until(lambda: first not in segments(d.pid), 20, "the idle ring reaped")
        r = c.infer("digits", x)
        assert r.ok and c.shm.ring is not None and c.shm.ring.segment != first


def test_raw_uint8_frame_through_shm_is_preprocessed(daemon: Daemon) -> None:
    frame = np.load(MODELS / "validation.npz")["x"][0]
    big = np.ascontiguousarray(np.kron(frame, np.ones((4, 4), np.uint8)))  # 112x112
    with Client(daemon.ipc) as plain, Client(daemon.ipc, shm=True) as c:
        want = plain.infer("digits", big).outputs
        got = c.infer("digits", big).outputs
        assert c.shm is not None and c.shm.ring is not None
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def test_a_frame_of_a_megabyte_or_more_is_read_off_the_loop_alike(daemon: Daemon) -> None:
    """Slots of OFF_LOOP_BYTES or more are read on the decode pool: same answers, and a
    segment truncated under such a read is that request's error alone."""
    frame = np.load(MODELS / "validation.npz")["x"][0]
    big = np.ascontiguousarray(np.kron(frame, np.ones((37, 37), np.uint8)))  # 1036x1036
    assert big.nbytes >= OFF_LOOP_BYTES
    with Client(daemon.ipc) as plain, Client(daemon.ipc, shm=True) as c:
        want = plain.infer("digits", big).outputs
        got = c.infer("digits", big).outputs
        assert c.shm is not None and c.shm.ring is not None, c.shm.disabled
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    s = dealer(daemon.ipc)
    try:
        seg = ring(s, slots=1, slot_bytes=align(big.nbytes))["segment"]
        write(seg, 0, big)
        inp = shm_input(seg, big)
        r = ask(s, {"model": "digits", "id": 9, "inputs": [inp]})
        assert r["status"] == "OK", r
        os.truncate(SHM_DIR / seg, big.nbytes // 2)
        r = ask(s, {"model": "digits", "id": 10, "inputs": [inp]})
        assert r["status"] == "INVALID_ARGUMENT" and "truncated" in r["error"], r
        assert r["id"] == 10
        assert ask(s, {"op": "health"})["status"] == "OK"
    finally:
        s.close()


# -- every bad shm request gets its own answer ---------------------------------------------

def test_bad_shm_requests_get_specific_errors(daemon: Daemon) -> None:
    x = digits(1)
    a, b = dealer(daemon.ipc), dealer(daemon.ipc)
    try:
        seg = ring(a)["segment"]
        write(seg, 0, x)

        def infer(sock: zmq.Socket[Any], inp: dict[str, Any], *frames: bytes) -> dict[str, Any]:
            return ask(sock, {"model": "digits", "id": 7, "inputs": [inp]}, *frames)

        ok = infer(a, shm_input(seg, x))
        assert ok["status"] == "OK", ok
        cases = [
            (a, shm_input("edged-1-0123456789abcdef", x), "NOT_FOUND", "unknown shared-memory"),
            (a, shm_input(seg, x, offset=8000), "INVALID_ARGUMENT", "runs past the end"),
            (a, {**shm_input(seg, x), "length": 12}, "INVALID_ARGUMENT", ".length is 12"),
            (b, shm_input(seg, x), "INVALID_ARGUMENT", "belongs to another client"),
            (a, {**shm_input(seg, x), "offset": -1}, "INVALID_ARGUMENT", ".offset must be"),
            (a, {**shm_input(seg, x), "segment": 5}, "INVALID_ARGUMENT", ".segment must"),
            (a, {k: v for k, v in shm_input(seg, x).items() if k != "dtype"},
             "INVALID_ARGUMENT", ".dtype must be"),
        ]
        for sock, inp, status, text in cases:
            r = infer(sock, inp)
            assert r["status"] == status and text in r["error"], (inp, r)
            assert r["id"] == 7
        r = infer(a, {"dtype": "float32", "shape": list(x.shape), "segment": seg}, x.tobytes())
        assert r["status"] == "INVALID_ARGUMENT" and 'belong to "encoding": "shm"' in r["error"]
        r = infer(a, shm_input(seg, x), x.tobytes())
        assert r["status"] == "INVALID_ARGUMENT" and "0 tensor frame" not in r["error"]
        assert "frame" in r["error"]
        # The client truncates its segment under the daemon: a short read, not a crash.
        os.truncate(SHM_DIR / seg, 100)
        r = infer(a, shm_input(seg, x))
        assert r["status"] == "INVALID_ARGUMENT" and "truncated" in r["error"], r
        assert ask(a, {"op": "health"})["status"] == "OK"
    finally:
        a.close()
        b.close()


def test_bad_ring_requests_get_specific_errors(daemon: Daemon) -> None:
    s, other = dealer(daemon.ipc), dealer(daemon.ipc)
    try:
        cases = [
            ({"op": "shm", "slots": 0, "slot_bytes": 10}, "INVALID_ARGUMENT", "'slots'"),
            ({"op": "shm", "slots": 2}, "INVALID_ARGUMENT", "'slot_bytes'"),
            ({"op": "shm", "slots": 1000, "slot_bytes": 64}, "INVALID_ARGUMENT", "slots 1000"),
            ({"op": "shm", "slots": 4, "slot_bytes": 4 << 20}, "INVALID_ARGUMENT",
             "per-client limit"),
            ({"op": "shm", "slots": 1, "slot_bytes": 8, "pid": "me"}, "INVALID_ARGUMENT",
             "pid must be"),
            ({"op": "shm", "release": "edged-1-0123456789abcdef"}, "NOT_FOUND", "unknown"),
            ({"op": "shm", "release": "x", "slots": 1}, "INVALID_ARGUMENT", "not both"),
            ({"op": "health", "slots": 1}, "INVALID_ARGUMENT", "only op 'shm'"),
        ]
        for h, status, text in cases:
            r = ask(s, h)
            assert r["status"] == status and text in r["error"], (h, r)
        first, _ = ring(s)["segment"], ring(s)
        r = ask(s, {"op": "shm", "slots": 1, "slot_bytes": 64})
        assert r["status"] == "RESOURCE_EXHAUSTED" and "holds 2 rings" in r["error"], r
        r = ask(other, {"op": "shm", "release": first})
        assert r["status"] == "INVALID_ARGUMENT" and "another client" in r["error"], r
        r = ask(s, {"op": "shm", "release": first})
        assert r["status"] == "OK" and first not in segments(daemon.pid)
    finally:
        s.close()
        other.close()


def test_network_endpoints_hand_out_no_rings(make_daemon: Any, tmp_path: Path) -> None:
    from support.daemons import free_port

    port = free_port()
    d = make_daemon(digits_config(tmp_path, server="insecure = true"),
                    args=("--endpoint", f"tcp://0.0.0.0:{port}"))
    s = dealer(f"tcp://127.0.0.1:{port}")
    try:
        r = ask(s, {"op": "shm", "slots": 1, "slot_bytes": 64})
        assert r["status"] == "INVALID_ARGUMENT" and "daemon's host" in r["error"], r
    finally:
        s.close()
    with Client(f"tcp://127.0.0.1:{port}", shm=True) as c:  # falls back to frames
        assert c.infer("digits", digits(1)).ok
        assert c.shm is not None and c.shm.ring is None and c.shm.disabled
    assert not segments(d.pid)


# -- cleanup --------------------------------------------------------------------------------

CLIENT = """
import sys, time, numpy as np
from edged.client import Client
c = Client(sys.argv[1], shm=True)
c.infer("digits", np.zeros((1, 1, 28, 28), np.float32))
print(c.shm.ring.segment, flush=True)
time.sleep(600)
"""


def test_a_killed_client_leaves_no_segment(daemon: Daemon) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, "-c", CLIENT, daemon.ipc], stdout=subprocess.PIPE,
                         env=env, text=True)
    try:
        assert p.stdout is not None
        name = p.stdout.readline().strip()
        assert name in segments(daemon.pid)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    # bounded by [server.shm] check_s (0.1 s here)
    wait_until(lambda: name not in segments(daemon.pid), 20, "the dead client's ring removed")


def test_start_removes_segments_of_a_daemon_that_died(make_daemon: Any, tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    orphan = SHM_DIR / f"edged-{gone.pid}-0123456789abcdef"
    orphan.write_bytes(b"left by a SIGKILLed daemon")
    try:
        make_daemon(digits_config(tmp_path))
        assert not orphan.exists()
    finally:
        orphan.unlink(missing_ok=True)


def test_daemon_stop_removes_segments(make_daemon: Any, tmp_path: Path) -> None:
    d = make_daemon(digits_config(tmp_path, server=SHM_FAST))
    s = dealer(d.ipc)
    try:
        names = {ring(s)["segment"], ring(s)["segment"]}
        assert names <= segments(d.pid)
    finally:
        s.close()
    assert d.stop() == 0
    assert not segments(d.pid)
