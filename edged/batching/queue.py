"""The waiting side of a model's batcher: bounded priority queues, deadlines, streams.

Why apart from the batcher: what a request does while it waits (its priority queue, the
freshest-frame rule of its stream, its deadline timer, being shed by the governor) knows
nothing about how batches are dispatched and computed; the batcher asks this queue for
the next batch (``take``) and hands every outcome back through ``finish``, the one
place a request is answered. Everything here runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edged.batching.throttle import Throttle
from edged.errors import (
    DeadlineExceeded,
    Dropped,
    EdgedError,
    ResourceExhausted,
    Shed,
    Unavailable,
)

log = logging.getLogger("edged.batching")


@dataclass
class Result:
    variant: str
    outputs: list[tuple[str, np.ndarray]]
    queue_s: float
    compute_s: float
    batch: int
    #: a detector's boxes for this request, float32 [K, 6] (None for other models)
    detections: np.ndarray | None = None
    #: the reply's ``detections`` entry when it is this request's own (a pipeline's: its
    #: stages' columns, labels and batches); None: the model's (``detections_header``)
    detections_header: dict[str, Any] | None = None


#: called once per request with its outcome (the caller binds what it needs to reply)
Respond = Callable[["Result | EdgedError"], None]


@dataclass(eq=False)
class Pending:
    """One accepted request waiting for (or in) a batch."""

    feeds: dict[str, np.ndarray]  # model input name -> array with leading batch dim `rows`
    rows: int
    key: tuple[Any, ...]  # requests batch together only when keys are equal
    respond: Respond
    priority: int = 1
    stream: str | None = None
    deadline: float | None = None  # time.monotonic() seconds
    outputs: list[str] | None = None
    #: the stream's frame-rate limit asked by the request (the model's limit still applies)
    max_fps: float | None = None
    #: what the model needs to finish this request after compute (a detector's frame
    #: transform and options); opaque to the batcher
    meta: Any = None
    arrival: float = field(default_factory=time.monotonic)
    #: True when nothing else waits on the request's socket (asked only for inline compute)
    quiet: Callable[[], bool] | None = None
    done: bool = False
    queued: bool = False
    timer: asyncio.TimerHandle | None = None


#: per request: its outputs and, for a detector, its detections
PerRequest = tuple[list[tuple[str, np.ndarray]], "np.ndarray | None"]
Compute = Callable[[list[Pending]], tuple[str, list[PerRequest], float]]


class RequestQueue:
    """Requests waiting for a batch, by priority (0 first), FIFO within a priority."""

    def __init__(self, model: str, max_queue: int, throttle: Throttle) -> None:
        self.model = model
        self.max_queue = max_queue
        self.throttle = throttle
        self.depth = 0
        self.accepting = True
        self._queues: dict[int, deque[Pending]] = {}
        self._streams: dict[str, Pending] = {}
        #: told (arrival, deadline) of every answered request that had a deadline
        self.on_deadline: Callable[[float, float], None] | None = None

    def put(self, p: Pending) -> None:
        """Queue ``p`` or raise why not (shutting down, shed, full); a queued frame of
        the same stream is answered DROPPED (freshest frame wins)."""
        if not self.accepting:
            raise Unavailable(f"model {self.model!r} is shutting down")
        shed = self.throttle.shed_priority_above
        if shed is not None and p.priority > shed:
            raise Shed(
                f"shed: the governor ({self.throttle.reason or 'overload'}) serves only "
                f"priority <= {shed} requests; this one has priority {p.priority}"
            )
        if p.stream is not None:
            old = self._streams.get(p.stream)
            if old is not None and not old.done and old.queued:
                self.finish(old, Dropped(
                    f"superseded by a newer frame of stream {p.stream!r} (freshest frame wins)"))
        if self.depth >= self.max_queue:
            raise ResourceExhausted(
                f"queue of model {self.model!r} is full ({self.max_queue} requests waiting)")
        if p.stream is not None:
            self._streams[p.stream] = p
        self._queues.setdefault(p.priority, deque()).append(p)
        p.queued = True
        self.depth += 1
        if p.deadline is not None:
            p.timer = asyncio.get_running_loop().call_at(
                _loop_time(p.deadline), self._expire, p)

    def _expire(self, p: Pending) -> None:
        if not p.done and p.queued:
            self.finish(p, DeadlineExceeded(
                f"deadline passed after {1000 * (time.monotonic() - p.arrival):.1f} ms in the "
                "queue; the request was not computed"))

    def finish(self, p: Pending, outcome: Result | EdgedError) -> None:
        """Answer ``p`` once (later outcomes of an answered request are dropped)."""
        if p.done:
            return
        p.done = True
        if p.queued:
            p.queued = False
            self.depth -= 1
        if p.timer is not None:
            p.timer.cancel()
            p.timer = None
        if p.stream is not None and self._streams.get(p.stream) is p:
            del self._streams[p.stream]
        if p.deadline is not None and self.on_deadline is not None:
            self.on_deadline(p.arrival, p.deadline)
        try:
            p.respond(outcome)
        except Exception:  # a reply that cannot be sent must not stop the worker
            log.exception("sending a reply failed")

    def fail_all(self, err: EdgedError) -> None:
        """Answer every queued request with ``err``."""
        for q in self._queues.values():
            while q:
                self.finish(q.popleft(), err)
        self._streams.clear()

    def head(self) -> Pending | None:
        """The request the next batch would start with (highest priority, oldest)."""
        for prio in sorted(self._queues):
            for p in self._queues[prio]:
                if not p.done:
                    return p
        return None

    def ready_rows(self, cap: int) -> int:
        """The rows ``take`` would move into an empty batch now, without moving them (the
        same walk: priority order, the head's key, stopping at the first that overflows)."""
        key, rows = None, 0
        for prio in sorted(self._queues):
            for p in self._queues[prio]:
                if p.done or (key is not None and p.key != key):
                    continue
                if rows and rows + p.rows > cap:
                    break
                rows += p.rows
                key = p.key
            if rows >= cap:
                break
        return rows

    def take(self, batch: list[Pending], rows: int, cap: int) -> int:
        """Move queued compatible requests into ``batch`` (priority order, FIFO within)
        up to ``cap`` rows; returns the rows now in it."""
        key = batch[0].key if batch else None
        for prio in sorted(self._queues):
            q = self._queues[prio]
            skipped: list[Pending] = []
            while q:
                p = q[0]
                if p.done:
                    q.popleft()
                    continue
                if key is not None and p.key != key:
                    skipped.append(q.popleft())
                    continue
                if batch and rows + p.rows > cap:
                    break
                q.popleft()
                p.queued = False
                self.depth -= 1
                if p.stream is not None and self._streams.get(p.stream) is p:
                    del self._streams[p.stream]
                batch.append(p)
                rows += p.rows
                key = p.key
            q.extendleft(reversed(skipped))
            if rows >= cap:
                break
        return rows

    def drop_late(self, batch: list[Pending], compute_s: float,
                  probe: bool = False) -> list[Pending]:
        """Answer now the requests that cannot finish before their deadline.

        ``compute_s`` is an estimate learnt from batches that ran, so it can only come
        down if something runs: with ``probe`` the first request still inside its
        deadline is kept whatever the estimate says (one slow spell must not leave a
        model refusing every short-deadline request, such as Frigate's, for good)."""
        if not any(p.deadline is not None for p in batch):
            return batch
        now = time.monotonic()
        keep = []
        for p in batch:
            late = p.deadline is not None and now + compute_s > p.deadline
            if late and probe and now < (p.deadline or 0.0):
                probe, late = False, False
            if late:
                self.finish(p, DeadlineExceeded(
                    f"would finish after its deadline (waited {1000 * (now - p.arrival):.1f} ms,"
                    f" compute takes ~{1000 * compute_s:.1f} ms); the request was not computed"))
            else:
                keep.append(p)
        return keep


def _loop_time(monotonic_deadline: float) -> float:
    """asyncio's clock is time.monotonic on Linux; convert defensively anyway."""
    loop = asyncio.get_running_loop()
    return loop.time() + (monotonic_deadline - time.monotonic())
