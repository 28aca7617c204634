"""``[models.postprocess]`` for detectors: which decoder reads the outputs, and its defaults.

Why one frozen object: the serving path, the compiler's mAP check and the benchmark
must decode a model identically, so every choice (layout, thresholds, labels, box
conventions) is read and validated once here, with errors naming the key path.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edged.config.layouts import ALIASES, AUTO, LAYOUTS, layout
from edged.config.schema import Table, positive

DECODERS = tuple(LAYOUTS)
RESIZES = ("letterbox", "stretch")
BOX_FORMATS = ("pixels", "normalized")
BOX_ORDERS = ("xyxy", "yxyx")
MAX_LABELS = 100_000  # classes a labels file (or a model's metadata) may name
MAX_DET_CAP = 1000  # per-request max_det may not exceed this (reply size stays bounded)



def _unit(v: float) -> str | None:
    return None if 0.0 <= v <= 1.0 else "must be between 0 and 1"


def _max_det(v: int) -> str | None:
    return None if 0 < v <= MAX_DET_CAP else f"must be between 1 and {MAX_DET_CAP}"


@dataclass(frozen=True)
class PostprocessConfig:
    """The detection settings of one model (defaults for every request)."""

    decoder: str
    resize: str = "letterbox"
    pad_value: int = 114  # letterbox border grey, as Ultralytics trains with
    conf: float = 0.25
    iou: float = 0.45
    max_det: int = 100
    agnostic: bool = False
    classes: tuple[int, ...] | None = None  # keep only these class ids (None = all)
    labels: tuple[str, ...] | None = None  # None: from the model's metadata, if any
    box_format: str = "pixels"  # pixels of the model input, or normalized to 0..1
    box_order: str = "xyxy"  # end2end / ssd boxes: x1,y1,x2,y2 or ymin,xmin,ymax,xmax
    label_offset: int = 0  # subtracted from class ids (TF OD API SSDs count from 1)
    nms: bool = True  # False for layouts whose graph already ran NMS
    max_candidates: int = 3000  # top-k by score before NMS keeps flat scores fast
    outputs: tuple[str, ...] | None = None  # ssd: model output names, num/boxes/scores/classes
    track: bool = False  # track ids per stream for every request with a stream (ByteTrack)

    @classmethod
    def from_table(cls, t: Table) -> PostprocessConfig | None:
        """Read ``t`` (problems go to ``t.problems``); None if the table is unusable."""
        kind = t.get("kind", str, choices=("detect",))
        decoder = t.get("decoder", str, choices=DECODERS + AUTO + tuple(ALIASES))
        decoder = ALIASES.get(decoder, decoder)
        labels = labels_from_table(t)
        classes = t.get_list("classes", int, None)
        if classes is not None and any(c < 0 for c in classes):
            t.problem("classes", f"class ids must be >= 0; got {classes}")
        outputs = t.get_list("outputs", str, None)
        if outputs is not None and len(outputs) != 4:
            t.problem("outputs", "names the 4 outputs num, boxes, scores, classes in that "
                      f"order; got {len(outputs)} names")
        if outputs is not None and decoder not in (None, "ssd"):
            t.problem("outputs", f"only the 'ssd' decoder reads several outputs; got decoder "
                      f"{decoder!r}")
        base = layout(decoder or "yolov8")
        box_order = t.get("box_order", str, base.box_order or "xyxy", choices=BOX_ORDERS)
        for key, why in (("box_order", "always gives cx,cy,w,h"),
                         ("label_offset", "has class ids from 0 (the column of the score)")):
            if t.has(key) and base.box_order is None:
                with_it = ", ".join(n for n, lay in LAYOUTS.items() if lay.box_order)
                t.problem(key, f"applies to the {with_it} decoders only; decoder "
                          f"{decoder or base.name!r} {why}")
        cfg_values = dict(
            decoder=decoder,
            resize=t.get("resize", str, "letterbox", choices=RESIZES),
            pad_value=t.get("pad_value", int, 114,
                            check=lambda v: None if 0 <= v <= 255 else "must be 0..255"),
            conf=t.get("conf", float, 0.25, check=_unit),
            iou=t.get("iou", float, 0.45, check=_unit),
            max_det=t.get("max_det", int, 100, check=_max_det),
            agnostic=t.get("agnostic", bool, False),
            classes=tuple(classes) if classes is not None else None,
            labels=labels,
            box_format=t.get("box_format", str, base.box_format, choices=BOX_FORMATS),
            box_order=box_order,
            label_offset=t.get("label_offset", int, 0),
            nms=t.get("nms", bool, not base.nms_in_graph),
            max_candidates=t.get("max_candidates", int, 3000, check=positive),
            outputs=tuple(outputs) if outputs is not None else None,
            track=t.get("track", bool, False),
        )
        t.done()
        if kind is None or decoder is None:
            return None
        return cls(**cfg_values)


def labels_from_table(t: Table) -> tuple[str, ...] | None:
    """``labels = [...]`` inline or ``labels_file = "coco.txt"`` (relative to the config)."""
    inline = t.get_list("labels", str, None)
    path: Path | None = t.get_path("labels_file", None)
    if inline is not None and path is not None:
        t.problem("labels_file", "give either labels or labels_file, not both")
        return None
    if inline is not None:
        if not inline:
            t.problem("labels", "must not be empty (omit it to use the model's metadata)")
            return None
        return tuple(inline)
    if path is None:
        return None
    try:
        return read_labels_file(path)
    except (OSError, ValueError) as e:
        t.problem("labels_file", str(e))
        return None


def read_labels_file(path: Path) -> tuple[str, ...]:
    """One label per line; blank lines at the end are ignored, blank ones inside are not."""
    text = Path(path).read_text(encoding="utf-8")
    lines = [line.strip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    if not lines:
        raise ValueError(f"labels file {path} is empty")
    if len(lines) > MAX_LABELS:
        raise ValueError(f"labels file {path} has {len(lines)} lines; at most {MAX_LABELS}")
    blank = [i + 1 for i, line in enumerate(lines) if not line]
    if blank:
        raise ValueError(f"labels file {path} has blank line(s) {blank[:5]} between labels")
    return tuple(lines)
