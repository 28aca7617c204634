"""Detector output layouts, and the model types Frigate names: one record each.

Why one place: a layout's facts are read by the config (``[models.postprocess]``
``decoder`` and its defaults), the decoders (``edged.detect.decoders``, one per layout),
the check of a model's outputs at load (``edged.detect.outputs``), the checks of a model
Frigate sends (``edged.protocols.frigate.model_check``) and ``edged compile``'s mAP check.
Written once here, a new layout cannot run NMS twice because one list forgot it. The
config reads these before the daemon imports numpy's and OpenCV's users (the decoders).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    """One output layout: what its outputs look like and the conventions its boxes keep."""

    name: str
    #: the outputs, as the load check says what it expected
    outputs: str
    #: the graph (or its set prediction) leaves one box per object: no NMS here
    nms_in_graph: bool = False
    #: boxes in model-input pixels ("pixels") or normalised to 0..1 ("normalized")
    box_format: str = "pixels"
    #: corner boxes' order ("xyxy" or "yxyx"); None: the layout gives centre boxes, and
    #: ``box_order`` and ``label_offset`` do not apply to it
    box_order: str | None = None


LAYOUTS: dict[str, Layout] = {lay.name: lay for lay in (
    Layout("yolov8", "one float output [B, 4+C, N] (cx, cy, w, h, C class scores per column)"),
    Layout("yolov5", "one float output [B, N, 5+C] (cx, cy, w, h, objectness, C class scores "
                     "per row)"),
    Layout("end2end", "one float output [B, N, 6] (x1, y1, x2, y2, score, class per row)",
           nms_in_graph=True, box_order="xyxy"),
    Layout("ssd", "4 outputs num [B], boxes [B, N, 4], scores [B, N], classes [B, N] (TF "
                  "Object Detection API), or one output [1, 1, N, 7] (OpenVINO's "
                  "DetectionOutput)",
           nms_in_graph=True, box_format="normalized", box_order="yxyx"),
    Layout("yolox", "one float output [B, N, 5+C] (raw head: x, y, log w, log h, objectness, "
                    "C scores; N = the cells at strides 8, 16, 32)"),
    Layout("yolonas", "one float output [B, N, 7] (batch, x1, y1, x2, y2, score, class per "
                      "row)",
           nms_in_graph=True, box_order="xyxy"),
    Layout("yolo-anchors", "3 float outputs [B, 3*(5+C), H/8, W/8], [B, 3*(5+C), H/16, "
                           "W/16], [B, 3*(5+C), H/32, W/32]"),
    Layout("dfine", "3 outputs labels [B, N], boxes [B, N, 4] (x1, y1, x2, y2), scores [B, N]",
           nms_in_graph=True),
    Layout("rfdetr", "2 outputs dets [B, N, 4] (cx, cy, w, h normalised) and labels "
                     "[B, N, 1+C] (logits)",
           nms_in_graph=True),
    Layout("detection-output", "one float output [1, 1, N, 7] (image_id, label, conf, x_min, "
                               "y_min, x_max, y_max normalised; image_id -1 ends the rows)",
           nms_in_graph=True, box_format="normalized", box_order="xyxy"),
)}
#: names that pick a layout from the model's outputs at load: "yolo" (yolov8 or yolov5 by
#: the output's shape); "ssd" also reads OpenVINO's one output [B, 1, N, 7] as
#: "detection-output" (``edged.detect.outputs.resolve_decoder``)
AUTO = ("yolo",)
#: names users type for the same layouts ("yolo-end2end" among them)
ALIASES = {"yolo11": "yolov8", "yolov11": "yolov8", "yolov7": "yolov5",
           "yolo-end2end": "end2end"}


def layout(name: str) -> Layout:
    """The record of ``name`` (an auto name reads as the layout it most often is)."""
    return LAYOUTS.get(name) or LAYOUTS["yolov8"]


@dataclass(frozen=True)
class FrigateType:
    """A ``model_type`` Frigate's zmq plugin sends: the layout edged decodes it with, and
    what Frigate's documentation says of the model's input."""

    name: str
    layout: str
    #: the input size where the graph leaves it dynamic
    default_size: int = 320
    #: a float input's scale: 0..1 (1/255) for all but YOLOX, which takes 0..255
    float_scale: float = 1.0 / 255.0
    #: subtracted from the model's class ids: TF OD API SSDs number COCO from 1, Frigate's
    #: 91-class labelmap from 0
    label_offset: int = 0


#: every Frigate ``model_type``, written once: in the order a sent graph is matched when
#: nobody says its type (most specific first; ``protocols/frigate/model_check.DETECT_ORDER``
#: is this order), so a new type is one entry here and its layout in ``LAYOUTS``
FRIGATE_TYPES: dict[str, FrigateType] = {f.name: f for f in (
    FrigateType("ssd", "ssd", default_size=300, label_offset=1),
    FrigateType("dfine", "dfine", default_size=640),
    FrigateType("rfdetr", "rfdetr"),
    FrigateType("yolonas", "yolonas"),
    FrigateType("yolox", "yolox", default_size=416, float_scale=1.0),
    FrigateType("yologeneric", "yolov8"),
)}
#: the config spelling (``yolo-generic``) and the enum's name both occur
FRIGATE_ALIASES = {"yolo-generic": "yologeneric", "yolo_generic": "yologeneric"}


def normalize_type(model_type: object) -> str | None:
    """Frigate's type name (``yologeneric`` for both spellings), or None if unknown."""
    if not isinstance(model_type, str):
        return None
    t = FRIGATE_ALIASES.get(model_type.lower(), model_type.lower())
    return t if t in FRIGATE_TYPES else None
