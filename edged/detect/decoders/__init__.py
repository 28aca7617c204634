"""One decoder per output layout: raw outputs of one image -> candidate boxes.

Why per layout: detectors disagree on everything (transposed or not, objectness or
not, centre or corner boxes, pixels or 0..1, NMS inside the graph or not). Each
decoder turns its layout into the same ``Candidates`` (xyxy in model-input pixels),
vectorised over candidates, from the same ``DecodeParams`` (``support``).
``edged.config.layouts`` holds what is known of each layout (its outputs, NMS in the
graph, box conventions, Frigate's type names); ``edged.detect.outputs`` checks at load
that a model's outputs have the layout its decoder reads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from edged.detect.decoders.detection_output import decode_detection_output
from edged.detect.decoders.dfine import decode_dfine
from edged.detect.decoders.end2end import decode_end2end
from edged.detect.decoders.rfdetr import decode_rfdetr
from edged.detect.decoders.ssd import decode_ssd
from edged.detect.decoders.support import DecodeParams
from edged.detect.decoders.yolo_anchors import decode_yolo_anchors
from edged.detect.decoders.yolonas import decode_yolonas
from edged.detect.decoders.yolov5 import decode_yolov5
from edged.detect.decoders.yolov8 import decode_yolov8
from edged.detect.decoders.yolox import decode_yolox
from edged.detect.nms import Candidates

Decoder = Callable[[Sequence[np.ndarray], float, DecodeParams], Candidates]
DECODE: dict[str, Decoder] = {
    "yolov8": decode_yolov8,
    "yolov5": decode_yolov5,
    "yolox": decode_yolox,
    "end2end": decode_end2end,
    "ssd": decode_ssd,
    "yolonas": decode_yolonas,
    "yolo-anchors": decode_yolo_anchors,
    "dfine": decode_dfine,
    "rfdetr": decode_rfdetr,
    "detection-output": decode_detection_output,
}
