"""Track-gated re-classification: a tracked box's stage result, reused across frames.

Why: an object seen in 30 consecutive frames of a camera is the same object; classifying
its crop 30 times spends the accelerator on an answer already known. DeepStream's
secondary classifiers cache each object's result by track id and infer again only
every ``secondary-reinfer-interval`` frames or when the box has grown (a closer object
shows more detail). The rule here is that one, per stage:

- a track's result is *carried* while fewer than ``reinfer_interval`` frames of its
  stream have passed since it was classified and its box's area is at most
  ``reinfer_area_growth`` times the area it had then;
- otherwise its crop is classified again (*fresh*) and the new result is kept.

Frames are counted per stream as the detector answers them. Bounded like the stream
table: at most ``max_streams`` streams (least recently seen dropped) and none idle for
longer than ``idle_s``; within a stream, a result older than its interval is dropped
when the next frame comes, so a stream holds at most interval × K results per stage.
Event loop only (no locks).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field


@dataclass(slots=True)
class Kept:
    cls: int
    score: float
    area: float
    frame: int  # the stream's frame number it was classified on


@dataclass(slots=True)
class _Stream:
    frame: int = 0
    seen: float = 0.0
    #: (stage, track id) -> its last fresh result
    kept: dict[tuple[str, int], Kept] = field(default_factory=dict)


class TrackResults:
    def __init__(self, max_streams: int = 4096, idle_s: float = 60.0) -> None:
        self.max_streams = max_streams
        self.idle_s = idle_s
        self._streams: OrderedDict[str, _Stream] = OrderedDict()

    def __len__(self) -> int:
        return len(self._streams)

    def next_frame(self, stream: str, intervals: dict[str, int],
                   now: float | None = None) -> int:
        """Count a frame of ``stream`` and forget what no stage may reuse any more
        (``intervals``: stage -> its ``reinfer_interval``); its frame number."""
        now = time.monotonic() if now is None else now
        entries = self._streams
        s = entries.pop(stream, None)
        while entries:
            first = next(iter(entries.values()))
            if first.seen >= now - self.idle_s and len(entries) < self.max_streams:
                break
            entries.popitem(last=False)
        if s is None:
            s = _Stream()
        s.frame += 1
        s.seen = now
        entries[stream] = s
        if s.kept:
            stale = [k for k, v in s.kept.items() if s.frame - v.frame >= intervals.get(k[0], 0)]
            for k in stale:
                del s.kept[k]
        return s.frame

    def carried(self, stream: str, stage: str, track: int, area: float, frame: int,
                interval: int, growth: float) -> Kept | None:
        """The result to carry for this box, or None: classify it afresh."""
        s = self._streams.get(stream)
        if s is None:
            return None
        k = s.kept.get((stage, track))
        if k is None or frame - k.frame >= interval or area > k.area * growth:
            return None
        return k

    def keep(self, stream: str, stage: str, track: int, cls: int, score: float, area: float,
             frame: int) -> None:
        """A fresh result of ``track`` on frame ``frame`` (a newer one is not replaced)."""
        s = self._streams.get(stream)
        if s is None:
            return  # forgotten meanwhile (idle or evicted): nothing to keep it for
        old = s.kept.get((stage, track))
        if old is None or old.frame <= frame:
            s.kept[(stage, track)] = Kept(cls, score, area, frame)
