"""Check a model's outputs against its decoder when a variant loads.

Why at load: a model whose outputs do not fit the configured decoder would otherwise
give garbage boxes (a transposed YOLO export decodes "fine"). The message says what
the decoder expects, what the model has, and which decoder the shape suggests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from edged.config.layouts import LAYOUTS
from edged.detect.decoders import detection_output
from edged.detect.decoders.yolox import yolox_grid
from edged.errors import ArtifactError


class OutputMismatch(ArtifactError):
    """The model's outputs do not have the layout the configured decoder reads."""


class OutputSpec(Protocol):
    """What the check needs to know about a model output (``backends.base.TensorSpec``)."""

    name: str
    dtype: Any
    shape: tuple[int, ...]


def _fmt(spec: OutputSpec) -> str:
    dims = ", ".join("?" if d is None or d < 0 else str(d) for d in spec.shape)
    return f"{spec.name} {np.dtype(spec.dtype).name} [{dims}]"


def _dim(spec: OutputSpec, i: int) -> int | None:
    d = spec.shape[i]
    return None if d is None or d < 0 else int(d)


def _problem(decoder: str, expected: str, specs: Sequence[OutputSpec], why: str) -> OutputMismatch:
    have = "; ".join(_fmt(s) for s in specs) or "none"
    return OutputMismatch(f"the model's outputs do not fit decoder {decoder!r}: {why}. "
                          f"Expected {expected}; the model has: {have}")


_SSD_KEYS = ("num", "box", "score", "class")


def resolve_decoder(decoder: str, specs: Sequence[OutputSpec]) -> str:
    """``yolo`` -> ``yolov8`` for ``[B, 4+C, N]`` or ``yolov5`` for ``[B, N, 5+C]``;
    ``ssd`` -> ``detection-output`` for OpenVINO's one output ``[B, 1, N, 7]``."""
    if decoder == "ssd" and detection_output.is_layout(specs):
        return detection_output.NAME
    if decoder != "yolo":
        return decoder
    s = specs[0] if specs else None
    a, b = (_dim(s, 1), _dim(s, 2)) if s is not None and len(s.shape) == 3 else (None, None)
    if a is None or b is None or a == b:
        have = "; ".join(_fmt(x) for x in specs) or "none"
        raise OutputMismatch(f"decoder 'yolo' cannot tell YOLOv8 [B, 4+C, N] from YOLOv5 "
                             f"[B, N, 5+C] by the output shape; set decoder = 'yolov8' or "
                             f"'yolov5'. The model has: {have}")
    return "yolov8" if a < b else "yolov5"


def check_outputs(decoder: str, specs: Sequence[OutputSpec], *, input_size: tuple[int, int],
                  num_labels: int | None = None,
                  names: Sequence[str] | None = None) -> tuple[str, ...]:
    """The model outputs the decoder reads, in its order; OutputMismatch if they do not fit.

    Single-output decoders read the first output (extra outputs, like segmentation
    prototypes, are ignored). ``num_labels`` (when labels are known) must equal C.
    ``names`` picks the ssd outputs when their names do not say which is which.
    """
    if decoder == "ssd" and names is None:
        decoder = resolve_decoder(decoder, specs)
    expected = LAYOUTS[decoder].outputs
    if decoder == "ssd":
        return _check_ssd(specs, expected, names)
    if decoder == detection_output.NAME:
        return _check_detection_output(specs, expected)
    if decoder == "yolo-anchors":
        return _check_anchors(specs, expected, input_size, num_labels)
    if decoder in ("dfine", "rfdetr"):
        return _check_detr(decoder, specs, expected)
    if not specs:
        raise _problem(decoder, expected, specs, "the model has no outputs")
    s = specs[0]
    if len(s.shape) != 3 or np.dtype(s.dtype).kind != "f":
        raise _problem(decoder, expected, specs, f"output {s.name!r} is not a rank-3 float tensor")
    a, b = _dim(s, 1), _dim(s, 2)
    if decoder == "yolov8":
        c = None if a is None else a - 4
        if a is not None and b is not None and a > b:
            raise _problem(decoder, expected, specs, f"dim 1 ({a}) is larger than dim 2 ({b}): "
                           "this looks like rows per candidate, [B, N, 5+C] (decoder 'yolov5' "
                           "or 'yolox')")
    elif decoder in ("end2end", "yolonas"):
        c = None
        width = 6 if decoder == "end2end" else 7
        if b is not None and b != width:
            raise _problem(decoder, expected, specs, f"the last dim is {b}, not {width}")
    else:
        c = None if b is None else b - 5
        if a is not None and b is not None and b > a:
            raise _problem(decoder, expected, specs, f"dim 2 ({b}) is larger than dim 1 ({a}): "
                           "this looks like columns per candidate, [B, 4+C, N] (decoder 'yolov8')")
        if decoder == "yolox" and a is not None:
            cells = yolox_grid(*input_size)[0].shape[0]
            if a != cells:
                raise _problem(decoder, expected, specs, f"a {input_size[0]}x{input_size[1]} "
                               f"input has {cells} cells but the output has {a} rows")
    if c is not None and c < 1:
        raise _problem(decoder, expected, specs, "there is no room for a class score")
    if c is not None and num_labels is not None and c != num_labels:
        raise _problem(decoder, expected, specs, f"the output has {c} class scores but "
                       f"{num_labels} labels are configured")
    return (s.name,)


def _check_ssd(specs: Sequence[OutputSpec], expected: str,
               names: Sequence[str] | None) -> tuple[str, ...]:
    by_name = {s.name: s for s in specs}
    if names is not None:
        missing = [n for n in names if n not in by_name]
        if missing:
            raise _problem("ssd", expected, specs, f"postprocess.outputs names {missing}, "
                           "which the model does not have")
        chosen = [by_name[n] for n in names]
    elif len(specs) < 4:
        raise _problem("ssd", expected, specs, f"the model has {len(specs)} outputs, not 4")
    else:
        chosen = []
        for key in _SSD_KEYS:
            hits = [s for s in specs if key in s.name.lower()]
            if len(hits) != 1:
                raise _problem("ssd", expected, specs, f"{len(hits)} output names contain "
                               f"{key!r}, so set postprocess.outputs = [num, boxes, scores, "
                               "classes] to name them")
            chosen.append(hits[0])
    num, boxes, scores, classes = chosen
    if len(num.shape) not in (1, 2) or (len(num.shape) == 2 and _dim(num, 1) not in (None, 1)):
        raise _problem("ssd", expected, specs, f"{num.name!r} (num) must be [B] or [B, 1]")
    if len(boxes.shape) != 3 or _dim(boxes, 2) not in (None, 4):
        raise _problem("ssd", expected, specs, f"{boxes.name!r} (boxes) must be [B, N, 4]")
    for role, s in (("scores", scores), ("classes", classes)):
        if len(s.shape) != 2:
            raise _problem("ssd", expected, specs, f"{s.name!r} ({role}) must be [B, N]")
    n = {_dim(s, 1) for s in (boxes, scores, classes)} - {None}
    if len(n) > 1:
        raise _problem("ssd", expected, specs, f"boxes, scores and classes disagree on N: "
                       f"{sorted(n)}")
    if np.dtype(boxes.dtype).kind != "f" or np.dtype(scores.dtype).kind != "f":
        raise _problem("ssd", expected, specs, "boxes and scores must be float")
    return tuple(s.name for s in chosen)


def _check_detection_output(specs: Sequence[OutputSpec], expected: str) -> tuple[str, ...]:
    name = detection_output.NAME
    if len(specs) != 1:
        raise _problem(name, expected, specs, f"the model has {len(specs)} outputs, not 1")
    s = specs[0]
    if len(s.shape) != 4 or np.dtype(s.dtype).kind != "f":
        raise _problem(name, expected, specs, f"output {s.name!r} is not a rank-4 float tensor")
    if _dim(s, 3) not in (None, detection_output.WIDTH) or _dim(s, 1) not in (None, 1):
        raise _problem(name, expected, specs, f"output {s.name!r} is not [B, 1, N, 7]")
    return (s.name,)


def _check_anchors(specs: Sequence[OutputSpec], expected: str, input_size: tuple[int, int],
                   num_labels: int | None) -> tuple[str, ...]:
    heads = [s for s in specs if len(s.shape) == 4]
    if len(heads) != 3:
        raise _problem("yolo-anchors", expected, specs, f"the model has {len(heads)} rank-4 "
                       "outputs, not 3")
    heads.sort(key=lambda s: -(_dim(s, 2) or 0))  # finest grid (stride 8) first
    w, h = input_size
    for s, stride in zip(heads, (8, 16, 32), strict=True):
        ch, ny, nx = _dim(s, 1), _dim(s, 2), _dim(s, 3)
        if np.dtype(s.dtype).kind != "f":
            raise _problem("yolo-anchors", expected, specs, f"output {s.name!r} is not float")
        if ch is not None and (ch % 3 or ch // 3 < 6):
            raise _problem("yolo-anchors", expected, specs, f"output {s.name!r} has {ch} "
                           "channels, not 3 anchors x (5 + classes)")
        if ch is not None and num_labels is not None and ch // 3 - 5 != num_labels:
            raise _problem("yolo-anchors", expected, specs, f"output {s.name!r} has "
                           f"{ch // 3 - 5} class scores but {num_labels} labels are configured")
        if (ny, nx) != (None, None) and (ny, nx) != (h // stride, w // stride):
            raise _problem("yolo-anchors", expected, specs, f"output {s.name!r} is a {nx}x{ny} "
                           f"grid; a {w}x{h} input at stride {stride} gives "
                           f"{w // stride}x{h // stride}")
    return tuple(s.name for s in heads)


def _check_detr(decoder: str, specs: Sequence[OutputSpec], expected: str) -> tuple[str, ...]:
    by_name = {s.name: s for s in specs}
    want = ("labels", "boxes", "scores") if decoder == "dfine" else ("dets", "labels")
    missing = [n for n in want if n not in by_name]
    if missing:
        raise _problem(decoder, expected, specs, f"no output named {', '.join(missing)}")
    ranks = {"labels": 2 if decoder == "dfine" else 3, "boxes": 3, "scores": 2, "dets": 3}
    for n in want:
        s = by_name[n]
        if len(s.shape) != ranks[n]:
            raise _problem(decoder, expected, specs, f"output {n!r} has rank {len(s.shape)}, "
                           f"not {ranks[n]}")
    box = by_name["boxes" if decoder == "dfine" else "dets"]
    if _dim(box, 2) not in (None, 4):
        raise _problem(decoder, expected, specs, f"output {box.name!r} must end in 4 values")
    if decoder == "rfdetr" and (_dim(by_name["labels"], 2) or 2) < 2:
        raise _problem(decoder, expected, specs, "labels needs a column per class after "
                       "column 0")
    return want
