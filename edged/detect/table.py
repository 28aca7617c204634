"""Detections as a text table, for ``edged infer MODEL photo.jpg`` on a terminal."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edged.detect.draw import label_text


def detections_table(detections: np.ndarray, labels: Sequence[str] = ()) -> str:
    """One line per ``[K, 6]`` row, best first: label, score and the box in frame pixels."""
    if len(detections) == 0:
        return "no detections"
    lines = [f"{'label':<20} {'score':>6}  {'x1':>7} {'y1':>7} {'x2':>7} {'y2':>7}"]
    for x1, y1, x2, y2, score, cls in detections:
        name = label_text(int(cls), float(score), labels).rsplit(" ", 1)[0]
        lines.append(f"{name[:20]:<20} {score:>6.3f}  {x1:>7.1f} {y1:>7.1f} {x2:>7.1f} "
                     f"{y2:>7.1f}")
    return "\n".join(lines)
