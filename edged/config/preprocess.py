"""``[models.preprocess]``: what a client's image must become for a model, as typed config.

Why apart from ``edged.preprocess.preprocessor``: the config is read before the daemon
imports OpenCV (start-up opens the models' sessions while the rest imports,
``edged.model.preopen``); this module needs nothing but the schema.
"""

from __future__ import annotations

from dataclasses import dataclass

from edged.config.schema import Table, positive

COLORS = ("gray", "rgb", "bgr")
#: OpenCV's resize interpolations by name (``edged.preprocess.preprocessor`` maps them to its flags)
INTERPOLATIONS = ("nearest", "linear", "area", "cubic")


@dataclass(frozen=True)
class PreprocessConfig:
    """``[models.preprocess]``: how an image becomes the model's input tensor."""

    input: str | None  # model input it feeds; None = the first input
    color: str  # colour order the model expects
    raw_color: str  # colour order of raw 3-channel frames clients send (OpenCV: bgr)
    width: int
    height: int
    interpolation: str
    scale: float
    mean: tuple[float, ...]
    std: tuple[float, ...]
    layout: str  # NCHW | NHWC
    dtype: str  # float32 | float16 | uint8

    @classmethod
    def from_table(cls, t: Table) -> PreprocessConfig:
        color = t.get("color", str, "rgb", choices=COLORS)
        channels = 1 if color == "gray" else 3
        mean = t.get_list("mean", (int, float), [0.0] * channels) or [0.0] * channels
        std = t.get_list("std", (int, float), [1.0] * channels) or [1.0] * channels
        for key, vals in (("mean", mean), ("std", std)):
            if len(vals) not in (1, channels):
                t.problem(key, f"needs 1 or {channels} values for color {color!r}; got {vals}")
        if any(s == 0 for s in std):
            t.problem("std", "values must be non-zero")
        cfg = cls(
            input=t.get("input", str, None),
            color=color,
            raw_color=t.get("raw_color", str, "bgr", choices=("bgr", "rgb")),
            width=t.get("width", int, check=positive),
            height=t.get("height", int, check=positive),
            interpolation=t.get("interpolation", str, "linear", choices=INTERPOLATIONS),
            scale=t.get("scale", float, 1.0 / 255.0),
            mean=tuple(float(m) for m in mean),
            std=tuple(float(s) if s else 1.0 for s in std),
            layout=t.get("layout", str, "NCHW", choices=("NCHW", "NHWC")),
            dtype=t.get("dtype", str, "float32", choices=("float32", "float16", "uint8")),
        )
        t.done()
        return cfg

    @property
    def channels(self) -> int:
        return 1 if self.color == "gray" else 3

    def input_size(self, shape: tuple[int, ...]) -> tuple[int, int]:
        """(width, height) of an image input of ``shape``; this config's size where the
        model leaves those dimensions dynamic."""
        if len(shape) == 4:
            h, w = (shape[2], shape[3]) if self.layout == "NCHW" else (shape[1], shape[2])
            if h > 0 and w > 0:
                return int(w), int(h)
        return self.width, self.height
