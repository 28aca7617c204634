"""Track ids per stream, from Roboflow ``supervision``'s ByteTrack (MIT), not our own.

Why supervision: ByteTrack is the tracker camera users compare against, supervision is
maintained and MIT-licensed, and its dependencies (numpy, scipy, opencv-python-headless,
matplotlib) are mostly what edged already has; norfair (BSD) pins numpy < 2. Pinned to
0.23: later releases require opencv-python beside edged's headless build, and 0.28
removed ByteTrack. It is an extra
(``pip install 'edged[track]'``), imported only when a model or request tracks.

Called only on the model's worker thread, once per frame in queue order, so each
stream's tracker sees its frames in order and needs no lock. One tracker per stream,
at most ``max_streams`` of them (least recently used dropped) and none idle for
longer than ``idle_s``: the same bound as the stream table.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

import numpy as np

from edged.errors import ArtifactError

#: the extra that provides the tracker (pyproject.toml)
EXTRA = "track"
#: the column a tracked reply adds; -1: a detection no track took (too weak to start one)
TRACK_COLUMN = "track_id"


def missing_tracker() -> str | None:
    """Why tracking cannot run here, without importing anything (None: it can)."""
    import importlib.util

    if importlib.util.find_spec("supervision") is None:
        return f"tracking needs the supervision package: pip install 'edged[{EXTRA}]'"
    return None


def require_tracker() -> Any:
    """The supervision module, or ArtifactError saying which extra to install."""
    try:
        import supervision
    except ImportError as e:
        raise ArtifactError(f"tracking needs the supervision package: pip install "
                            f"'edged[{EXTRA}]' ({e})") from None
    if not hasattr(supervision, "ByteTrack"):
        raise ArtifactError(f"supervision {supervision.__version__} has no ByteTrack (removed "
                            f"in 0.28): pip install 'edged[{EXTRA}]' (supervision 0.23)")
    return supervision


#: supervision's ByteTrack starts a track only from a box scoring this much above its
#: ``track_activation_threshold`` (its ``det_thresh``)
_START_MARGIN = 0.1


class Trackers:
    def __init__(self, max_streams: int = 4096, idle_s: float = 60.0,
                 min_score: float = 0.25) -> None:
        """``min_score``: the lowest score of a box the detector returns (its ``conf``).

        Why it matters: ByteTrack's defaults start a track only from a box scoring over
        0.35 and match boxes scoring 0.1-0.25 only to tracks that exist. A box the detector
        returns at 0.3 then never gets a track, and a pipeline reads it afresh on every
        frame. With the threshold set from the detector's ``conf``, every box it returns
        may start a track or continue one; a box left without one (``track_id`` -1) is
        the exception (counted by a pipeline: ``edged_pipeline_untracked_boxes_total``)."""
        self.max_streams = max_streams
        self.idle_s = idle_s
        self.activation = max(0.0, min_score - _START_MARGIN)
        self._by_stream: OrderedDict[str, tuple[Any, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_stream)

    def update(self, stream: str, detections: np.ndarray, now: float | None = None
               ) -> np.ndarray:
        """``[K, 6]`` detections of the stream's next frame -> ``[K, 7]`` with track ids."""
        sv = require_tracker()
        now = time.monotonic() if now is None else now
        tracker = self._tracker(sv, stream, now)
        out = np.empty((detections.shape[0], 7), np.float32)
        out[:, :6] = detections
        out[:, 6] = -1
        k = detections.shape[0]
        d = sv.Detections(xyxy=detections[:, :4].astype(np.float32),
                          confidence=detections[:, 4].astype(np.float32),
                          class_id=detections[:, 5].astype(int),
                          data={"row": np.arange(k)})
        tracked = tracker.update_with_detections(d)
        if len(tracked):
            out[tracked.data["row"], 6] = tracked.tracker_id
        return out

    def _tracker(self, sv: Any, stream: str, now: float) -> Any:
        entries = self._by_stream
        hit = entries.pop(stream, None)
        limit = now - self.idle_s
        while entries:
            first = next(iter(entries.values()))
            if first[1] >= limit and len(entries) < self.max_streams:
                break
            entries.popitem(last=False)
        tracker = hit[0] if hit is not None else sv.ByteTrack(
            track_activation_threshold=self.activation, minimum_consecutive_frames=1)
        entries[stream] = (tracker, now)
        return tracker
