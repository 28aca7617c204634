"""The clients against a real daemon: every status raises
its own class, 1,000 pipelined async requests each get their own reply, timeouts reset
cleanly, a cancelled request's late reply is dropped, and the control client finds the
daemon the way the daemon chose its runtime directory."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from support.configs import digits_config, one_variant_model, slow_table
from support.daemons import Daemon, free_port
from support.faults import broken_artifact, make_batch_collapsing_model
from support.paths import MODELS
from support.slow_model import make_slow_model

from edged.cli import main as cli
from edged.client import (
    STATUS_ERRORS,
    AsyncClient,
    Client,
    ClientTimeout,
    ControlClient,
    DeadlineExceeded,
    Dropped,
    EdgedClientError,
    Internal,
    InvalidArgument,
    NotFound,
    ProtocolViolation,
    Reply,
    ResourceExhausted,
    Unavailable,
    UnsupportedVersion,
    build_infer,
    find_control,
    parse_reply,
)
from edged.protocols.native.control import CONTROL_OPS
from edged.protocols.native.reply import encode_header

VAL = dict(np.load(MODELS / "validation.npz"))  # an NpzFile re-reads on every [ ]
X64 = np.ones((1, 64), np.float32)
#: Keeps the slow model busy for a few hundred ms (its loop count grows with max(x)).
HANG = np.full((1, 64), 100_000, np.float32)


def digit(i: int) -> np.ndarray:
    return (VAL["x"][i].astype(np.float32) / 255.0)[None, None]


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """digits + a slow model (queue of 4) + one that fails batches of 2 + one that fails to
    load: enough to produce every status for real."""
    tmp = tmp_path_factory.mktemp("clients")
    collapse = make_batch_collapsing_model(tmp / "collapse.onnx")
    extra = (slow_table(make_slow_model(tmp / "slow.onnx", 1000))
             + one_variant_model("collapse", collapse, max_batch_size=4)
             + one_variant_model("broken", broken_artifact(tmp, "corrupt")))
    cfg = digits_config(tmp, variants=("small-fp32",), extra_models=extra)
    # Room for 1,000 pipelined requests (the per-client in-flight limit is 1,024).
    cfg.write_text(cfg.read_text().replace("max_queue = 512", "max_queue = 1024", 1))
    daemon = Daemon(cfg, tmp)
    yield daemon
    daemon.stop()
    shutil.rmtree(tmp, ignore_errors=True)


def collect(c: Client, ids: list[str], timeout: float = 30.0) -> dict[Any, Reply]:
    got = {}
    while set(ids) - set(got):
        r = c.recv(timeout)
        got[r.id] = r
    return got


# -- every status raises its own class (sync client) -----------------------------------------

def test_the_status_map_covers_every_status() -> None:
    from edged import errors

    statuses = {v for k, v in vars(errors).items() if k.isupper() and isinstance(v, str)}
    assert set(STATUS_ERRORS) == statuses - {"OK"}
    for status, cls in STATUS_ERRORS.items():
        assert issubclass(cls, EdgedClientError) and cls.status == status


@pytest.mark.parametrize("cls, make", [
    (NotFound, lambda c: c.infer("no-such-model", digit(0), id="nf")),
    (InvalidArgument, lambda c: c.infer("digits", digit(0).astype(np.int32), id="ia")),
    (UnsupportedVersion, lambda c: c.call({"v": 2, "op": "health", "id": "uv"},
                                          raise_on_error=True)),
    (Unavailable, lambda c: c.infer("broken", np.zeros((1, 4), np.float32), id="un")),
    (Internal, lambda c: c.infer("collapse", np.zeros((2, 4), np.float32), id="in")),
], ids=lambda v: v.__name__ if isinstance(v, type) else "")
def test_a_non_ok_reply_raises_its_class_with_status_message_and_id(
        d: Daemon, cls: type[EdgedClientError], make: Callable[[Client], Reply]) -> None:
    with d.client() as c:
        with pytest.raises(cls) as e:
            make(c)
        assert e.value.status == cls.status
        assert e.value.request_id == e.value.header["id"] and e.value.request_id is not None
        assert e.value.message == e.value.header["error"] and e.value.message
        # The same request without raising gives the raw reply.
        assert c.infer("digits", digit(1)).ok


def test_raise_on_error_false_returns_the_reply(d: Daemon) -> None:
    with d.client() as c:
        r = c.infer("no-such-model", digit(0), raise_on_error=False)
        assert r.status == "NOT_FOUND" and "no-such-model" in (r.error or "")
        with pytest.raises(NotFound):
            r.raise_for_status()


def test_deadline_exceeded_raises(d: Daemon) -> None:
    with d.client() as c:
        c.send(*build_infer("slow", HANG, id="busy"))  # same socket: arrives first
        with pytest.raises(DeadlineExceeded) as e:
            c.infer("slow", X64, id="late", timeout_ms=1)
        assert e.value.request_id == "late" and "not computed" in e.value.message
        assert c.recv(30).id == "busy"


def test_queue_full_raises_resource_exhausted(d: Daemon) -> None:
    with d.client() as c:
        # More than max_queue = 4 ahead of the probe, whether or not "busy" has left the
        # queue for the backend yet. All pipelined: call() would drop the others' replies.
        ids = ["busy"] + [f"q{i}" for i in range(5)] + ["probe"]
        c.send(*build_infer("slow", HANG, id="busy"))
        for rid in ids[1:]:
            c.send(*build_infer("slow", X64, id=rid))
        got = collect(c, ids)
    with pytest.raises(ResourceExhausted) as e:
        got["probe"].raise_for_status()
    assert "full" in e.value.message and e.value.request_id == "probe"
    assert got["busy"].ok and {r.status for r in got.values()} == {"OK", "RESOURCE_EXHAUSTED"}


def test_a_replaced_stream_frame_raises_dropped(d: Daemon) -> None:
    with d.client() as c:
        c.send(*build_infer("slow", HANG, id="busy"))
        c.send(*build_infer("slow", X64, id="old", stream="cam"))
        c.send(*build_infer("slow", X64, id="new", stream="cam"))
        got = collect(c, ["busy", "old", "new"])
    assert got["new"].raise_for_status().ok and got["busy"].ok
    with pytest.raises(Dropped) as e:
        got["old"].raise_for_status()
    assert e.value.request_id == "old" and "stream" in e.value.message


def test_inputs_the_protocol_cannot_carry_are_refused_naming_the_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"input 'x': dtype complex64 is not one"):
        build_infer("m", {"x": np.zeros(2, np.complex64)})
    with pytest.raises(ValueError, match=r"input 0: .*only .jpg/.jpeg/.png"):
        build_infer("m", tmp_path / "frame.bmp")


def test_no_daemon_is_a_client_timeout_which_is_a_timeout_error() -> None:
    with Client(f"tcp://127.0.0.1:{free_port()}", timeout_s=0.3) as c, \
            pytest.raises(TimeoutError) as e:
        c.infer("digits", digit(0))
    assert isinstance(e.value, ClientTimeout) and isinstance(e.value, EdgedClientError)


# -- results ----------------------------------------------------------------------------------

def test_infer_returns_outputs_variant_and_timing(d: Daemon) -> None:
    with d.client() as c:
        r = c.infer("digits", digit(3), id="x")
    assert r.id == "x" and r.variant == "small-fp32" and r.detections is None
    assert {"queue_us", "compute_us", "batch"} <= set(r.timing)
    assert int(np.argmax(r.outputs["logits"])) == int(VAL["y"][3])


def test_detections_are_decoded_after_the_output_frames() -> None:
    rows = np.array([[10, 20, 110, 220, 0.9, 0], [5, 5, 50, 60, 0.4, 2]], np.float32)
    raw = np.arange(6, dtype=np.float32).reshape(1, 6)
    header = {"v": 1, "id": 4, "status": "OK", "model": "people", "variant": "fp32",
              "outputs": [{"name": "raw", "dtype": "float32", "shape": [1, 6]}],
              "detections": {"count": 2, "columns": ["x1", "y1", "x2", "y2", "score", "class"],
                             "labels": {"0": "person", "2": "car"}},
              "timing": {"queue_us": 1, "compute_us": 2, "batch": 1, "total_us": 3}}
    r = parse_reply([encode_header(header), raw.tobytes(), rows.tobytes()])
    assert r.detections is not None and len(r.detections) == 2
    np.testing.assert_array_equal(r.detections.boxes, rows[:, :4])
    assert [r.detections.label(k) for k in range(2)] == ["person", "car"]
    np.testing.assert_array_equal(r.outputs["raw"], raw)
    with pytest.raises(ProtocolViolation, match="detections"):
        parse_reply([encode_header(header), raw.tobytes(), rows.tobytes()[:-4]])
    with pytest.raises(ProtocolViolation, match=r"outputs\[0\]"):
        parse_reply([encode_header(header), rows.tobytes(), rows.tobytes()])


# -- timeouts and reconnects ------------------------------------------------------------------

def test_the_sync_client_starts_clean_after_a_timeout(d: Daemon) -> None:
    with d.client() as c:
        with pytest.raises(ClientTimeout) as e:
            c.infer("slow", HANG, id="hang", timeout_s=0.05)
        assert e.value.request_id == "hang"
        # The next call gets its own answer, never the late reply to "hang".
        for i in range(3):
            r = c.infer("digits", digit(i), id=f"after-{i}", timeout_s=30)
            assert r.id == f"after-{i}" and int(np.argmax(r.outputs["logits"])) == VAL["y"][i]


def test_both_clients_reconnect_when_the_daemon_comes_back(make_daemon: Any,
                                                           tmp_path: Path) -> None:
    """Same ipc path before and after a restart: the clients keep their endpoint."""
    cfg = digits_config(tmp_path, variants=("small-fp32",))
    first = make_daemon(cfg)

    async def infer(ac: AsyncClient, rid: str, timeout_s: float) -> Reply:
        return await ac.infer("digits", digit(2), id=rid, timeout_s=timeout_s)

    loop = asyncio.new_event_loop()
    ac = AsyncClient(first.ipc)
    try:
        with Client(first.ipc) as c:
            assert c.infer("digits", digit(0)).ok
            first.stop()
            with pytest.raises(ClientTimeout):
                c.infer("digits", digit(1), timeout_s=0.3)
            with pytest.raises(ClientTimeout):
                loop.run_until_complete(infer(ac, "while-down", 0.3))
            make_daemon(cfg)  # the same runtime dir, so the same ipc path
            assert c.infer("digits", digit(4), id="sync-after", timeout_s=30).id == "sync-after"
            assert loop.run_until_complete(infer(ac, "async-after", 30)).id == "async-after"
    finally:
        loop.run_until_complete(ac.close())
        loop.close()


# -- the async client -------------------------------------------------------------------------

def test_async_1000_pipelined_requests_each_get_their_own_reply(d: Daemon) -> None:
    n = 1000

    async def main() -> list[Reply]:
        async with AsyncClient(d.tcp, timeout_s=60) as c:
            return await asyncio.gather(*(c.infer("digits", digit(i % 50), id=f"r{i}")
                                          for i in range(n)))

    replies = asyncio.run(main())
    assert [r.id for r in replies] == [f"r{i}" for i in range(n)]
    ref = ort.InferenceSession(str(MODELS / "small-fp32.onnx"),
                               providers=["CPUExecutionProvider"])
    want = ref.run(None, {"input": np.concatenate([digit(i) for i in range(50)])})[0]
    for i, r in enumerate(replies):  # each reply carries its own request's answer
        np.testing.assert_allclose(r.outputs["logits"][0], want[i % 50], atol=1e-4)
    # They were in flight together: the daemon batched some of them.
    assert max(r.timing["batch"] for r in replies) > 1


def test_async_statuses_raise_the_same_classes(d: Daemon) -> None:
    async def main() -> list[Any]:
        async with AsyncClient(d.ipc) as c:
            busy = asyncio.ensure_future(c.infer("slow", HANG, id="busy", timeout_s=30))
            await asyncio.sleep(0)  # busy is sent first on this socket
            rest = [c.infer("slow", X64, id="late", timeout_ms=1),
                    c.infer("slow", X64, id="old", stream="s"),
                    c.infer("slow", X64, id="new", stream="s"),
                    c.infer("nope", X64, id="nf")]
            return await asyncio.gather(busy, *rest, return_exceptions=True)

    busy, late, old, new, nf = asyncio.run(main())
    assert busy.ok and new.ok
    assert isinstance(late, DeadlineExceeded) and late.request_id == "late"
    assert isinstance(old, Dropped) and old.request_id == "old"
    assert isinstance(nf, NotFound) and nf.request_id == "nf"


def test_async_timeout_and_cancellation_drop_the_late_reply(d: Daemon) -> None:
    async def wait_until(cond: Callable[[], bool], what: str) -> None:
        for _ in range(600):
            if cond():
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"never: {what}")

    async def main() -> None:
        async with AsyncClient(d.tcp, timeout_s=30) as c:
            task = asyncio.ensure_future(c.infer("slow", HANG, id="cancel-me"))
            await wait_until(lambda: c.in_flight == 1, "the request is in flight")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert c.in_flight == 0
            # A per-request timeout, while a request with the default timeout succeeds.
            slow, fast = await asyncio.gather(
                c.infer("slow", HANG, id="too-slow", timeout_s=0.05),
                c.infer("digits", digit(7), id="fast"), return_exceptions=True)
            assert isinstance(slow, ClientTimeout) and slow.request_id == "too-slow"
            assert fast.id == "fast" and int(np.argmax(fast.outputs["logits"])) == VAL["y"][7]
            # Both late replies arrive and are dropped, reaching no other request.
            await wait_until(lambda: c.stale_replies == 2, "two late replies dropped")
            r = await c.infer("slow", X64, id="next")
            assert r.id == "next" and r.ok

    asyncio.run(main())


def test_an_id_already_in_flight_is_refused(d: Daemon) -> None:
    async def main() -> None:
        async with AsyncClient(d.tcp) as c:
            first = asyncio.ensure_future(c.infer("slow", HANG, id="same"))
            await asyncio.sleep(0)
            with pytest.raises(ValueError, match="'same' is already in flight"):
                await c.infer("slow", X64, id="same")
            assert (await first).ok

    asyncio.run(main())


# -- the control client -----------------------------------------------------------------------

def test_control_client_calls_ops_and_raises_statuses(d: Daemon) -> None:
    with ControlClient(d.control, timeout_s=30) as ctl:
        st = ctl.call("status")
        assert st["status"] == "OK" and st["state"] == "serving"
        assert {m["name"] for m in ctl.call("models")["models"]} >= {"digits", "slow"}
        with pytest.raises(NotFound, match="'nope'"):
            ctl.call("swap", model="nope", variant="x")
        with pytest.raises(NotFound, match="unknown control op"):
            ctl.call("frobnicate")
        raw = ctl.call("swap", model="digits", variant="missing", raise_on_error=False)
        assert raw["status"] == "NOT_FOUND" and "missing" in raw["error"]
        with pytest.raises(InvalidArgument, match="'variant'"):
            ctl.call("swap", model="digits")  # checked before sending
    assert CONTROL_OPS["swap"].fields == ("model", "variant")


def test_control_client_without_a_daemon_times_out(tmp_path: Path) -> None:
    with ControlClient(f"ipc://{tmp_path}/control.sock", timeout_s=0.2) as ctl, \
            pytest.raises(ClientTimeout):
        ctl.call("status")


def test_find_control_honours_runtime_directory(d: Daemon, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("EDGED_CONTROL", raising=False)
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(d.runtime_dir))
    assert find_control() == d.control
    assert find_control("ipc:///elsewhere.sock") == "ipc:///elsewhere.sock"
    # The CLI finds it the same way.
    assert cli.main(["status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["control"] == d.control


def test_no_control_socket_names_where_it_looked(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EDGED_CONTROL", raising=False)
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(tmp_path))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # no /tmp/edged-* of other runs
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    if Path("/run/edged/control.sock").exists():
        pytest.skip("a system daemon's control socket exists on this machine")
    with pytest.raises(Unavailable, match=str(tmp_path / "control.sock")):
        ControlClient()


