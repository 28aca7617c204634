"""Per-stream state of one model: frame-rate limits and counters, in a bounded table.

Why bounded: a stream id is whatever a client puts in its header, so a buggy or
hostile client can send a new one per frame. The table keeps at most ``max_streams``
entries (least recently seen evicted first) and forgets a stream ``idle_s`` after its
last frame, so memory stays ``max_streams`` x one small entry (about 200 bytes)
whatever the clients do (docs/streams.md states the bound the tests hold it to).

Rate limit: a GCRA (the "virtual scheduling" form of a token bucket, RFC 2697's
cousin): a frame is admitted when it arrives at or after the stream's theoretical
arrival time ``tat``; each admitted frame moves ``tat`` one period on, so the
admitted rate converges to ``max_fps`` exactly, without drifting with sender jitter.
Runs on the event loop only (no locks).
"""

from __future__ import annotations

import heapq
import time
from collections import OrderedDict
from typing import Any

from edged.batching.queue import Pending, Result
from edged.errors import Dropped, EdgedError
from edged.metrics import Metrics

#: counter names, in the order status prints them
OUTCOMES = ("received", "served", "dropped_stale", "dropped_rate")


class StreamEntry:
    __slots__ = ("dropped_rate", "dropped_stale", "last_seen", "name", "received", "served",
                 "tat")

    def __init__(self, name: str, now: float) -> None:
        self.name = name
        self.received = self.served = self.dropped_stale = self.dropped_rate = 0
        self.last_seen = now
        self.tat = 0.0  # the earliest time the next frame is admitted

    def to_json(self) -> dict[str, Any]:
        return {"stream": self.name, "received": self.received, "served": self.served,
                "dropped_stale": self.dropped_stale, "dropped_rate": self.dropped_rate}


class StreamTable:
    def __init__(self, max_streams: int = 4096, idle_s: float = 60.0) -> None:
        self.max_streams = max_streams
        self.idle_s = idle_s
        self._entries: OrderedDict[str, StreamEntry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def admit(self, stream: str, now: float, max_fps: float | None) -> StreamEntry:
        """Count a received frame; raise Dropped when it exceeds ``max_fps``."""
        entries = self._entries
        e = entries.get(stream)
        if e is None:
            self._forget_idle(now)
            if len(entries) >= self.max_streams:
                entries.popitem(last=False)
            e = entries[stream] = StreamEntry(stream, now)
        else:
            entries.move_to_end(stream)
        e.received += 1
        e.last_seen = now
        if max_fps:
            period = 1.0 / max_fps
            if now < e.tat:
                e.dropped_rate += 1
                raise Dropped(f"stream {stream!r} is limited to {max_fps:g} frames/s; this "
                              f"frame came {1000 * (e.tat - now):.1f} ms early")
            # Idle for more than a period: start afresh rather than allow a burst.
            e.tat = now + period if now - e.tat > period else e.tat + period
        return e

    def _forget_idle(self, now: float) -> None:
        """Drop streams not seen for ``idle_s`` (oldest first: the order is recency)."""
        entries = self._entries
        limit = now - self.idle_s
        while entries:
            first = next(iter(entries.values()))
            if first.last_seen >= limit:
                break
            entries.popitem(last=False)

    def top(self, n: int = 5) -> list[dict[str, Any]]:
        """The ``n`` streams with the most frames received (for ``edged status``)."""
        return [e.to_json() for e in heapq.nlargest(n, self._entries.values(),
                                                    key=lambda e: e.received)]


class StreamAdmission:
    """One model's streams at the door: count each frame, apply the rate limit (the
    model's ``max_stream_fps`` and the request's own, whichever is lower), and count
    how each admitted frame ends (served, or replaced by a newer one)."""

    def __init__(self, model: str, metrics: Metrics, max_streams: int, idle_s: float,
                 max_fps: float | None) -> None:
        self.table = StreamTable(max_streams, idle_s)
        self.max_fps = max_fps or None
        self._m = {o: metrics.stream_frames.labels(model, o) for o in OUTCOMES}
        self._m_tracked = metrics.streams_tracked.labels(model)

    def __len__(self) -> int:
        return len(self.table)

    def admit(self, p: Pending) -> None:
        """Admit ``p`` (it has a stream) or raise Dropped; wraps its ``respond``."""
        assert p.stream is not None
        fps = self.max_fps
        if p.max_fps:
            fps = min(fps, p.max_fps) if fps else p.max_fps
        m = self._m
        m["received"].inc()
        try:
            entry = self.table.admit(p.stream, time.monotonic(), fps)
        except Dropped:
            m["dropped_rate"].inc()
            raise
        finally:
            self._m_tracked.set(len(self.table))
        respond = p.respond

        def counted(outcome: Result | EdgedError) -> None:
            if isinstance(outcome, Result):
                entry.served += 1
                m["served"].inc()
            elif isinstance(outcome, Dropped):  # a newer frame of the stream replaced it
                entry.dropped_stale += 1
                m["dropped_stale"].inc()
            respond(outcome)

        p.respond = counted
