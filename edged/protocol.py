"""Wire protocol v1: multipart ZeroMQ messages with a JSON header and raw tensor frames.

Decoding is strict and bounded because everything here comes off a socket: the
header size, frame count, rank, every dimension and the element count are capped
*before* anything is allocated, dtypes come from a fixed allow-list (never
``np.dtype(user_string)`` on arbitrary text), and tensor frames are wrapped with
``np.frombuffer`` on the received buffer (zero-copy) only after their byte length has
been checked against shape × itemsize. See docs/protocol.md.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edged.errors import (
    EdgedError,
    InvalidArgument,
    NotFound,
    UnsupportedVersion,
)

VERSION = 1
OPS = ("infer", "models", "health", "shm")
ENCODINGS = ("raw", "jpeg", "png", "shm")

#: numpy names a client may use; all little-endian, no object/void/string dtypes.
DTYPES: dict[str, np.dtype] = {
    name: np.dtype(name).newbyteorder("<")
    for name in (
        "bool", "uint8", "int8", "uint16", "int16", "uint32", "int32",
        "uint64", "int64", "float16", "float32", "float64",
    )
}

#: detection options (DESIGN "Detection models"); the model checks their values
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
class Limits:
    """Bounds on what one message may make the daemon read or allocate."""

    max_message_bytes: int = 64 << 20
    #: ZMQ_MAXMSGSIZE: a frame above it makes libzmq drop the connection unread. Between
    #: max_message_bytes and this, a message is read and answered RESOURCE_EXHAUSTED.
    #: 0 = twice max_message_bytes.
    hard_message_bytes: int = 0
    max_header_bytes: int = 64 << 10
    max_inputs: int = 16
    max_rank: int = 8
    max_dim: int = 1 << 20
    max_elements: int = 1 << 26
    max_id_length: int = 256
    max_image_pixels: int = 1 << 25  # decoded image area (e.g. 8K x 4K)

    @property
    def hard_cap(self) -> int:
        return self.hard_message_bytes or 2 * self.max_message_bytes


@dataclass(frozen=True)
class ShmRef:
    """Where an ``"encoding": "shm"`` input lies: checked against the segment by the
    daemon's shm room, which replaces it with the tensor it reads."""

    segment: str
    offset: int
    length: int


@dataclass
class InputMeta:
    name: str | None
    encoding: str
    dtype: np.dtype | None
    shape: tuple[int, ...] | None
    data: Any  # np.ndarray for raw, memoryview/bytes for encoded images, ShmRef for shm


@dataclass
class Request:
    """A decoded request. ``id`` is echoed as given (str or int)."""

    op: str
    id: str | int | None
    model: str | None = None
    inputs: list[InputMeta] = field(default_factory=list)
    timeout_ms: float | None = None
    priority: int = 1
    stream: str | None = None
    outputs: list[str] | None = None
    #: frames per second this request's stream may send (frames beyond: DROPPED)
    max_fps: float | None = None
    #: detection options given in the header (conf, iou, max_det, classes, raw)
    options: dict[str, Any] = field(default_factory=dict)
    #: the ``shm`` op's arguments (slots, slot_bytes, pid or release), checked
    shm: dict[str, Any] = field(default_factory=dict)

    @property
    def shm_inputs(self) -> bool:
        return any(m.encoding == "shm" for m in self.inputs)


class ProtocolError(EdgedError):
    """A request that cannot be decoded; carries the id if one could be read."""

    def __init__(self, err: EdgedError, request_id: str | int | None) -> None:
        super().__init__(str(err), err.status)
        self.request_id = request_id


def _buffer(frame: Any) -> memoryview:
    buf = getattr(frame, "buffer", None)
    if buf is not None:
        return buf  # zmq.Frame: zero-copy view of the received message
    return memoryview(frame)


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
    buf = _buffer(raw)
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
    if op != "infer":
        if tensors:
            raise InvalidArgument(f"op {op!r} takes no tensor frames; got {len(tensors)}")
        if op == "shm":
            req.shm = _parse_shm_op(h)
        elif SHM_KEYS & set(h):
            raise InvalidArgument(f"{', '.join(sorted(SHM_KEYS & set(h)))}: only op 'shm' "
                                  "takes these keys")
        return req
    if SHM_KEYS & set(h):
        raise InvalidArgument(f"{', '.join(sorted(SHM_KEYS & set(h)))}: only op 'shm' "
                              "takes these keys")

    model = h.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidArgument("infer needs 'model': a non-empty string")
    req.model = model

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
    if "outputs" in h and h["outputs"] is not None:
        outs = h["outputs"]
        if not isinstance(outs, list) or not all(isinstance(o, str) for o in outs) or not outs:
            raise InvalidArgument("outputs must be a non-empty list of output names")
        req.outputs = list(dict.fromkeys(outs))

    req.options = {k: h[k] for k in DETECT_OPTIONS if k in h}
    metas = h.get("inputs")
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
    for i, meta in enumerate(metas):
        shm = isinstance(meta, dict) and meta.get("encoding") == "shm"
        req.inputs.append(_parse_input(i, meta, None if shm else next(frames), limits))
    return req


def _parse_shm_op(h: dict[str, Any]) -> dict[str, Any]:
    """``{"slots": n, "slot_bytes": b, "pid": p}`` asks for a ring; ``{"release": name}``
    gives one back. Bounds against the daemon's limits are the shm room's job."""
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
    buf = _buffer(frame) if encoding != "shm" else None
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
    want = elements * dtype.itemsize
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


# -- replies ---------------------------------------------------------------------------

def encode_header(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def error_reply(request_id: str | int | None, status: str, message: str) -> dict[str, Any]:
    return {"v": VERSION, "id": request_id, "status": status, "error": message}


def ok_reply_frames(
    request_id: str | int | None,
    model: str,
    variant: str,
    outputs: list[tuple[str, np.ndarray]],
    timing: dict[str, Any],
    detections: np.ndarray | None = None,
    detections_header: dict[str, Any] | None = None,
) -> list[Any]:
    """Header + one C-contiguous little-endian buffer per output (+ the detections frame,
    float32 [K, 6], after the outputs, when the model is a detector)."""
    if detections is not None:
        frames = ok_reply_frames(request_id, model, variant, outputs, timing)
        head = json.loads(frames[0])
        d = np.ascontiguousarray(detections, dtype="<f4")
        head["detections"] = {**(detections_header or {}), "count": int(d.shape[0])}
        return [encode_header(head), *frames[1:], d.data if d.nbytes else b""]
    if len(outputs) == 1:
        name, a = outputs[0]
        if a.flags.c_contiguous and a.dtype.byteorder != ">" and a.nbytes:
            # The common case, without json.dumps on nested dicts (~3x cheaper).
            t = timing
            head = (f'{{"v":1,"id":{json.dumps(request_id)},"status":"OK",'
                    f'"model":{json.dumps(model)},"variant":{json.dumps(variant)},'
                    f'"outputs":[{{"name":{json.dumps(name)},"dtype":"{a.dtype.name}",'
                    f'"shape":[{",".join(map(str, a.shape))}]}}],'
                    f'"timing":{{"queue_us":{t["queue_us"]},"compute_us":{t["compute_us"]},'
                    f'"batch":{t["batch"]},"total_us":{t["total_us"]}}}}}')
            return [head.encode(), a.data]
    metas = []
    bufs: list[Any] = []
    for name, arr in outputs:
        a = np.ascontiguousarray(arr)
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        metas.append({"name": name, "dtype": a.dtype.name, "shape": list(a.shape)})
        bufs.append(a.data if a.nbytes else b"")
    header = {
        "v": VERSION, "id": request_id, "status": "OK", "model": model,
        "variant": variant, "outputs": metas, "timing": timing,
    }
    return [encode_header(header), *bufs]


def decode_reply(frames: list[Any]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Client side: header dict + outputs by name (read-only views of the frames).

    Checked like a request, because a client may be pointed at the wrong socket: a
    malformed reply raises ``ValueError`` naming the frame or field, never a bare
    ``KeyError`` or a silently short array."""
    if not frames:
        raise ValueError("empty reply: expected a JSON header frame")
    try:
        header = json.loads(bytes(_buffer(frames[0])))
    except ValueError as e:
        raise ValueError(f"reply frame 0 is not a JSON header: {e}") from None
    if not isinstance(header, dict) or "status" not in header:
        raise ValueError("reply frame 0 is not an edged reply header (no 'status')")
    outs: dict[str, np.ndarray] = {}
    if header.get("status") != "OK":
        return header, outs
    metas = header.get("outputs") or []
    if not isinstance(metas, list) or len(frames) < 1 + len(metas):
        raise ValueError(f"reply lists {len(metas) if isinstance(metas, list) else '?'} "
                         f"output(s) but carries {len(frames) - 1} frame(s)")
    for i, (meta, frame) in enumerate(zip(metas, frames[1:], strict=False)):
        outs[str(meta.get("name", i))] = _reply_tensor(f"outputs[{i}]", meta, frame)
    return header, outs


def _reply_tensor(where: str, meta: Any, frame: Any) -> np.ndarray:
    if not isinstance(meta, dict):
        raise ValueError(f"reply {where} must be an object with name, dtype, shape")
    dtype = DTYPES.get(meta.get("dtype"))
    shape = meta.get("shape")
    if dtype is None:
        raise ValueError(f"reply {where}.dtype {meta.get('dtype')!r} is not a protocol dtype")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise ValueError(f"reply {where}.shape must be a list of non-negative ints: {shape!r}")
    buf = _buffer(frame)
    want = math.prod(shape) * dtype.itemsize
    if buf.nbytes != want:
        raise ValueError(f"reply {where}: frame has {buf.nbytes} bytes but shape {shape} of "
                         f"{dtype.name} needs {want}")
    return np.frombuffer(buf, dtype=dtype).reshape(shape)


# -- detections (DESIGN "Detection models") ----------------------------------------------

DETECTION_COLUMNS = ("x1", "y1", "x2", "y2", "score", "class")


@dataclass(frozen=True)
class Detections:
    """A detection model's answer: rows ``[x1, y1, x2, y2, score, class]``, best first, box
    corners in pixels of the frame the client sent (so a camera app draws them as is)."""

    rows: np.ndarray  # float32 [K, 6]
    columns: tuple[str, ...] = DETECTION_COLUMNS
    labels: dict[int, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    @property
    def boxes(self) -> np.ndarray:
        return self.rows[:, :4]

    @property
    def scores(self) -> np.ndarray:
        return self.rows[:, 4]

    @property
    def classes(self) -> np.ndarray:
        return self.rows[:, 5].astype(np.int64)

    def label(self, k: int) -> str:
        """The label of row ``k`` (its class number when the model names no labels)."""
        c = int(self.rows[k, 5])
        return self.labels.get(c, str(c))


def decode_detections(header: dict[str, Any], frames: list[Any]) -> Detections | None:
    """The ``detections`` of an OK reply, or None when the reply has none.

    Its float32 ``[K, 6]`` frame follows the output frames (there are none unless the
    request asked for ``raw`` outputs too)."""
    meta = header.get("detections")
    if meta is None or header.get("status") != "OK":
        return None
    if not isinstance(meta, dict):
        raise ValueError("reply detections must be an object with count, columns, labels")
    count = meta.get("count")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"reply detections.count must be a non-negative int: {count!r}")
    columns = meta.get("columns", list(DETECTION_COLUMNS))
    if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
        raise ValueError("reply detections.columns must be a list of column names")
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        raise ValueError("reply detections.labels must map class numbers to names")
    index = 1 + len(header.get("outputs") or [])
    if len(frames) <= index:
        raise ValueError(f"reply has detections but no frame {index} to hold them")
    rows = _reply_tensor("detections", {"dtype": "float32", "shape": [count, len(columns)]},
                         frames[index])
    try:
        names = {int(k): str(v) for k, v in labels.items()}
    except ValueError:
        raise ValueError("reply detections.labels keys must be class numbers") from None
    return Detections(rows, tuple(columns), names)


# -- control protocol -------------------------------------------------------------------

@dataclass(frozen=True)
class ControlOp:
    """One operator action on the control endpoint: its name and the string fields it needs.

    A control message is one JSON frame ``{"op": name, "id": optional, **fields}``; the
    reply is one JSON frame ``{"status", "id", ...}`` (plus ``error`` unless OK)."""

    name: str
    fields: tuple[str, ...]
    summary: str


CONTROL_OPS: dict[str, ControlOp] = {op.name: op for op in (
    ControlOp("status", (), "daemon, models and governor at a glance"),
    ControlOp("models", (), "every model's description, as the inference 'models' op"),
    ControlOp("reload", (), "re-read the config file and apply what changed"),
    ControlOp("load", ("model",), "load a model that is in the config"),
    ControlOp("unload", ("model",), "drain and unload a model"),
    ControlOp("level", ("level",), "pin a governor level by name, or 'auto'"),
    ControlOp("swap", ("model", "variant"), "switch a model to one of its variants"),
)}


def control_message(op: str, request_id: str | int | None = None,
                    **args: Any) -> dict[str, Any]:
    """A control message, checked against ``CONTROL_OPS`` for the ops this side knows.

    An op this side does not know is sent as given: the daemon answers ``NOT_FOUND`` with
    the ops it knows, and a newer daemon's op stays reachable from an older client."""
    if not isinstance(op, str) or not op:
        raise InvalidArgument("control op must be a non-empty string")
    spec = CONTROL_OPS.get(op)
    if spec is not None:
        for name in spec.fields:
            v = args.get(name)
            if not isinstance(v, str) or not v:
                raise InvalidArgument(f"control op {op!r} needs {name!r}: a non-empty string")
    msg: dict[str, Any] = {"op": op, **args}
    if request_id is not None:
        msg["id"] = request_id
    return msg
