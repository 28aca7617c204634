"""Detections as a text table, for ``edged infer MODEL photo.jpg`` on a terminal."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edged.detect.draw import label_text


def detections_table(detections: np.ndarray, labels: Sequence[str] = (),
                     extra: Sequence[tuple[str, Sequence[str]]] = ()) -> str:
    """One line per row (its first 6 columns), best first: label, score and the box in
    frame pixels; ``extra``: more columns, (title, one text per row), e.g. a pipeline
    stage's label of each box."""
    if len(detections) == 0:
        return "no detections"
    more = "".join(f"  {title[:16]:<16}" for title, _ in extra)
    lines = [f"{'label':<20} {'score':>6}  {'x1':>7} {'y1':>7} {'x2':>7} {'y2':>7}{more}"]
    for k, (x1, y1, x2, y2, score, cls) in enumerate(detections[:, :6]):
        name = label_text(int(cls), float(score), labels).rsplit(" ", 1)[0]
        cells = "".join(f"  {texts[k][:16]:<16}" for _, texts in extra)
        lines.append(f"{name[:20]:<20} {score:>6.3f}  {x1:>7.1f} {y1:>7.1f} {x2:>7.1f} "
                     f"{y2:>7.1f}{cells}".rstrip())
    return "\n".join(lines)
