"""YOLOX's raw head ``[N, 5+C]``: offsets from the grid cells at strides 8, 16, 32.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edged.detect.decoders.support import DecodeParams, cxcywh_to_xyxy, objectness_rows
from edged.detect.nms import Candidates

YOLOX_STRIDES = (8, 16, 32)


def yolox_grid(input_w: int, input_h: int,
               strides: Sequence[int] = YOLOX_STRIDES) -> tuple[np.ndarray, np.ndarray]:
    """Cell offsets and strides in YOLOX's output order (stride 8 first, row-major)."""
    grids, per_cell = [], []
    for s in strides:
        ys, xs = np.meshgrid(np.arange(input_h // s), np.arange(input_w // s), indexing="ij")
        grids.append(np.stack((xs, ys), axis=-1).reshape(-1, 2))
        per_cell.append(np.full(grids[-1].shape[0], s))
    return (np.concatenate(grids).astype(np.float32),
            np.concatenate(per_cell).astype(np.float32))


def decode_yolox(outs: Sequence[np.ndarray], conf: float, p: DecodeParams) -> Candidates:
    """``[N, 5+C]`` raw head: xy = (out + cell) * stride, wh = exp(out) * stride."""
    x = outs[0]
    if p.grid is None or p.strides is None:
        raise ValueError("decode_yolox needs DecodeParams.grid/strides (see yolox_grid)")
    if x.shape[0] != p.grid.shape[0]:
        raise ValueError(f"decoder 'yolox': the output has {x.shape[0]} rows but a "
                             f"{p.input_w}x{p.input_h} input has {p.grid.shape[0]} cells "
                             f"at strides {YOLOX_STRIDES}")
    rows, sub, scores, classes = objectness_rows(x, conf)
    if rows.size == 0:
        return Candidates.empty()
    stride = p.strides[rows, None]
    cxcywh = np.empty((rows.size, 4), np.float32)
    cxcywh[:, :2] = (sub[:, :2] + p.grid[rows]) * stride
    with np.errstate(over="ignore"):  # a huge logit gives inf, dropped as non-finite later
        cxcywh[:, 2:] = np.exp(sub[:, 2:4]) * stride
    return Candidates(cxcywh_to_xyxy(cxcywh), scores, classes)
