"""Property tests of the wire decoder against hostile input.

``edged.protocols.native.request.parse_request`` reads straight off a socket. For any frames
at all it must either return a Request that respects every limit or raise ProtocolError with
a client-facing status; it must never allocate in proportion to what a header merely
*claims* (shapes are checked before anything is allocated, tensors are zero-copy views of
the received frames); and a valid request must come back exactly as sent.
"""

from __future__ import annotations

import json
import math
import tracemalloc
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from edged.client import build_infer
from edged.config.server import Limits
from edged.model.request import Request
from edged.protocols.native.client_decode import decode_reply
from edged.protocols.native.reply import ok_reply_frames
from edged.protocols.native.request import ENCODINGS, OPS, ProtocolError, parse_request
from edged.protocols.native.tensors import DTYPES

CLIENT_STATUSES = {"INVALID_ARGUMENT", "UNSUPPORTED_VERSION", "NOT_FOUND"}

SMALL = Limits(max_message_bytes=1 << 20, max_header_bytes=2048, max_inputs=3, max_rank=4,
               max_dim=64, max_elements=4096, max_id_length=16, max_image_pixels=1 << 16)
DEFAULT = Limits()

FUZZ = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def check(frames: list[Any], limits: Limits) -> Request | None:
    """The decoder's contract for one message, whatever it holds."""
    try:
        req = parse_request(frames, limits)
    except ProtocolError as e:
        assert e.status in CLIENT_STATUSES, (e.status, str(e))
        assert str(e), "an error must say what is wrong"
        rid = e.request_id
        assert rid is None or (isinstance(rid, str) and len(rid) <= limits.max_id_length) or (
            isinstance(rid, int) and not isinstance(rid, bool) and -(2**63) <= rid < 2**63)
        return None
    assert req.op in OPS
    if req.op != "infer":
        assert len(frames) == 1
        return req
    assert isinstance(req.model, str) and req.model
    assert 1 <= len(req.inputs) <= limits.max_inputs
    assert len(req.inputs) == len(frames) - 1
    if req.timeout_ms is not None:
        assert math.isfinite(req.timeout_ms) and req.timeout_ms > 0
    assert 0 <= req.priority <= 1000
    for meta, frame in zip(req.inputs, frames[1:], strict=True):
        assert meta.encoding in ENCODINGS
        if meta.encoding != "raw":
            assert len(frame) > 0
            continue
        assert meta.dtype is not None and meta.shape is not None
        assert meta.dtype in DTYPES.values()
        assert len(meta.shape) <= limits.max_rank
        assert all(0 <= d <= limits.max_dim for d in meta.shape)
        assert math.prod(meta.shape) <= limits.max_elements
        arr = meta.data
        assert isinstance(arr, np.ndarray) and arr.shape == meta.shape
        assert arr.nbytes == len(frame)
        if arr.nbytes:  # zero-copy: a view of the received frame, never a new buffer
            assert np.shares_memory(arr, np.frombuffer(frame, np.uint8))
    return req


# -- strategies ---------------------------------------------------------------------------

json_scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
                | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12))
json_values = st.recursive(
    json_scalars,
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
    max_leaves=12)

dims = st.integers(-2, 70) | st.sampled_from([0, 1, 2**20, 2**20 + 1, 2**31, 2**40, 2**63,
                                              2**64, -(2**63)])
shapes = st.lists(dims, max_size=6) | json_values
dtype_names = st.sampled_from([*DTYPES, "object", "float128", ">f4", "U8", "V16", "complex64",
                               "datetime64", "", "float32 "]) | json_values
input_metas = st.fixed_dictionaries({}, optional={
    "name": st.text(max_size=20) | json_values,
    "dtype": dtype_names,
    "shape": shapes,
    "encoding": st.sampled_from([*ENCODINGS, "gif", "RAW"]) | json_values,
    "junk": json_values,
}) | json_values

ids = (st.text(max_size=24) | st.integers(-(2**65), 2**65) | st.booleans() | json_values)
headers = st.fixed_dictionaries({}, optional={
    "v": st.sampled_from([1, 2, 0, -1, "1", 1.5]) | json_values,
    "op": st.sampled_from([*OPS, "explode", ""]) | json_values,
    "id": ids,
    "model": st.sampled_from(["digits", ""]) | json_values,
    "inputs": st.lists(input_metas, max_size=5) | json_values,
    "timeout_ms": st.floats(allow_nan=True, allow_infinity=True) | json_values,
    "priority": st.integers(-5, 1005) | json_values,
    "stream": st.text(max_size=20) | json_values,
    "outputs": st.lists(st.text(max_size=5), max_size=3) | json_values,
    "extra": json_values,
})


def frame_for(meta: Any, data: st.DataObject) -> bytes:
    """Usually the byte length the meta implies (so the deep checks are reached)."""
    if isinstance(meta, dict) and data.draw(st.booleans()):
        dt = DTYPES.get(meta.get("dtype")) if isinstance(meta.get("dtype"), str) else None
        shape = meta.get("shape")
        if dt is not None and isinstance(shape, list) and all(
                isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= 64 for d in shape):
            n = math.prod(shape) * dt.itemsize
            if n <= 1 << 16:
                return data.draw(st.binary(min_size=n, max_size=n))
    return data.draw(st.binary(max_size=64))


# -- properties ---------------------------------------------------------------------------

@FUZZ
@given(st.lists(st.binary(max_size=300), max_size=6))
def test_random_bytes_only_ever_raise_protocol_errors(frames: list[bytes]) -> None:
    for limits in (SMALL, DEFAULT):
        check(frames, limits)


@FUZZ
@given(headers, st.data())
def test_random_headers_only_ever_raise_protocol_errors(header: dict[str, Any],
                                                        data: st.DataObject) -> None:
    raw = json.dumps(header).encode()
    metas = header.get("inputs") if isinstance(header.get("inputs"), list) else []
    frames: list[Any] = [raw, *(frame_for(m, data) for m in metas)]
    if data.draw(st.integers(0, 9)) == 0:  # sometimes a frame too many or too few
        frames = frames[:-1] if len(frames) > 1 and data.draw(st.booleans()) else \
            [*frames, b"\x00"]
    for limits in (SMALL, DEFAULT):
        try:
            req = check(frames, limits)
        except Exception as e:  # pragma: no cover - the failure message is the point
            raise AssertionError(f"{type(e).__name__} escaped for header {raw[:300]!r}") from e
        if req is not None:
            assert header.get("v") == 1
            assert len(raw) <= limits.max_header_bytes


@FUZZ
@given(headers, st.text(max_size=300) | st.integers(-(2**65), 2**65))
def test_the_id_is_echoed_when_it_is_well_formed(header: dict[str, Any],
                                                 rid: str | int) -> None:
    header = {**header, "id": rid}
    try:
        parse_request([json.dumps(header).encode()], DEFAULT)
    except ProtocolError as e:
        well_formed = (isinstance(rid, str) and len(rid) <= DEFAULT.max_id_length) or (
            isinstance(rid, int) and -(2**63) <= rid < 2**63)
        assert e.request_id == (rid if well_formed else None)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.fixed_dictionaries({
    "dtype": st.sampled_from(list(DTYPES)),
    "shape": st.lists(st.sampled_from([1, 2**10, 2**19, 2**20, 2**20 + 1, 2**26, 2**40]),
                      min_size=1, max_size=8),
}), min_size=1, max_size=4), st.binary(max_size=64))
def test_declared_shapes_never_allocate(metas: list[dict[str, Any]], payload: bytes) -> None:
    """A header may claim petabytes; the decoder must not allocate a byte of that."""
    frames = [json.dumps({"v": 1, "id": 1, "model": "m", "inputs": metas}).encode(),
              *[payload for _ in metas]]
    tracemalloc.start()
    try:
        check(frames, DEFAULT)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024, f"decoder peaked at {peak} bytes for {metas}"


@st.composite
def valid_requests(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    n = draw(st.integers(1, 3))
    arrays = {}
    for i in range(n):
        dtype = np.dtype(draw(st.sampled_from(list(DTYPES))))
        shape = tuple(draw(st.lists(st.integers(0, 5), min_size=0, max_size=4)))
        arrays[f"in{i}"] = draw(hnp.arrays(dtype, shape))
    opts: dict[str, Any] = {"id": draw(st.text(max_size=16) | st.integers(-(2**63), 2**63 - 1))}
    if draw(st.booleans()):
        opts["timeout_ms"] = draw(st.floats(1e-6, 1e9) | st.integers(1, 10**9))
    if draw(st.booleans()):
        opts["priority"] = draw(st.integers(0, 1000))
    if draw(st.booleans()):
        opts["stream"] = draw(st.text(min_size=1, max_size=16))
    if draw(st.booleans()):
        opts["outputs"] = draw(st.lists(st.text(max_size=4), min_size=1, max_size=4))
    return opts, arrays


def by_hand(model: str, arrays: dict[str, np.ndarray], opts: dict[str, Any]) -> list[bytes]:
    metas = [{"name": k, "dtype": a.dtype.name, "shape": list(a.shape)} for k, a in arrays.items()]
    header = {"v": 1, "op": "infer", "model": model, "inputs": metas, **opts}
    return [json.dumps(header).encode(), *[a.tobytes() for a in arrays.values()]]


def via_client(model: str, arrays: dict[str, np.ndarray], opts: dict[str, Any]) -> list[bytes]:
    header, frames = build_infer(model, arrays, **opts)
    return [json.dumps({"v": 1, **header}).encode(), *[bytes(f) for f in frames]]


@FUZZ
@given(valid_requests(), st.text(min_size=1, max_size=20), st.booleans())
def test_valid_requests_round_trip(req: tuple[dict[str, Any], dict[str, np.ndarray]],
                                   model: str, client: bool) -> None:
    opts, arrays = req
    # edged.client.build_infer (rank-0 inputs included), or frames written by hand.
    wire = via_client(model, arrays, opts) if client else by_hand(model, arrays, opts)
    got = check(wire, Limits(max_id_length=16))
    assert got is not None
    assert got.op == "infer" and got.model == model and got.id == opts["id"]
    assert got.timeout_ms == (float(opts["timeout_ms"]) if "timeout_ms" in opts else None)
    assert got.priority == opts.get("priority", 1)
    assert got.stream == opts.get("stream")
    assert got.outputs == (list(dict.fromkeys(opts["outputs"])) if "outputs" in opts else None)
    assert [m.name for m in got.inputs] == list(arrays)
    for meta, a in zip(got.inputs, arrays.values(), strict=True):
        assert meta.dtype == a.dtype.newbyteorder("<") and meta.shape == a.shape
        assert meta.data.tobytes() == a.tobytes()  # bit-exact, NaNs included


def test_build_infer_keeps_a_scalar_input_rank_0() -> None:
    got = parse_request(via_client("m", {"t": np.array(0.5, np.float32)}, {}), DEFAULT)
    assert got.inputs[0].shape == ()


@FUZZ
@given(st.dictionaries(st.text(min_size=1, max_size=8),
                       st.sampled_from(list(DTYPES)).flatmap(
                           lambda d: hnp.arrays(np.dtype(d), hnp.array_shapes(
                               min_dims=1, max_dims=3, min_side=0, max_side=4))),
                       min_size=1, max_size=3),
       st.text(max_size=16) | st.integers(-(2**63), 2**63 - 1))
def test_replies_round_trip(outputs: dict[str, np.ndarray], rid: str | int) -> None:
    timing = {"queue_us": 1, "compute_us": 2, "batch": 3, "total_us": 4}  # what the server sends
    frames = ok_reply_frames(rid, "m", "v", list(outputs.items()), timing)
    header, outs = decode_reply([bytes(f) for f in frames])
    assert header["id"] == rid and header["status"] == "OK" and header["timing"] == timing
    assert list(outs) == list(outputs)
    for name, a in outputs.items():
        assert outs[name].shape == a.shape and outs[name].tobytes() == a.tobytes()


# -- limits at their edges ------------------------------------------------------------------

def test_header_size_limit_is_exact() -> None:
    base = {"v": 1, "op": "health", "id": ""}
    room = SMALL.max_header_bytes - len(json.dumps(base).encode())
    at_limit = json.dumps({**base, "id": "x" * room}).encode()
    over = json.dumps({**base, "id": "x" * (room + 1)}).encode()
    assert len(at_limit) == SMALL.max_header_bytes
    with pytest.raises(ProtocolError) as e:  # at the size limit, but the id is too long
        parse_request([at_limit], SMALL)
    assert "id must be" in str(e.value)
    with pytest.raises(ProtocolError) as e:
        parse_request([over], SMALL)
    assert "header is" in str(e.value) and e.value.status == "INVALID_ARGUMENT"


@pytest.mark.parametrize(("shape", "ok"), [
    ([64, 64], True),            # 4096 elements == max_elements
    ([64, 64, 1, 1], True),      # rank 4 == max_rank
    ([65], False),               # dim over max_dim
    ([64, 64, 2], False),        # elements over max_elements
    ([1, 1, 1, 1, 1], False),    # rank over max_rank
])
def test_shape_limits_are_exact(shape: list[int], ok: bool) -> None:
    n = math.prod(shape)
    frames = [json.dumps({"v": 1, "model": "m", "inputs": [
        {"dtype": "uint8", "shape": shape}]}).encode(), b"\x01" * n]
    if ok:
        assert check(frames, SMALL) is not None
    else:
        with pytest.raises(ProtocolError) as e:
            parse_request(frames, SMALL)
        assert e.value.status == "INVALID_ARGUMENT" and "limit" in str(e.value)


def test_input_count_limit() -> None:
    metas = [{"dtype": "uint8", "shape": [1]}] * (SMALL.max_inputs + 1)
    with pytest.raises(ProtocolError) as e:
        parse_request([json.dumps({"v": 1, "model": "m", "inputs": metas}).encode(),
                       *[b"\x00"] * len(metas)], SMALL)
    assert "limit" in str(e.value)


# -- JSON the standard library refuses with something other than JSONDecodeError -------------
# (found by these tests: they escaped parse_request unanswered until decode_header caught them)

JSON_ESCAPES = {
    "a 5000-digit integer (int max_str_digits: ValueError)":
        b'{"v":1,"op":"health","id":' + b"7" * 5000 + b"}",
    "nesting 20000 deep (RecursionError)": b"[" * 20000 + b"]" * 20000,
}


@pytest.mark.parametrize("case", list(JSON_ESCAPES))
def test_json_the_decoder_chokes_on_is_a_protocol_error(case: str) -> None:
    raw = JSON_ESCAPES[case]
    assert len(raw) <= DEFAULT.max_header_bytes
    with pytest.raises(ProtocolError) as e:
        parse_request([raw], DEFAULT)
    assert e.value.status == "INVALID_ARGUMENT"
