"""The model types Frigate names in its requests, and edged's decoder for each.

Why apart from ``edged.frigate_models``: ``[[server.frigate]]`` is checked against these
names when the config is read, before the daemon imports numpy's and OpenCV's users
(the detection decoders) that checking a sent graph needs.
"""

from __future__ import annotations

#: Frigate's ``ModelTypeEnum`` names, as its plugin sends them -> edged's decoder
DECODER = {"ssd": "ssd", "yolox": "yolox", "yolonas": "yolonas", "yologeneric": "yolov8",
           "dfine": "dfine", "rfdetr": "rfdetr"}
#: the config spelling (``yolo-generic``) and the enum's name both occur
ALIASES = {"yolo-generic": "yologeneric", "yolo_generic": "yologeneric"}


def normalize_type(model_type: object) -> str | None:
    """Frigate's type name (``yologeneric`` for both spellings), or None if unknown."""
    if not isinstance(model_type, str):
        return None
    t = ALIASES.get(model_type.lower(), model_type.lower())
    return t if t in DECODER else None
