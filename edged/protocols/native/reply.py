"""The daemon's replies: one JSON header frame, then one buffer per output.

Outputs go out as C-contiguous little-endian buffers of the arrays the model computed
(no copy when they already are); a detection model's ``[K, 6]`` frame follows them
(``detections``). See docs/protocol.md "Reply".
"""

from __future__ import annotations

import functools
import json
from typing import Any

import numpy as np

from edged.protocols.native import VERSION
from edged.protocols.native.detections import detections_frame


def encode_header(obj: dict[str, Any]) -> bytes:
    """A header frame: compact JSON (no spaces), as every reply and control answer is sent."""
    return json.dumps(obj, separators=(",", ":")).encode()


def error_reply(request_id: str | int | None, status: str, message: str) -> dict[str, Any]:
    """The header of a reply that is not OK: the status and what went wrong, no frames."""
    return {"v": VERSION, "id": request_id, "status": status, "error": message}


def _json_id(request_id: str | int | None) -> str:
    """A request id as JSON (an int as it is: the common case needs no encoder)."""
    return str(request_id) if type(request_id) is int else json.dumps(request_id)


@functools.lru_cache(maxsize=256)
def _head_part(model: str, variant: str, output: str, dtype: str) -> str:
    """The part of a one-output OK header that depends on the model only, built once."""
    return (f'"model":{json.dumps(model)},"variant":{json.dumps(variant)},'
            f'"outputs":[{{"name":{json.dumps(output)},"dtype":"{dtype}",')


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
        head["detections"], frame = detections_frame(detections, detections_header)
        return [encode_header(head), *frames[1:], frame]
    if len(outputs) == 1:
        name, a = outputs[0]
        if a.flags.c_contiguous and a.dtype.byteorder != ">" and a.nbytes:
            # The common case, from prebuilt parts (no json.dumps on nested dicts).
            t = timing
            head = (f'{{"v":{VERSION},"id":{_json_id(request_id)},"status":"OK",'
                    f'{_head_part(model, variant, name, a.dtype.name)}'
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
