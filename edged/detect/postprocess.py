"""The detector post-processing plan of one model variant, built once at load.

Why an object: everything that depends only on the model (which outputs, the
decoder, labels, the YOLOX grid, defaults) is checked and precomputed when the
variant loads; per batch only decode -> NMS -> map-to-frame remains. The server
calls :meth:`Postprocessor.fit` per frame, :meth:`parse_options` per request and
:meth:`run` once per batch (off the event loop: it is CPU work).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from edged.config.postprocess import MAX_DET_CAP, PostprocessConfig
from edged.detect.decoders import DECODE, detection_output
from edged.detect.decoders.support import DecodeParams
from edged.detect.decoders.yolox import yolox_grid
from edged.detect.geometry import Transform, fit
from edged.detect.labels import labels_from_metadata
from edged.detect.nms import select
from edged.detect.outputs import OutputMismatch, OutputSpec, check_outputs, resolve_decoder
from edged.errors import InvalidArgument

COLUMNS = ("x1", "y1", "x2", "y2", "score", "class")
MAX_CLASSES_OPTION = 1000  # a request may name at most this many class ids


@dataclass(frozen=True)
class Options:
    """Thresholds for one request (the model's defaults unless the request overrides)."""

    conf: float
    iou: float
    max_det: int
    classes: frozenset[int] | None  # None = every class


class Postprocessor:
    """Decode, NMS and un-letterbox a whole batch of one detector variant."""

    def __init__(self, cfg: PostprocessConfig, output_specs: Sequence[OutputSpec],
                 input_size: tuple[int, int],
                 metadata: Mapping[str, str] | None = None) -> None:
        """``input_size`` is the variant's (width, height); ``metadata`` its custom
        metadata map (for Ultralytics' ``names``) when the config gives no labels."""
        self.cfg = cfg
        self.input_size = (int(input_size[0]), int(input_size[1]))
        labels = cfg.labels
        if labels is None and metadata:
            try:
                labels = labels_from_metadata(metadata)
            except ValueError as e:
                raise OutputMismatch(f"{e}; set postprocess.labels or labels_file") from None
        self.labels: tuple[str, ...] = labels or ()
        self._labels_json = {str(i): name for i, name in enumerate(self.labels)}
        self.decoder = resolve_decoder(cfg.decoder, output_specs)
        self.output_names = check_outputs(
            self.decoder, output_specs, input_size=self.input_size,
            num_labels=len(labels) if labels else None, names=cfg.outputs)
        grid = strides = None
        if self.decoder == "yolox":
            grid, strides = yolox_grid(*self.input_size)
        self.params = DecodeParams(
            input_w=self.input_size[0], input_h=self.input_size[1], box_format=cfg.box_format,
            box_order=cfg.box_order, label_offset=cfg.label_offset,
            max_candidates=cfg.max_candidates, grid=grid, strides=strides)
        self._decode = DECODE[self.decoder]
        self.defaults = Options(cfg.conf, cfg.iou, cfg.max_det,
                                frozenset(cfg.classes) if cfg.classes is not None else None)

    def labels_json(self) -> dict[str, str]:
        """``{"0": "person", ...}`` for the reply header (empty when the model has none).

        Built once; callers must not modify it."""
        return self._labels_json

    def detections_header(self, detections: np.ndarray) -> dict[str, Any]:
        """The reply header's ``detections`` entry (docs/protocol.md) for one image's ``[K, 6]``."""
        return {"count": int(detections.shape[0]), "columns": list(COLUMNS),
                "labels": self.labels_json()}

    def fit(self, frame: np.ndarray) -> tuple[np.ndarray, Transform]:
        """Resize a uint8 frame to the model input as the config says (letterbox/stretch)."""
        w, h = self.input_size
        return fit(frame, self.cfg.resize, w, h, self.cfg.pad_value)

    def parse_options(self, header: Mapping[str, Any]) -> Options:
        """Per-request ``conf``, ``iou``, ``max_det``, ``classes`` over the defaults.

        Other keys are ignored (the header carries more than options). A bad value
        raises InvalidArgument naming the field.
        """
        d = self.defaults
        conf = _unit(header, "conf", d.conf)
        iou = _unit(header, "iou", d.iou)
        max_det = header.get("max_det", d.max_det)
        if (not isinstance(max_det, int) or isinstance(max_det, bool)
                or not 0 < max_det <= MAX_DET_CAP):
            raise InvalidArgument(f"option 'max_det' must be an integer from 1 to {MAX_DET_CAP}; "
                                  f"got {max_det!r}")
        classes = d.classes
        if "classes" in header and header["classes"] is not None:
            raw = header["classes"]
            if (not isinstance(raw, list) or len(raw) > MAX_CLASSES_OPTION or not all(
                    isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in raw)):
                raise InvalidArgument(f"option 'classes' must be a list of at most "
                                      f"{MAX_CLASSES_OPTION} class ids (integers >= 0); got "
                                      f"{str(raw)[:80]}")
            classes = frozenset(raw)
        return Options(conf, iou, max_det, classes)

    def run(self, outputs: Mapping[str, np.ndarray], transforms: Sequence[Transform],
            options: Sequence[Options] | None = None) -> list[np.ndarray]:
        """Detections for the first ``len(transforms)`` images of a batch.

        Each is float32 ``[K, 6]`` (x1, y1, x2, y2 in the pixels of that image's frame,
        score, class id), best first; boxes with no area left inside the frame are
        dropped. Rows beyond ``len(transforms)`` (batch padding)
        are ignored.
        """
        arrays = [np.asarray(outputs[n]) for n in self.output_names]
        n = len(transforms)
        if self.decoder == detection_output.NAME:  # one tensor for the batch, by image_id
            images = [[rows] for rows in detection_output.split_batch(arrays[0], n)]
        elif any(a.shape[0] < n for a in arrays):
            raise ValueError(f"outputs have batch {[a.shape[0] for a in arrays]}; "
                             f"{n} transforms given")
        else:
            images = [[a[i] for a in arrays] for i in range(n)]
        opts = options if options is not None else [self.defaults] * n
        cfg = self.cfg
        results = []
        for i, tf in enumerate(transforms):
            per_image = [_float32(a) for a in images[i]]
            o = opts[i]
            c = select(self._decode(per_image, o.conf, self.params), conf=o.conf, iou=o.iou,
                       max_det=o.max_det, agnostic=cfg.agnostic, classes=o.classes,
                       max_candidates=cfg.max_candidates, nms=cfg.nms)
            det = np.empty((c.scores.shape[0], 6), np.float32)
            det[:, :4] = tf.to_frame(c.boxes)
            det[:, 4] = c.scores
            det[:, 5] = c.classes
            # A box wholly in the letterbox band (or off the frame) clips to nothing.
            inside = (det[:, 2] > det[:, 0]) & (det[:, 3] > det[:, 1])
            results.append(det if inside.all() else det[inside])
        return results


def _unit(header: Mapping[str, Any], key: str, default: float) -> float:
    v = header.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0.0 <= v <= 1.0:
        raise InvalidArgument(f"option {key!r} must be a number from 0 to 1; got {v!r}")
    return float(v)


def _float32(a: np.ndarray) -> np.ndarray:
    return a if a.dtype == np.float32 or a.dtype.kind != "f" else a.astype(np.float32)
