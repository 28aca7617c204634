"""A ``ModelInferResponse`` written as protobuf wire bytes from prebuilt parts.

Why by hand: a reply differs from the last one of the same model only in its id, its
timing parameters and its output bytes. Building it as a message object costs a Python to
C call per field, map entry and shape dimension, and then a serialisation pass. Here the
parts that repeat (the model's name and version, each output's name, datatype and shape, a
parameter's key) are encoded once and cached, and a reply is one ``b"".join`` of them and
what changed. ``tests/test_kserve_grpc_wire.py`` checks every reply against the message
tritonclient's own classes decode it to.

The layout (``inference.ModelInferResponse`` in the KServe v2 / Triton proto): 1
``model_name``, 2 ``model_version``, 3 ``id``, 4 ``parameters`` (a map: entries of key 1 and
an ``InferParameter`` 2, whose ``int64_param`` is field 2 and ``string_param`` field 3),
5 ``outputs`` (``InferOutputTensor``: 1 ``name``, 2 ``datatype``, 3 ``shape`` packed
int64), 6 ``raw_output_contents``. Fields are written in number order, as protobuf's own
serialiser writes them.
"""

from __future__ import annotations

import functools

import numpy as np

from edged.protocols.kserve.tensors import as_wire, datatype

_LEN = 2  # wire type of a length-delimited field
_MASK64 = (1 << 64) - 1


def varint(n: int) -> bytes:
    """Base-128 varint of ``n`` (a negative int64 as its 64-bit two's complement)."""
    n &= _MASK64
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_RAW_TAG = bytes([6 << 3 | _LEN])


def _delimited(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | _LEN) + varint(len(payload)) + payload


@functools.lru_cache(maxsize=512)
def _text(number: int, value: str) -> bytes:
    """A string field (empty: not written, as proto3 omits defaults)."""
    return _delimited(number, value.encode()) if value else b""


@functools.lru_cache(maxsize=1024)
def _output(name: str, dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """Field 5, one ``InferOutputTensor`` (its contents travel in field 6)."""
    dims = b"".join(varint(d) for d in shape)
    body = _text(1, name) + _text(2, datatype(dtype)) + (_delimited(3, dims) if dims else b"")
    return _delimited(5, body)


def _int_param(key: str, value: int) -> bytes:
    """Field 4, a map entry ``key`` -> ``InferParameter{int64_param: value}``."""
    return _delimited(4, _text(1, key) + _delimited(2, b"\x10" + varint(value)))


def _str_param(key: str, value: str) -> bytes:
    """Field 4, a map entry ``key`` -> ``InferParameter{string_param: value}``."""
    return _delimited(4, _text(1, key) + _delimited(2, _text(3, value) or b"\x1a\x00"))


def infer_response(model: str, id_: str, variant: str, timing: dict[str, int],
                   parameters: dict[str, str],
                   outputs: list[tuple[str, np.ndarray]]) -> bytes:
    """The serialised ``ModelInferResponse`` of one answer (version "1", as edged serves
    one version of a model), ``outputs`` in ``raw_output_contents``."""
    parts = [_text(1, model), _text(2, "1"), _text(3, id_), _str_param("variant", variant),
             _int_param("batch", timing["batch"]), _int_param("queue_us", timing["queue_us"]),
             _int_param("compute_us", timing["compute_us"])]
    parts += [_str_param(k, v) for k, v in parameters.items()]
    raw = []
    for name, arr in outputs:
        parts.append(_output(name, arr.dtype, arr.shape))
        raw.append(as_wire(arr))
    for r in raw:  # the tag and length, then the bytes themselves (copied once, by join)
        parts += [_RAW_TAG, varint(len(r)), r]
    return b"".join(parts)
