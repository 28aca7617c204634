"""Frigate's byte layout in process (edged/protocols/frigate/wire.py): requests in every layout
Frigate sends, and the 480-byte result, frame by frame."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edged.errors import InvalidArgument
from edged.protocols.frigate.wire import RESULT_BYTES, ZEROS, encode_result, labelmap, parse_request

RNG = np.random.default_rng(0)
IMAGE = RNG.integers(0, 256, (48, 64, 3), dtype=np.uint8)  # HxWx3, distinct per channel


def request(tensor: np.ndarray, **header: object) -> list[bytes]:
    h = {"shape": list(tensor.shape), "dtype": tensor.dtype.name, "model_type": "ssd", **header}
    return [json.dumps(h).encode(), tensor.tobytes()]


@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("kind", ["uint8", "float32", "float_denorm", "float16", "int8"])
def test_every_layout_and_dtype_gives_back_the_same_image(layout: str, kind: str) -> None:
    t = IMAGE[None] if layout == "nhwc" else IMAGE.transpose(2, 0, 1)[None]
    if kind == "float32":
        t = t.astype(np.float32)
    elif kind == "float_denorm":
        t = t.astype(np.float32) / 255.0
    elif kind == "float16":
        t = t.astype(np.float16)
    elif kind == "int8":
        t = (t.astype(np.int16) - 128).astype(np.int8)
    r = parse_request(request(np.ascontiguousarray(t)), 1 << 25)
    assert r.layout == layout and r.frame.dtype == np.uint8 and r.frame.shape == (48, 64, 3)
    assert np.abs(r.frame.astype(int) - IMAGE).max() <= 1


@pytest.mark.parametrize("frames,field", [
    ([b"{}"], "2 frames"),
    ([b"[1]", b""], "JSON object"),
    ([b'{"shape":[1,4,4,3],"dtype":"bool"}', bytes(48)], "dtype"),
    ([b'{"shape":[1,4,4,3],"dtype":"uint8","model_type":5}', bytes(48)], "model_type"),
    ([b'{"shape":[2,4,4,3],"dtype":"uint8"}', bytes(96)], "batch 1"),
    ([b'{"shape":[1,4,4,4],"dtype":"uint8"}', bytes(64)], "3-channel"),
    ([b'{"shape":[1,4,-4,3],"dtype":"uint8"}', bytes(48)], "positive"),
    ([b'{"shape":[1,4,4,3],"dtype":"uint8"}', bytes(47)], "47 bytes"),
    ([b'{"shape":[1,5000,5000,3],"dtype":"uint8"}', b""], "pixels"),
])
def test_bad_requests_name_what_is_wrong(frames: list[bytes], field: str) -> None:
    with pytest.raises(InvalidArgument, match=field):
        parse_request(frames, 1 << 24)


def test_nan_in_a_float_tensor_is_invalid() -> None:
    t = np.full((1, 4, 4, 3), np.nan, np.float32)
    with pytest.raises(InvalidArgument, match="NaN"):
        parse_request(request(t), 1 << 20)


def test_result_rows_are_normalised_mapped_best_first_and_zero_padded() -> None:
    # x1, y1, x2, y2 in pixels of a 200x100 tensor, score, class
    dets = np.array([[20, 10, 100, 90, 0.9, 0], [0, 0, 200, 100, 0.5, 2],
                     [5, 5, 6, 6, 0.1, 0]], np.float32)
    raw = encode_result(dets, 200, 100, 0.3, {2: 7})
    assert len(raw) == RESULT_BYTES == 480
    rows = np.frombuffer(raw, "<f4").reshape(20, 6)
    np.testing.assert_allclose(rows[0], [0, 0.9, 0.1, 0.1, 0.9, 0.5], rtol=1e-6)
    np.testing.assert_allclose(rows[1], [7, 0.5, 0.0, 0.0, 1.0, 1.0], rtol=1e-6)
    assert not rows[2:].any()  # the 0.1 row is under min_score


def test_at_most_20_rows_and_empty_is_zeros() -> None:
    many = np.tile(np.array([[0, 0, 10, 10, 0.8, 0]], np.float32), (50, 1))
    rows = np.frombuffer(encode_result(many, 10, 10, 0.0, {}), "<f4").reshape(20, 6)
    assert (rows[:, 1] == np.float32(0.8)).all()
    assert encode_result(np.zeros((0, 6), np.float32), 10, 10, 0.0, {}) == ZEROS


def test_labelmap_lists_frigate_ids() -> None:
    assert labelmap(("person", "bicycle", "car"), {2: 7}) == "0 person\n1 bicycle\n7 car\n"


@pytest.mark.parametrize("frames,management", [
    ([b'{"model_request": true, "model_name": "a.onnx"}'], True),
    ([b'{"model_data": true, "model_name": "a.onnx"}', b"bytes"], True),
    ([b'{"model_request": true}'], True),  # malformed, but management: it gets a JSON answer
    ([b'{"shape":[1,4,4,3],"dtype":"uint8","model_type":"ssd"}', bytes(48)], False),
    ([b'{"shape":[1,4,4,3],"note":"\\"model_data\\""}', bytes(48)], False),  # a value, not a key
    ([b"not json model_request"], False),
    ([], False),
])
def test_management_messages_are_told_apart_by_their_keys(frames: list[bytes],
                                                          management: bool) -> None:
    from edged.protocols.frigate.wire import management_header

    assert (management_header(frames) is not None) == management


def test_refusals_have_the_shape_of_the_answer_asked_for() -> None:
    from edged.protocols.frigate.wire import refusal

    r = refusal({"model_request": True, "model_name": 5}, "bad")
    assert r == {"model_available": False, "model_loaded": False, "model_name": None,
                 "message": "bad"}
    d = refusal({"model_data": True, "model_name": "x.onnx"}, "too big")
    assert d == {"model_saved": False, "model_loaded": False, "model_name": "x.onnx",
                 "message": "too big"}
