"""Per-model dynamic batching with bounded queues, deadlines, priorities and streams.

How batches form (DESIGN.md "Batching"): a lone request on an idle model runs at
once; while the backend computes, new requests accumulate and the next batch takes
as many compatible rows as fit (``max_batch_size``, possibly capped by the governor),
plus at most ``max_delay_ms`` of deliberate waiting when configured. So latency at
low load is that of one inference and throughput at high load that of full batches.

``batch_window`` (a fraction, off by default) is for closed-loop clients, which fall into
cohorts: when a batch finishes and fewer requests wait than a full batch, the next batch
is held for up to that fraction of a batch's compute time (EWMA), or until the queue
holds a full batch, so the clients just answered can join it. A request reaching an
idle model is never held: a hold starts only when a batch completes.

``inline_max_ms`` (off by default) trades DESIGN's "inference off the event loop" for
two thread hand-offs: a lone request on an idle model, with nothing else waiting on its
socket (``Pending.quiet``) and a compute time (EWMA) under the limit, is computed on the
event loop itself, which is blocked meanwhile (what arrives waits in ZeroMQ's queue for
at most that long). Everything else goes to the worker as before.

Everything here runs on the event loop thread except ``compute``, which runs on the
model's single worker thread (one batch at a time per model: the runtime already
uses every core, and a second concurrent batch would only add contention).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edged.errors import (
    DeadlineExceeded,
    Dropped,
    EdgedError,
    ResourceExhausted,
    Unavailable,
)

log = logging.getLogger("edged.batcher")


@dataclass
class Result:
    variant: str
    outputs: list[tuple[str, np.ndarray]]
    queue_s: float
    compute_s: float
    batch: int
    #: a detector's boxes for this request, float32 [K, 6] (None for other models)
    detections: np.ndarray | None = None


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


class Throttle:
    """What the governor currently allows for this model (mutable, read per batch)."""

    def __init__(self) -> None:
        self.max_batch_size: int | None = None
        self.max_rate_hz: float | None = None
        self.shed_priority_above: int | None = None
        self.reason: str = ""


#: per request: its outputs and, for a detector, its detections
PerRequest = tuple[list[tuple[str, np.ndarray]], "np.ndarray | None"]
Compute = Callable[[list[Pending]], tuple[str, list[PerRequest], float]]


class Batcher:
    """Queue + worker coroutine for one model.

    ``compute(batch) -> (variant_name, outputs_per_request, compute_seconds)`` is called
    on ``executor``; it raises EdgedError (or anything) to fail just that batch.
    """

    def __init__(
        self,
        model: str,
        max_batch_size: int,
        max_queue: int,
        max_delay_ms: float,
        compute: Compute,
        executor: Executor,
        on_batch: Callable[[str, int, float, list[Pending]], None] | None = None,
        batch_window: float = 0.0,
        inline_max_ms: float = 0.0,
    ) -> None:
        self.model = model
        self.max_batch_size = max_batch_size
        self.max_queue = max_queue
        self.max_delay_s = max_delay_ms / 1000.0
        self.batch_window = batch_window
        self._hold: asyncio.TimerHandle | None = None  # a short queue held after a batch
        self.inline_max_s = inline_max_ms / 1000.0
        #: the model's say on inline compute (False while a swap or a check may use the
        #: backend from another thread)
        self.may_inline: Callable[[], bool] = lambda: True
        self._completing = False
        self.compute = compute
        self.executor = executor
        self.on_batch = on_batch
        self.throttle = Throttle()
        self.tuned_cap: int | None = None  # best batch size measured on this device
        self.depth = 0
        self._queues: dict[int, deque[Pending]] = {}
        self._streams: dict[str, Pending] = {}
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._accepting = True
        self._paused = False
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._next_slot = 0.0
        self._ewma_compute_s: float | None = None
        self.busy = False  # a batch is computing
        self._idle = asyncio.Event()
        self._idle.set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running: list[Pending] = []
        self.last_progress = time.monotonic()  # watchdog: when the worker last moved

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._worker(), name=f"batcher-{self.model}")

    async def drain(self, timeout: float) -> None:
        """Stop accepting; let queued requests finish until ``timeout``; fail the rest."""
        self._accepting = False
        end = time.monotonic() + timeout
        while (self.depth or self.busy) and time.monotonic() < end:
            await asyncio.sleep(0.01)
        self.fail_all(Unavailable(f"model {self.model!r} is shutting down"))

    async def stop(self) -> None:
        self._accepting = False
        self.fail_all(Unavailable(f"model {self.model!r} is shutting down"))
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def pause(self) -> None:
        """Hold batches (requests keep queueing) while a drain-then-swap runs."""
        self._paused = True
        self._resumed.clear()

    def resume(self) -> None:
        self._paused = False
        self._resumed.set()
        self._wakeup.set()

    async def idle(self) -> None:
        """Wait until no batch is computing."""
        while self.busy:
            await self._idle.wait()

    def fail_all(self, err: EdgedError) -> None:
        """Answer every queued request *and* the batch computing now with ``err``.

        A running batch cannot be aborted; its requests are answered now and its late
        result is dropped (``_finish`` is a no-op on answered requests)."""
        for q in self._queues.values():
            while q:
                self._finish(q.popleft(), err)
        for p in self._running:
            self._finish(p, err)
        self._streams.clear()
        self._end_hold(kick=False)

    # -- admission ----------------------------------------------------------------------
    def submit(self, p: Pending) -> None:
        if not self._accepting:
            raise Unavailable(f"model {self.model!r} is shutting down")
        shed = self.throttle.shed_priority_above
        if shed is not None and p.priority > shed:
            raise ResourceExhausted(
                f"shed: the governor ({self.throttle.reason or 'overload'}) serves only "
                f"priority <= {shed} requests; this one has priority {p.priority}"
            )
        if p.stream is not None:
            old = self._streams.get(p.stream)
            if old is not None and not old.done and old.queued:
                self._finish(old, Dropped(
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
        self._kick()

    def _expire(self, p: Pending) -> None:
        if not p.done and p.queued:
            self._finish(p, DeadlineExceeded(
                f"deadline passed after {1000 * (time.monotonic() - p.arrival):.1f} ms in the "
                "queue; the request was not computed"))

    def _finish(self, p: Pending, outcome: Result | EdgedError) -> None:
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
        try:
            p.respond(outcome)
        except Exception:  # a reply that cannot be sent must not stop the worker
            log.exception("sending a reply failed")

    # -- batch formation ----------------------------------------------------------------
    def _cap(self) -> int:
        cap = self.max_batch_size
        if self.tuned_cap is not None:
            cap = max(1, min(cap, self.tuned_cap))
        if self.throttle.max_batch_size is not None:
            cap = max(1, min(cap, self.throttle.max_batch_size))
        return cap

    def _take(self, batch: list[Pending], rows: int) -> int:
        """Move queued compatible requests into ``batch`` (priority order, FIFO within)."""
        cap = self._cap()
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

    # -- dispatch -----------------------------------------------------------------------
    def _fast(self) -> bool:
        """No deliberate waiting is configured: batches start straight from the loop."""
        return self.max_delay_s <= 0 and not self.throttle.max_rate_hz and not self._paused

    def _kick(self) -> None:
        """Start the next batch now if the backend is free, else leave it to the worker.

        The common case (no max_delay_ms, no rate cap) dispatches here, on the event loop,
        without waking a coroutine: every hop between threads and tasks costs ~50-100 µs,
        which is most of the daemon's overhead on a ~5 ms model.
        """
        if self.busy or not self.depth:
            return
        if not self._fast() or self._loop is None:
            self._wakeup.set()
            return
        if self._hold is not None:
            if self.depth < self._cap():
                return  # the window after the last batch is open: let it fill
            self._end_hold(kick=False)
        batch: list[Pending] = []
        self._take(batch, 0)
        batch = self._drop_late(batch)
        if batch and self._inline(batch):
            self._compute_inline(batch)
        elif batch:
            self._dispatch(batch)

    def _inline(self, batch: list[Pending]) -> bool:
        p = batch[0]
        ewma = self._ewma_compute_s
        return (self.inline_max_s > 0 and len(batch) == 1 and not self.depth
                and not self._completing and ewma is not None and ewma <= self.inline_max_s
                and p.quiet is not None and p.quiet() and self.may_inline())

    def _compute_inline(self, batch: list[Pending]) -> None:
        """Compute on the loop thread (``inline_max_ms``); finish as a worker batch does."""
        self.busy = True
        self._idle.clear()
        self._running = batch
        start = self.last_progress = time.monotonic()
        f: Future[Any] = Future()
        try:
            f.set_result(self.compute(batch))
        except Exception as e:
            f.set_exception(e)
        self._complete(batch, start, f)

    def _dispatch(self, batch: list[Pending]) -> None:
        loop = self._loop
        assert loop is not None
        self.busy = True
        self._idle.clear()
        self._running = batch
        start = self.last_progress = time.monotonic()
        fut = self.executor.submit(self.compute, batch)
        fut.add_done_callback(
            lambda f: loop.call_soon_threadsafe(self._complete, batch, start, f))

    def _complete(self, batch: list[Pending], start: float, f: Any) -> None:
        """Back on the loop: start the next batch first, then answer this one."""
        self.busy = False
        self._running = []
        self.last_progress = time.monotonic()
        self._idle.set()
        self._start_hold()
        self._completing = True  # this batch's replies are not sent yet: no inline compute
        try:
            self._kick()  # the backend never waits for replies to be sent
        finally:
            self._completing = False
        err: EdgedError | None = None
        try:
            variant, outs, compute_s = f.result()
        except EdgedError as e:
            err = e
        except BaseException as e:  # backend bug: fail this batch only, keep serving
            log.error("model %s: batch of %d failed", self.model, len(batch), exc_info=e)
            err = EdgedError(f"inference failed: {type(e).__name__}: {e}")
        if err is not None:
            for p in batch:
                self._finish(p, err)
            return
        a = 0.2
        self._ewma_compute_s = compute_s if self._ewma_compute_s is None else (
            (1 - a) * self._ewma_compute_s + a * compute_s)
        n = sum(p.rows for p in batch)
        if self.on_batch is not None:
            self.on_batch(variant, n, compute_s, batch)
        for p, (out, det) in zip(batch, outs, strict=True):
            self._finish(p, Result(variant, out, start - p.arrival, compute_s, n, det))

    def _start_hold(self) -> None:
        """A batch just finished: hold a short queue for ``batch_window`` x compute time
        (fast path only; ``max_delay_ms`` governs the slow one)."""
        ewma = self._ewma_compute_s
        if (self.batch_window <= 0 or not ewma or not self.depth or self._loop is None
                or self.depth >= self._cap() or not self._fast()):
            return
        self._hold = self._loop.call_later(self.batch_window * ewma, self._end_hold)

    def _end_hold(self, kick: bool = True) -> None:
        if self._hold is not None:
            self._hold.cancel()
            self._hold = None
        if kick:
            self._kick()
            self._wakeup.set()  # the worker waits while a hold is open

    async def _worker(self) -> None:
        """The slow path: rate caps, deliberate batching delay, resuming after a pause."""
        while True:
            while self.depth == 0 or self._paused or self.busy or self._hold is not None:
                self._wakeup.clear()
                if self._paused:
                    await self._resumed.wait()
                elif self.busy:
                    await self._idle.wait()
                else:
                    await self._wakeup.wait()
            if self._fast():
                self._kick()
                continue
            rate = self.throttle.max_rate_hz
            if rate:
                wait = self._next_slot - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                self._next_slot = max(self._next_slot, time.monotonic()) + 1.0 / rate
            batch: list[Pending] = []
            rows = self._take(batch, 0)
            if self.max_delay_s > 0 and batch and rows < self._cap():
                until = batch[0].arrival + self.max_delay_s
                while rows < self._cap():
                    left = until - time.monotonic()
                    if left <= 0:
                        break
                    self._wakeup.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wakeup.wait(), left)
                    rows = self._take(batch, rows)
            batch = self._drop_late(batch)
            if not batch:
                continue
            while self.busy:  # a fast-path batch may have started while we waited
                await self._idle.wait()
            self._dispatch(batch)

    def _drop_late(self, batch: list[Pending]) -> list[Pending]:
        """Answer now the requests that cannot finish before their deadline."""
        if not any(p.deadline is not None for p in batch):
            return batch
        now = time.monotonic()
        est = self._ewma_compute_s or 0.0
        keep = []
        for p in batch:
            if p.deadline is not None and now + est > p.deadline:
                self._finish(p, DeadlineExceeded(
                    f"would finish after its deadline (waited {1000 * (now - p.arrival):.1f} ms,"
                    f" compute takes ~{1000 * est:.1f} ms); the request was not computed"))
            else:
                keep.append(p)
        return keep


def _loop_time(monotonic_deadline: float) -> float:
    """asyncio's clock is time.monotonic on Linux; convert defensively anyway."""
    loop = asyncio.get_running_loop()
    return loop.time() + (monotonic_deadline - time.monotonic())
