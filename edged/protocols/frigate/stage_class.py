"""The class a pipeline's row carries to Frigate: its ``label_from`` stage's, else the detector's.

Why here and not in the pipeline: the pipeline answers every protocol alike, each box with
the detector's class and score and three columns per stage (docs/pipelines.md). Frigate's
reply row has room for one class id and one score, so which class goes is this endpoint's
choice (``[[server.frigate]] label_from``), made on the pipeline's answer:

- the class is the stage's where the stage labelled the box (``fresh`` or ``carried``) with
  one of its labels; otherwise the detector's, so a box is never lost and never carries a
  class the stage did not give it. Each such row is counted,
  ``edged_frigate_label_fallbacks_total{endpoint, stage, reason}``, reason the box's state
  for the stage (``failed``, ``shed``, ``not_selected``) or ``unlabelled`` (the stage's
  model answered a class its ``labels`` do not name), and logged at most once a minute per
  endpoint and reason with the stage's own error or reason;
- the score stays the detector's: Frigate's thresholds (it stops reading at the first row
  under 0.4; its per-label ``min_score`` and ``threshold``) ask whether there is an object,
  which is the detector's confidence; the stage's score is its confidence in the reading of
  a box that exists, and a low reading would otherwise hide a real object and every row
  after it (rows are ordered by the detector's score);
- the detector's class and the stage's share Frigate's one labelmap (``class_map`` maps
  both): ``edged.config.frigate`` refuses at load a detector whose configured labels name
  an id differently from the stage; a detector whose labels come from its model file is
  checked here, on its first answer, and a row that would fall back onto such an id is left
  out (reason ``clash``, logged) rather than shown under the stage's name.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from edged.config.frigate import fallback_clashes
from edged.config.pipelines import StageConfig
from edged.metrics import Metrics
from edged.model.pipeline.run import CARRIED, FAILED, FRESH, NOT_SELECTED, SHED, STATES

log = logging.getLogger("edged.protocols.frigate")

#: the box states whose label is the stage's
LABELLED = (FRESH, CARRIED)
#: why a row carries the detector's class: its state's name, or ``unlabelled`` (a class
#: the stage's labels do not name), or ``clash`` (left out)
REASONS = (STATES[NOT_SELECTED], STATES[FAILED], STATES[SHED], "unlabelled", "clash")
#: expected in normal operation (more boxes than the stage reads; the governor's choice)
QUIET = (STATES[NOT_SELECTED], STATES[SHED])
#: at most one log line per endpoint and reason in this many seconds
LOG_EVERY_S = 60.0


class StageClass:
    """One endpoint's choice of class for a pipeline's rows (``label_from``)."""

    def __init__(self, metrics: Metrics, address: str, stage: StageConfig,
                 class_map: dict[int, int]) -> None:
        assert stage.labels is not None  # label_from needs labels (edged.config.frigate)
        self.address = address
        self.stage = stage
        self.class_map = class_map
        self._columns = (f"{stage.name}_class", f"{stage.name}_state")
        self._count = {r: metrics.frigate_label_fallbacks.labels(address, stage.name, r)
                       for r in REASONS}
        self._logged: dict[str, float] = {}
        #: the detector's labels last seen (a reply header's, one dict per variant) and the
        #: Frigate ids a fallback must not reach with them
        self._det_labels: Any = None
        self._clash: frozenset[int] = frozenset()

    def rows(self, detections: np.ndarray, header: dict[str, Any] | None) -> np.ndarray:
        """The pipeline's answer ``[K, 6 + ...]`` -> ``[K', 6]`` rows for
        ``wire.encode_result``: the stage's class where it labelled the box, else the
        detector's; rows that would clash left out."""
        header = header or {}
        d = np.array(detections[:, :6], np.float32)
        columns = list(header.get("columns") or [])
        k = d.shape[0]
        if not k:
            return d
        cls_col, state_col = (columns.index(c) if c in columns else None
                              for c in self._columns)
        if cls_col is None or state_col is None:
            state = np.full(k, FAILED, np.int64)  # no columns: the stage gave nothing
            cls = np.full(k, -1, np.int64)
        else:
            state = detections[:, state_col].astype(np.int64)
            cls = detections[:, cls_col].astype(np.int64)
        named = np.isin(state, LABELLED) & (cls >= 0) & (cls < len(self.stage.labels or ()))
        d[named, 5] = cls[named]
        keep = np.ones(k, bool)
        fallback = np.flatnonzero(~named)
        if fallback.size:
            clash = self._clashes(header.get("labels"))
            for r in fallback:
                det_id = int(d[r, 5])
                if self.class_map.get(det_id, det_id) in clash:
                    keep[r] = False
                    why = "clash"
                elif int(state[r]) in LABELLED:
                    why = "unlabelled"
                else:
                    why = STATES[int(state[r])] if int(state[r]) in (NOT_SELECTED, SHED) \
                        else STATES[FAILED]
                self._count[why].inc()
                self._say(why, header, det_id, int(cls[r]))
        return d[keep]

    def _clashes(self, det_labels: Any) -> frozenset[int]:
        if det_labels is not self._det_labels:  # a new detector variant's labels
            self._det_labels = det_labels
            found = fallback_clashes(det_labels if isinstance(det_labels, dict) else None,
                                     self.stage.labels or (), self.class_map)
            self._clash = frozenset(i for i, _, _ in found)
            if found:
                log.error("frigate %s: the detector's labels name Frigate ids %s otherwise "
                          "than the labels of stage %r (detector / stage: %s); rows falling "
                          "back to the detector's class on those ids are left out",
                          self.address, ", ".join(str(i) for i, _, _ in found),
                          self.stage.name,
                          ", ".join(f"{i}: {d!r} / {s!r}" for i, d, s in found[:8]))
        return self._clash

    def _say(self, why: str, header: dict[str, Any], det_id: int, stage_id: int) -> None:
        """The first row of each reason (then once a minute): what the stage said."""
        now = time.monotonic()
        if now - self._logged.get(why, -LOG_EVERY_S) < LOG_EVERY_S:
            return
        self._logged[why] = now
        info = (header.get("stages") or {}).get(self.stage.name) or {}
        detail = {
            "unlabelled": f"its model answered class {stage_id}, which its labels do not name",
            "not_selected": "not one of its classes, under its min_score, or beyond max_crops",
            "clash": "the detector's class would be shown under the stage's label",
        }.get(why) or info.get("error") or info.get("reason") or "no answer from the stage"
        action = "left out" if why == "clash" else f"sent with the detector's class {det_id}"
        log.log(logging.INFO if why in QUIET else logging.WARNING,
                "frigate %s: a row stage %r did not label (%s: %s) was %s; "
                "edged_frigate_label_fallbacks_total counts each (logged once a minute)",
                self.address, self.stage.name, why, detail, action)
