"""Frigate's ``zmq`` detector protocol, without sockets: read a request, write a result.

Why apart from the room (room.py): the byte layout (docs/frigate.md) is a contract
with another project, so it is pure code that tests can check frame by frame.

Request: two frames, a JSON header ``{"shape", "dtype", "model_type"}`` and the raw
C-order tensor Frigate prepared for its model (``[1,H,W,3]`` nhwc or ``[1,3,H,W]``
nchw, uint8 or float). Reply: one frame of exactly 480 bytes, float32 ``[20, 6]``, rows
``[class_id, score, y_min, x_min, y_max, x_max]`` normalised to the tensor's size, best
first, zero rows after the last. Frigate treats any other reply as "no detections".
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from edged.errors import InvalidArgument

MAX_ROWS = 20
RESULT_BYTES = MAX_ROWS * 6 * 4
#: what a request that cannot be served gets: Frigate reads it as "nothing found"
ZEROS = bytes(RESULT_BYTES)
#: dtypes Frigate's model ``input_dtype`` can produce
DTYPES = {"uint8": np.uint8, "int8": np.int8, "float32": np.float32, "float16": np.float16,
          "float64": np.float64}
MAX_HEADER_BYTES = 4096


@dataclass(frozen=True)
class FrigateRequest:
    """One decoded request: the image as a uint8 HxWx3 frame plus what it was."""

    frame: np.ndarray
    layout: str  # "nhwc" or "nchw", as it came
    dtype: str
    model_type: str
    #: the tensor as Frigate sent it (its shape and dtype; a view of the frame bytes)
    tensor: np.ndarray


def parse_request(body: list[Any], max_pixels: int) -> FrigateRequest:
    """``[header, tensor]`` -> a uint8 HxWx3 frame; InvalidArgument names what is wrong."""
    if len(body) != 2:
        raise InvalidArgument(f"a Frigate request has 2 frames (header, tensor); got {len(body)}")
    raw = memoryview(body[0]).tobytes() if len(body[0]) <= MAX_HEADER_BYTES else None
    if raw is None:
        raise InvalidArgument(f"header frame is over {MAX_HEADER_BYTES} bytes")
    try:
        h = json.loads(raw)
    except ValueError as e:
        raise InvalidArgument(f"header is not JSON: {e}") from None
    if not isinstance(h, dict):
        raise InvalidArgument("header must be a JSON object with shape, dtype, model_type")
    shape, dtype_name = h.get("shape"), h.get("dtype")
    model_type = h.get("model_type", "")
    if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape):
        raise InvalidArgument(f"header 'shape' must be a list of positive ints; got {shape!r}")
    dtype = DTYPES.get(dtype_name) if isinstance(dtype_name, str) else None
    if dtype is None:
        raise InvalidArgument(f"header 'dtype' {dtype_name!r} is not one of {', '.join(DTYPES)}")
    if not isinstance(model_type, str):
        raise InvalidArgument(f"header 'model_type' must be a string; got {model_type!r}")
    dims = shape[1:] if len(shape) == 4 else shape
    if len(shape) == 4 and shape[0] != 1:
        raise InvalidArgument(f"header 'shape' {shape}: Frigate sends one image (batch 1)")
    if len(dims) != 3:
        raise InvalidArgument(f"header 'shape' {shape} is not an image tensor [1,H,W,3] or "
                              "[1,3,H,W]")
    if dims[2] == 3:
        layout, (height, width) = "nhwc", dims[:2]
    elif dims[0] == 3:
        layout, (height, width) = "nchw", dims[1:]
    else:
        raise InvalidArgument(f"header 'shape' {shape} has no 3-channel axis (nhwc or nchw)")
    if height * width > max_pixels:
        raise InvalidArgument(f"a {width}x{height} tensor exceeds {max_pixels} pixels")
    want = math.prod(shape) * np.dtype(dtype).itemsize
    data = memoryview(body[1])
    if data.nbytes != want:
        raise InvalidArgument(f"tensor frame has {data.nbytes} bytes; shape {shape} of "
                              f"{dtype_name} needs {want}")
    tensor = np.frombuffer(data, dtype=dtype).reshape(shape)
    arr = tensor.reshape(dims)
    if layout == "nchw":
        arr = arr.transpose(1, 2, 0)
    return FrigateRequest(_to_uint8(arr), layout, dtype_name, model_type,
                          tensor if len(shape) == 4 else tensor[None])


def _to_uint8(arr: np.ndarray) -> np.ndarray:
    """Frigate's float inputs are 0..1 (``float``: divided by 255) or 0..255
    (``float_denorm``); a tensor whose maximum is at most 1 is taken as the former."""
    if arr.dtype == np.uint8:
        return np.ascontiguousarray(arr)
    if arr.dtype == np.int8:  # some quantised models take pixels - 128
        return np.ascontiguousarray((arr.astype(np.int16) + 128).astype(np.uint8))
    f = arr.astype(np.float32)
    if not np.isfinite(f).all():
        raise InvalidArgument("tensor holds NaN or infinite values")
    if f.size and float(f.max()) <= 1.0:
        f = f * 255.0
    return np.ascontiguousarray(np.clip(np.rint(f), 0, 255).astype(np.uint8))


def encode_result(detections: np.ndarray, width: int, height: int, min_score: float,
                  class_map: dict[int, int], max_id: int | None = None) -> bytes:
    """Detections ``[K, >=6]`` (x1, y1, x2, y2 in tensor pixels, score, class; best first)
    -> Frigate's 480-byte float32 ``[20, 6]``. With ``max_id`` (a sent model: Frigate's
    labelmap ends at 90), a row whose id, after ``class_map``, is above it is left out:
    Frigate's camera process fails on an id its labelmap lacks."""
    out = np.zeros((MAX_ROWS, 6), np.float32)
    d = detections[detections[:, 4] >= min_score] if detections.size else detections
    if max_id is not None and d.size:
        ids = np.array([class_map.get(int(c), int(c)) for c in d[:, 5]])
        d = d[(ids >= 0) & (ids <= max_id)]
    d = d[:MAX_ROWS]
    k = d.shape[0]
    if k:
        classes = d[:, 5].astype(np.int64)
        out[:k, 0] = [class_map.get(int(c), int(c)) for c in classes]
        out[:k, 1] = d[:, 4]
        out[:k, 2] = d[:, 1] / height
        out[:k, 3] = d[:, 0] / width
        out[:k, 4] = d[:, 3] / height
        out[:k, 5] = d[:, 2] / width
        np.clip(out[:k, 2:], 0.0, 1.0, out=out[:k, 2:])
    return out.astype("<f4").tobytes()


def labelmap(labels: tuple[str, ...], class_map: dict[int, int],
             fallback: tuple[str, ...] = ()) -> str:
    """A Frigate ``labelmap_path`` file (``ID label`` lines) for a model's labels; a
    pipeline's adds its detector's labels (``fallback``) on the ids the stage's leave free,
    since a row its ``label_from`` stage did not label carries the detector's class."""
    rows = {class_map.get(i, i): name for i, name in enumerate(fallback)}
    rows.update({class_map.get(i, i): name for i, name in enumerate(labels)})
    return "".join(f"{i} {rows[i]}\n" for i in sorted(rows))


# -- management messages (the start-up handshake and model transfer) ---------------------
#: header keys that make a message a management message, not an inference request
MANAGE_KEYS = ("model_request", "model_data")


def management_header(body: list[Any]) -> dict[str, Any] | None:
    """The header of a management message, told apart from an inference request by its
    keys (``model_request``/``model_data``); None for anything else."""
    if not body or len(body[0]) > MAX_HEADER_BYTES:
        return None
    raw = memoryview(body[0]).tobytes()
    if b'"model_request"' not in raw and b'"model_data"' not in raw:
        return None  # an inference header is parsed once, by parse_request
    try:
        h = json.loads(raw)
    except ValueError:
        return None
    return h if isinstance(h, dict) and any(k in h for k in MANAGE_KEYS) else None


def request_answer(name: str | None, available: bool, loaded: bool,
                   message: str) -> dict[str, Any]:
    """The answer to ``model_request`` (Frigate reads the two flags, absent = false)."""
    return {"model_available": available, "model_loaded": loaded, "model_name": name,
            "message": message}


def data_answer(name: str | None, saved: bool, loaded: bool, message: str) -> dict[str, Any]:
    """The answer to ``model_data``."""
    return {"model_saved": saved, "model_loaded": loaded, "model_name": name,
            "message": message}


def refusal(header: dict[str, Any], message: str) -> dict[str, Any]:
    """A malformed management message's answer, in the shape of the one it asked for."""
    name = header.get("model_name")
    name = name if isinstance(name, str) else None
    if "model_data" in header and "model_request" not in header:
        return data_answer(name, False, False, message)
    return request_answer(name, False, False, message)
