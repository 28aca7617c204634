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
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

from edged.batch_queue import (
    Compute,
    Pending,
    PerRequest,
    RequestQueue,
    Respond,
    Result,
    Throttle,
)
from edged.errors import EdgedError, Unavailable

#: with no batch started or finished for this long, the compute-time estimate is re-learnt
#: from one request even if it says the request would be late
PROBE_AFTER_S = 1.0

__all__ = ["Batcher", "Compute", "Pending", "PerRequest", "Respond", "Result", "Throttle"]

log = logging.getLogger("edged.batcher")


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
        self.max_delay_s = max_delay_ms / 1000.0
        self._window = BatchWindow(batch_window)
        self.inline = InlinePolicy(inline_max_ms)
        self._completing = False
        self.compute = compute
        self.executor = executor
        self.on_batch = on_batch
        self.throttle = Throttle()
        self.tuned_cap: int | None = None  # best batch size measured on this device
        self.queue = RequestQueue(model, max_queue, self.throttle)
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._paused = False
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._ewma_compute_s: float | None = None
        self.busy = False  # a batch is computing
        self._idle = asyncio.Event()
        self._idle.set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running: list[Pending] = []
        self.last_progress = time.monotonic()  # watchdog: when the worker last moved

    @property
    def depth(self) -> int:
        return self.queue.depth

    def predicted_latency_s(self) -> float:
        """Seconds until a request queued now would be answered: the batches ahead of it
        (the one computing included) and its own, at the EWMA compute time."""
        est = self._ewma_compute_s or 0.0
        return (self.depth // self._cap() + (1 if self.busy else 0) + 1) * est

    def start(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._worker(), name=f"batcher-{self.model}")

    async def drain(self, timeout: float) -> None:
        """Stop accepting; let queued requests finish until ``timeout``; fail the rest."""
        self.queue.accepting = False
        end = time.monotonic() + timeout
        while (self.depth or self.busy) and time.monotonic() < end:
            await asyncio.sleep(0.01)
        self.fail_all(Unavailable(f"model {self.model!r} is shutting down"))

    async def stop(self) -> None:
        self.queue.accepting = False
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
        result is dropped (``finish`` is a no-op on answered requests)."""
        self.queue.fail_all(err)
        for p in self._running:
            self.queue.finish(p, err)
        self._end_hold(kick=False)

    def submit(self, p: Pending) -> None:
        """Queue ``p`` (or raise why not) and start a batch if the backend is free."""
        self.queue.put(p)
        self._kick()

    def _cap(self) -> int:
        cap = self.max_batch_size
        if self.tuned_cap is not None:
            cap = max(1, min(cap, self.tuned_cap))
        if self.throttle.max_batch_size is not None:
            cap = max(1, min(cap, self.throttle.max_batch_size))
        return cap

    def _take(self, batch: list[Pending], rows: int) -> int:
        return self.queue.take(batch, rows, self._cap())

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
        if self._window.is_open:
            if self.depth < self._cap():
                return  # the window after the last batch is open: let it fill
            self._end_hold(kick=False)
        batch: list[Pending] = []
        self._take(batch, 0)
        batch = self._drop_late(batch)
        if batch and not self._completing and self.inline.wants(batch, self.depth,
                                                                   self._ewma_compute_s):
            self._compute_inline(batch)
        elif batch:
            self._dispatch(batch)

    def _compute_inline(self, batch: list[Pending]) -> None:
        """Compute on the loop thread (``inline_max_ms``); finish as a worker batch does."""
        start = self._begin(batch)
        f: Future[Any] = Future()
        try:
            f.set_result(self.compute(batch))
        except Exception as e:
            f.set_exception(e)
        self._complete(batch, start, f)

    def _begin(self, batch: list[Pending]) -> float:
        self.busy = True
        self._idle.clear()
        self._running = batch
        start = self.last_progress = time.monotonic()
        return start

    def _dispatch(self, batch: list[Pending]) -> None:
        loop = self._loop
        assert loop is not None
        start = self._begin(batch)
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
                self.queue.finish(p, err)
            return
        a = 0.2
        self._ewma_compute_s = compute_s if self._ewma_compute_s is None else (
            (1 - a) * self._ewma_compute_s + a * compute_s)
        n = sum(p.rows for p in batch)
        if self.on_batch is not None:
            self.on_batch(variant, n, compute_s, batch)
        for p, (out, det) in zip(batch, outs, strict=True):
            self.queue.finish(p, Result(variant, out, start - p.arrival, compute_s, n, det))

    def _start_hold(self) -> None:
        """A batch just finished: hold a short queue for ``batch_window`` x compute time
        (fast path only; ``max_delay_ms`` governs the slow one)."""
        if (self._loop is not None and self.depth and self.depth < self._cap()
                and self._fast()):
            self._window.open(self._loop, self._ewma_compute_s, self._end_hold)

    def _end_hold(self, kick: bool = True) -> None:
        self._window.close()
        if kick:
            self._kick()
            self._wakeup.set()  # the worker waits while a hold is open

    async def _worker(self) -> None:
        """The slow path: rate caps, deliberate batching delay, resuming after a pause."""
        while True:
            while self.depth == 0 or self._paused or self.busy or self._window.is_open:
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
            await self.throttle.wait_slot()
            batch: list[Pending] = []
            rows = self._take(batch, 0)
            if self.max_delay_s > 0 and batch and rows < self._cap():
                await self.queue.wait_for_batch(batch, rows, self._cap,
                                                batch[0].arrival + self.max_delay_s)
            batch = self._drop_late(batch)
            if not batch:
                continue
            while self.busy:  # a fast-path batch may have started while we waited
                await self._idle.wait()
            self._dispatch(batch)

    def _drop_late(self, batch: list[Pending]) -> list[Pending]:
        # Nothing computed for a while: let one request through to re-learn the time.
        probe = time.monotonic() - self.last_progress > PROBE_AFTER_S
        return self.queue.drop_late(batch, self._ewma_compute_s or 0.0, probe)


class BatchWindow:
    """``batch_window``: the short hold after a batch, so closed-loop clients just
    answered join the next batch instead of forming a cohort of their own."""

    def __init__(self, fraction: float) -> None:
        self.fraction = fraction
        self._handle: asyncio.TimerHandle | None = None

    @property
    def is_open(self) -> bool:
        return self._handle is not None

    def open(self, loop: asyncio.AbstractEventLoop, compute_s: float | None,
             on_end: Callable[[], None]) -> None:
        if self.fraction > 0 and compute_s:
            self._handle = loop.call_later(self.fraction * compute_s, on_end)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class InlinePolicy:
    """``inline_max_ms``: when a lone request may be computed on the event loop itself."""

    def __init__(self, max_ms: float) -> None:
        self.max_s = max_ms / 1000.0
        #: the model's say (False while a swap or a check may use the backend elsewhere)
        self.allowed: Callable[[], bool] = lambda: True

    def wants(self, batch: list[Pending], waiting: int, compute_s: float | None) -> bool:
        p = batch[0]
        return (self.max_s > 0 and len(batch) == 1 and not waiting and compute_s is not None
                and compute_s <= self.max_s and p.quiet is not None and p.quiet()
                and self.allowed())
