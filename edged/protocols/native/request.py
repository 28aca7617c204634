"""A request off the socket: decoded strictly and within bounds, or a ProtocolError.

Decoding is strict and bounded because everything here comes off a socket: the
header size, frame count, rank, every dimension and the element count are capped
*before* anything is allocated (against ``[server.limits]``, ``edged.config.server.Limits``),
dtypes come from a fixed allow-list (``tensors.DTYPES``), and tensor frames are
wrapped with ``np.frombuffer`` on the received buffer (zero-copy) only after their
byte length has been checked against shape × itemsize. See docs/protocol.md.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from edged.errors import (
    EdgedError,
    InvalidArgument,
    NotFound,
    UnsupportedVersion,
)
from edged.model.request import InputMeta, Request
from edged.protocols.native import VERSION
from edged.protocols.native.tensors import DTYPES, frame_buffer

if TYPE_CHECKING:  # the config is read by the caller; requests only need its bounds
    from edged.config.server import Limits

OPS = ("infer", "models", "health", "shm")
ENCODINGS = ("raw", "jpeg", "png", "shm")

#: detection options (docs/protocol.md, "Detection models"); the model checks their values
DETECT_OPTIONS = frozenset({"conf", "iou", "max_det", "classes", "raw", "track"})
#: the ``shm`` op: obtain a slot ring (slots, slot_bytes, pid) or release one (release)
SHM_KEYS = frozenset({"slots", "slot_bytes", "pid", "release"})
_HEADER_KEYS = frozenset(
    {"v", "op", "id", "model", "inputs", "timeout_ms", "priority", "stream", "outputs",
     "max_fps"}
) | DETECT_OPTIONS | SHM_KEYS
_SHM_INPUT_KEYS = frozenset({"segment", "offset", "length"})
_INPUT_KEYS = frozenset({"name", "dtype", "shape", "encoding"}) | _SHM_INPUT_KEYS


@dataclass(frozen=True)
class ShmRef:
    """Where an ``"encoding": "shm"`` input lies: checked against the segment by the
    daemon's shared-memory frames (``shm_frames``), which replace it with the tensor it reads."""

    segment: str
    offset: int
    length: int


class ProtocolError(EdgedError):
    """A request that cannot be decoded; carries the id if one could be read."""

    def __init__(self, err: EdgedError, request_id: str | int | None) -> None:
        super().__init__(str(err), err.status)
        self.request_id = request_id


def peek_id(header: Any, limits: Limits) -> str | int | None:
    """The request id if it is well-formed, so even a bad request can be answered by id."""
    if not isinstance(header, dict):
        return None
    rid = header.get("id")
    if isinstance(rid, bool):
        return None
    if isinstance(rid, int) and -(2**63) <= rid < 2**63:
        return rid
    if isinstance(rid, str) and len(rid) <= limits.max_id_length:
        return rid
    return None


def decode_header(raw: Any, limits: Limits) -> dict[str, Any]:
    """Frame 0 as a JSON object, its size checked against ``max_header_bytes`` first.

    The native room also calls it alone on a message too large to parse in full,
    to find the id to answer."""
    buf = frame_buffer(raw)
    if buf.nbytes > limits.max_header_bytes:
        raise InvalidArgument(
            f"header is {buf.nbytes} bytes; the limit is {limits.max_header_bytes}"
        )
    try:
        header = json.loads(bytes(buf).decode("utf-8"))
    except RecursionError:
        raise InvalidArgument("frame 0: JSON header nested too deeply") from None
    except ValueError as e:  # UnicodeDecodeError, JSONDecodeError, int digit limit
        raise InvalidArgument(f"frame 0 must be a UTF-8 JSON header: {e}") from None
    if not isinstance(header, dict):
        raise InvalidArgument("header must be a JSON object")
    return header


def parse_request(frames: list[Any], limits: Limits) -> Request:
    """Decode header + tensor frames into a Request, or raise ProtocolError."""
    header: Any = None
    try:
        if not frames:
            raise InvalidArgument("empty message: expected a JSON header frame")
        header = decode_header(frames[0], limits)
        return _parse(header, frames[1:], limits)
    except EdgedError as e:
        raise ProtocolError(e, peek_id(header, limits)) from None


def _parse(h: dict[str, Any], tensors: list[Any], limits: Limits) -> Request:
    """The envelope every op shares (version, keys, id, op), then the op's own fields."""
    v = h.get("v")
    if type(v) is not int or v != VERSION:  # not True, not 1.0
        raise UnsupportedVersion(
            f"protocol version {v!r} is not supported; this daemon speaks v={VERSION}"
        )
    extra = set(h) - _HEADER_KEYS
    if extra:
        raise InvalidArgument(f"unknown header key(s): {', '.join(sorted(extra))}")
    rid = h.get("id")
    if rid is not None and peek_id(h, limits) is None:
        raise InvalidArgument(
            f"id must be a string of at most {limits.max_id_length} characters or a 64-bit integer"
        )
    op = h.get("op", "infer")
    if op not in OPS:
        raise NotFound(f"unknown op {op!r}; known ops: {', '.join(OPS)}")
    req = Request(op=op, id=rid)
    if op == "infer":
        _reject_shm_keys(h)
        _parse_infer(h, tensors, limits, req)
        return req
    if tensors:
        raise InvalidArgument(f"op {op!r} takes no tensor frames; got {len(tensors)}")
    if op == "shm":
        req.shm = _parse_shm_op(h)
    else:
        _reject_shm_keys(h)
    return req


def _reject_shm_keys(h: dict[str, Any]) -> None:
    if SHM_KEYS & set(h):
        raise InvalidArgument(f"{', '.join(sorted(SHM_KEYS & set(h)))}: only op 'shm' "
                              "takes these keys")


def _parse_infer(h: dict[str, Any], tensors: list[Any], limits: Limits, req: Request) -> None:
    """An ``infer`` request's model, scheduling fields, options and inputs, in that order."""
    model = h.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidArgument("infer needs 'model': a non-empty string")
    req.model = model
    _parse_scheduling(h, limits, req)
    if "outputs" in h and h["outputs"] is not None:
        outs = h["outputs"]
        if not isinstance(outs, list) or not all(isinstance(o, str) for o in outs) or not outs:
            raise InvalidArgument("outputs must be a non-empty list of output names")
        req.outputs = list(dict.fromkeys(outs))
    req.options = {k: h[k] for k in DETECT_OPTIONS if k in h}
    req.inputs = _parse_inputs(h.get("inputs"), tensors, limits)


def _parse_scheduling(h: dict[str, Any], limits: Limits, req: Request) -> None:
    """``timeout_ms``, ``priority``, ``stream`` and ``max_fps``: how the request is queued."""
    if "timeout_ms" in h:
        t = h["timeout_ms"]
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
            raise InvalidArgument(f"timeout_ms must be a number > 0; got {t!r}")
        req.timeout_ms = float(t)
    if "priority" in h:
        p = h["priority"]
        if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p <= 1000:
            raise InvalidArgument(f"priority must be an integer from 0 to 1000; got {p!r}")
        req.priority = p
    if "stream" in h and h["stream"] is not None:
        s = h["stream"]
        if not isinstance(s, str) or not s or len(s) > limits.max_id_length:
            raise InvalidArgument(
                f"stream must be a non-empty string of at most {limits.max_id_length} characters"
            )
        req.stream = s
    if "max_fps" in h and h["max_fps"] is not None:
        f = h["max_fps"]
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 < f <= 1e6:
            raise InvalidArgument(f"max_fps must be a number > 0; got {f!r}")
        if req.stream is None:
            raise InvalidArgument("max_fps limits a stream: the request needs a 'stream' too")
        req.max_fps = float(f)


def _parse_inputs(metas: Any, tensors: list[Any], limits: Limits) -> list[InputMeta]:
    """One InputMeta per header input; frames pair with the inputs not in shared memory."""
    if not isinstance(metas, list) or not metas:
        raise InvalidArgument("infer needs 'inputs': a non-empty list of input descriptions")
    if len(metas) > limits.max_inputs:
        raise InvalidArgument(f"{len(metas)} inputs; the limit is {limits.max_inputs}")
    framed = sum(1 for m in metas if not (isinstance(m, dict) and m.get("encoding") == "shm"))
    if len(tensors) != framed:
        raise InvalidArgument(
            f"header lists {framed} input(s) sent as frames but the message carries "
            f"{len(tensors)} tensor frame(s); send one frame per input that is not in shared "
            "memory, in order"
        )
    frames = iter(tensors)
    inputs = []
    for i, meta in enumerate(metas):
        shm = isinstance(meta, dict) and meta.get("encoding") == "shm"
        inputs.append(_parse_input(i, meta, None if shm else next(frames), limits))
    return inputs


def _parse_shm_op(h: dict[str, Any]) -> dict[str, Any]:
    """``{"slots": n, "slot_bytes": b, "pid": p}`` asks for a ring; ``{"release": name}``
    gives one back. Bounds against the daemon's limits are ``shm_frames``'s job."""
    if "release" in h:
        seg = h["release"]
        if not isinstance(seg, str) or not seg or len(seg) > 64:
            raise InvalidArgument("release must be the name of a segment this client holds")
        if set(h) & {"slots", "slot_bytes"}:
            raise InvalidArgument("op 'shm' either asks for a ring (slots, slot_bytes) or "
                                  "releases one (release), not both")
        return {"release": seg}
    out: dict[str, Any] = {}
    for key in ("slots", "slot_bytes"):
        v = h.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InvalidArgument(f"op 'shm' needs {key!r}: an integer >= 1; got {v!r}")
        out[key] = v
    pid = h.get("pid")
    if pid is not None and (isinstance(pid, bool) or not isinstance(pid, int)
                            or not 0 < pid < 1 << 22):
        raise InvalidArgument(f"pid must be the client's process id (a positive integer); "
                              f"got {pid!r}")
    out["pid"] = pid
    return out


def _parse_input(i: int, meta: Any, frame: Any, limits: Limits) -> InputMeta:
    where = f"inputs[{i}]"
    if not isinstance(meta, dict):
        raise InvalidArgument(f"{where} must be an object with name, dtype, shape, encoding")
    extra = set(meta) - _INPUT_KEYS
    if extra:
        raise InvalidArgument(f"{where}: unknown key(s): {', '.join(sorted(extra))}")
    name = meta.get("name")
    if name is not None and (not isinstance(name, str) or len(name) > limits.max_id_length):
        raise InvalidArgument(f"{where}.name must be a string")
    encoding = meta.get("encoding", "raw")
    if encoding not in ENCODINGS:
        raise InvalidArgument(
            f"{where}.encoding must be one of {', '.join(ENCODINGS)}; got {encoding!r}"
        )
    if encoding != "shm" and set(meta) & _SHM_INPUT_KEYS:
        raise InvalidArgument(f"{where}: segment, offset and length belong to "
                              f"\"encoding\": \"shm\" inputs; this one is {encoding!r}")
    buf = frame_buffer(frame) if encoding != "shm" else None
    if buf is not None and encoding != "raw":
        if buf.nbytes == 0:
            raise InvalidArgument(f"{where}: empty {encoding} image")
        return InputMeta(name, encoding, None, None, buf)

    dtype_name = meta.get("dtype")
    if not isinstance(dtype_name, str) or dtype_name not in DTYPES:
        raise InvalidArgument(
            f"{where}.dtype must be one of {', '.join(DTYPES)}; got {dtype_name!r}"
        )
    dtype = DTYPES[dtype_name]
    shape = meta.get("shape")
    want = _elements(where, shape, limits) * dtype.itemsize
    if buf is None:
        return InputMeta(name, "shm", dtype, tuple(shape), _shm_ref(where, meta, want, shape,
                                                                      dtype_name))
    if buf.nbytes != want:
        raise InvalidArgument(
            f"{where}: frame has {buf.nbytes} bytes but shape {shape} of {dtype_name} "
            f"needs {want}"
        )
    arr = np.frombuffer(buf, dtype=dtype).reshape(shape)
    return InputMeta(name, "raw", dtype, tuple(shape), arr)


def _elements(where: str, shape: Any, limits: Limits) -> int:
    """The element count of a header shape, checked against the rank, dimension and
    element limits before anything is allocated for it."""
    if not isinstance(shape, list):
        raise InvalidArgument(f"{where}.shape must be a list of non-negative integers")
    if len(shape) > limits.max_rank:
        raise InvalidArgument(f"{where}: rank {len(shape)} exceeds the limit {limits.max_rank}")
    elements = 1
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, int) or d < 0:
            raise InvalidArgument(f"{where}.shape must hold non-negative integers; got {shape!r}")
        if d > limits.max_dim:
            raise InvalidArgument(f"{where}: dimension {d} exceeds the limit {limits.max_dim}")
        elements *= d
    if elements > limits.max_elements:
        raise InvalidArgument(
            f"{where}: {elements} elements exceed the limit {limits.max_elements}"
        )
    return elements


def _shm_ref(where: str, meta: dict[str, Any], want: int, shape: list[int],
             dtype_name: str) -> ShmRef:
    seg = meta.get("segment")
    if not isinstance(seg, str) or not seg or len(seg) > 64:
        raise InvalidArgument(f"{where}.segment must name a shared-memory segment from op "
                              f"'shm'; got {seg!r}")
    vals = []
    for key in ("offset", "length"):
        v = meta.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise InvalidArgument(f"{where}.{key} must be a non-negative integer; got {v!r}")
        vals.append(v)
    if vals[1] != want:
        raise InvalidArgument(f"{where}.length is {vals[1]} bytes but shape {shape} of "
                              f"{dtype_name} needs {want}")
    return ShmRef(seg, vals[0], vals[1])
