"""D-FINE (set prediction, no NMS): ``labels [N]``, ``boxes [N, 4]`` x1, y1, x2, y2 in pixels of
the ``orig_target_sizes`` fed (edged sets it to the model input), ``scores [N]`` (sigmoid
and top-k done in the graph); labels are COCO-80 ids. Decoding is a score threshold.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edged.detect.decoders.support import DecodeParams
from edged.detect.nms import Candidates


def decode_dfine(outs: Sequence[np.ndarray], conf: float, p: DecodeParams) -> Candidates:
    """``labels [N]``, ``boxes [N, 4]`` xyxy pixels, ``scores [N]``."""
    labels, boxes, scores = outs
    scores = np.asarray(scores, np.float32).reshape(-1)
    keep = np.flatnonzero(scores > conf)
    return Candidates(np.ascontiguousarray(boxes.reshape(-1, 4)[keep], np.float32),
                      scores[keep], np.rint(labels.reshape(-1)[keep]).astype(np.int64))
