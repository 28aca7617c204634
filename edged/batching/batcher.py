"""Per-model dynamic batching with bounded queues, deadlines, priorities and streams.

How a batch forms: the one place a batch starts is ``_kick``, called when a request
arrives, when a batch completes, when a swap's pause ends and when a policy's hold comes
due; the one exception is the express lane (``submit``: a lone request on an idle model
that the policy computes inline is computed at once, never queued). ``_kick`` asks the
model's policy (``edged.batching.policy``: at once, ``max_delay_ms``, ``batch_window``)
and the governor's rate cap (``throttle``) whether the next batch may start; if so it
takes up to ``BatchCap.value`` compatible rows from the queue (``queue``), answers
those that could no longer meet their deadline, and hands the batch to the model's
worker thread (or, under ``inline_max_ms``, computes it on the loop).
While the backend computes, new requests accumulate: the next batch starts from the
completion callback, before this one's replies are sent. So latency at low load is that
of one inference and throughput at high load that of full batches.

Everything here runs on the event loop thread except ``compute``, which runs on the
model's single worker thread (one batch at a time per model: the runtime already uses
every core, and a second concurrent batch would only add contention). No coroutine
waits on a request's behalf: a hold is one timer on the loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

from edged.batching.cap import BatchCap
from edged.batching.policy import Moment, Policy
from edged.batching.queue import Compute, Pending, PerRequest, RequestQueue, Result
from edged.batching.throttle import Throttle
from edged.errors import EdgedError, Unavailable

#: with no batch started or finished for this long, the compute-time estimate is re-learnt
#: from one request even if it says the request would be late
PROBE_AFTER_S = 1.0

log = logging.getLogger("edged.batching")


class Batcher:
    """Queue + dispatch for one model.

    ``compute(batch) -> (variant_name, outputs_per_request, compute_seconds)`` is called
    on ``executor``; it raises EdgedError (or anything) to fail just that batch.
    """

    def __init__(
        self,
        model: str,
        cap: BatchCap,
        max_queue: int,
        policy: Policy,
        compute: Compute,
        executor: Executor,
        on_batch: Callable[[str, int, float, list[Pending]], None] | None = None,
    ) -> None:
        self.model = model
        self.cap = cap
        self.policy = policy
        self.compute = compute
        self.executor = executor
        self.on_batch = on_batch
        self.throttle = Throttle()
        self.queue = RequestQueue(model, max_queue, self.throttle)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._paused = False
        self._completing = False
        self._hold: asyncio.TimerHandle | None = None
        self._ewma_compute_s: float | None = None
        self.busy = False  # a batch is computing
        #: callers of ``idle()`` waiting for the batch computing now (none, nearly always:
        #: a swap waits here; a batch that completes wakes them)
        self._idle_waiters: list[asyncio.Future[None]] = []
        self._running: list[Pending] = []
        self.last_progress = time.monotonic()  # watchdog: when the worker last moved

    @property
    def depth(self) -> int:
        return self.queue.depth

    def predicted_latency_s(self) -> float:
        """Seconds until a request queued now would be answered: the batches ahead of it
        (the one computing included) and its own, at the EWMA compute time."""
        est = self._ewma_compute_s or 0.0
        return (self.depth // self.cap.value + (1 if self.busy else 0) + 1) * est

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()

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
        self._cancel_hold()

    def pause(self) -> None:
        """Hold batches (requests keep queueing) while a drain-then-swap runs."""
        self._paused = True

    def resume(self) -> None:
        self._paused = False
        self._kick()

    async def idle(self) -> None:
        """Wait until no batch is computing."""
        while self.busy:
            assert self._loop is not None
            fut = self._loop.create_future()
            self._idle_waiters.append(fut)
            await fut

    def fail_all(self, err: EdgedError) -> None:
        """Answer every queued request *and* the batch computing now with ``err``.

        A running batch cannot be aborted; its requests are answered now and its late
        result is dropped (``finish`` is a no-op on answered requests)."""
        self.queue.fail_all(err)
        for p in self._running:
            self.queue.finish(p, err)
        self._cancel_hold()

    def submit(self, p: Pending) -> None:
        """Queue ``p`` (or raise why not) and start a batch if the backend is free.

        The express lane: a lone request on an idle model (nothing computing, nothing
        queued, no rate cap or shedding, its deadline within reach) that the policy would
        compute inline is computed at once, without being queued and taken back: the
        thread that received it computes it and sends its reply (docs/architecture.md,
        "The hot path")."""
        if not self.busy and not self.queue.depth and not self._paused and self._loop:
            throttle = self.throttle
            if (throttle.max_rate_hz is None and throttle.shed_priority_above is None
                    and self.queue.accepting):
                now = time.monotonic()
                m = self._moment(now)
                late = p.deadline is not None and now + (m.compute_s or 0.0) > p.deadline
                if not late and self.policy.hold_until(m) <= now and self.policy.inline([p], m):
                    self._compute_inline([p])
                    return
        self.queue.put(p)
        self._kick()

    # -- the one place a batch starts -------------------------------------------------------

    def _kick(self) -> None:
        """Start the next batch if the backend is free and the policy and rate cap allow;
        else, if they only ask to wait, look again when the wait is over."""
        if self.busy or self._paused or self._loop is None:
            return
        while self.depth:
            batch = self.next_batch()
            if batch is None:
                return  # held: a timer (or the next arrival) looks again
            if not batch:
                continue  # every request taken was past its deadline: try the rest
            if not self._completing and self.policy.inline(batch,
                                                           self._moment(time.monotonic())):
                self._compute_inline(batch)
            else:
                self._dispatch(batch)
            return

    def next_batch(self) -> list[Pending] | None:
        """The batch to start now (possibly empty, when every request taken was late),
        or None when the policy or the rate cap says to wait (a timer is then set)."""
        now = time.monotonic()
        m = self._moment(now)
        until = max(self.policy.hold_until(m), self.throttle.next_slot(now))
        if until > now:
            self._hold_until(until)
            return None
        self._cancel_hold()
        self.throttle.use_slot(now)
        batch: list[Pending] = []
        cap = m.cap if self.cap.multiple == 1 else self.cap.take(self.queue.ready_rows(m.cap))
        self.queue.take(batch, 0, cap)
        # Nothing computed for a while: let one request through to re-learn the time.
        probe = now - self.last_progress > PROBE_AFTER_S
        return self.queue.drop_late(batch, self._ewma_compute_s or 0.0, probe)

    def _moment(self, now: float) -> Moment:
        return Moment(now, self.queue, self.cap.value, self._ewma_compute_s)

    def _hold_until(self, until: float) -> None:
        loop = self._loop
        assert loop is not None
        at = loop.time() + (until - time.monotonic())
        if self._hold is not None:
            if abs(self._hold.when() - at) < 1e-4:
                return
            self._hold.cancel()
        self._hold = loop.call_at(at, self._hold_due)

    def _hold_due(self) -> None:
        self._hold = None
        self._kick()

    def _cancel_hold(self) -> None:
        if self._hold is not None:
            self._hold.cancel()
            self._hold = None

    # -- computing and completing ----------------------------------------------------------

    def _compute_inline(self, batch: list[Pending]) -> None:
        """Compute on the loop thread (``inline_max_ms``); finish as a worker batch does."""
        start = self._begin(batch)
        try:
            done = self.compute(batch)
        except BaseException as e:
            self._complete(batch, start, None, e)
        else:
            self._complete(batch, start, done, None)

    def _begin(self, batch: list[Pending]) -> float:
        self.busy = True
        self._running = batch
        start = self.last_progress = time.monotonic()
        return start

    def _dispatch(self, batch: list[Pending]) -> None:
        loop = self._loop
        assert loop is not None
        start = self._begin(batch)
        fut = self.executor.submit(self.compute, batch)
        fut.add_done_callback(
            lambda f: loop.call_soon_threadsafe(self._computed, batch, start, f))

    def _computed(self, batch: list[Pending], start: float, f: Future[Any]) -> None:
        """Back on the loop from the worker with the batch's future."""
        e = f.exception()
        self._complete(batch, start, None if e is not None else f.result(), e)

    def _complete(self, batch: list[Pending], start: float,
                  done: tuple[str, list[PerRequest], float] | None,
                  failure: BaseException | None) -> None:
        """On the loop: start the next batch first, then answer this one (``done``: what
        ``compute`` returned; else ``failure``: what it raised)."""
        self.busy = False
        self._running = []
        now = self.last_progress = time.monotonic()
        if self._idle_waiters:
            waiters, self._idle_waiters = self._idle_waiters, []
            for w in waiters:
                if not w.done():
                    w.set_result(None)
        err: EdgedError | None = None
        if failure is not None:
            if isinstance(failure, EdgedError):
                err = failure
            else:  # backend bug: fail this batch only, keep serving
                log.error("model %s: batch of %d failed", self.model, len(batch),
                          exc_info=failure)
                err = EdgedError(f"inference failed: {type(failure).__name__}: {failure}")
        else:
            assert done is not None
            variant, outs, compute_s = done
            a = 0.2
            self._ewma_compute_s = compute_s if self._ewma_compute_s is None else (
                (1 - a) * self._ewma_compute_s + a * compute_s)
        self.policy.completed(self._moment(now), len(batch))
        self._completing = True  # this batch's replies are not sent yet: no inline compute
        try:
            self._kick()  # the backend never waits for replies to be sent
        finally:
            self._completing = False
        if err is not None:
            for p in batch:
                self.queue.finish(p, err)
            return
        n = sum(p.rows for p in batch)
        if self.on_batch is not None:
            self.on_batch(variant, n, compute_s, batch)
        for p, (out, det) in zip(batch, outs, strict=True):
            self.queue.finish(p, Result(variant, out, start - p.arrival, compute_s, n, det))
