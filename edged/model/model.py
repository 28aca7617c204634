"""One served model, a thin owner: prepare -> Prepared, submit, swap_to, drain.

The parts are elsewhere, each with one job: the batcher forms batches
(``edged.batching.batcher``), the live variant and its hot swap are ``live_variant.LiveVariant``
(checked before going live by ``edged.verify``), the request contract is
``contract.InputContract``, stream limits ``streams.StreamAdmission``, what each computed
batch leaves behind (metrics, usage) ``batch_record.BatchRecord``, and what happens
to the outputs is the model's *head* (``edged.model.heads``: plain tensors, or
``edged.model.detect_head`` for a detector), chosen at load from the config like a backend.
The server talks to a model only through the methods here (and reads its status entry
through ``status.describe_model``); the batcher and the loaded backend are its own business.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from edged.backends.base import TensorSpec, run_batch
from edged.batching import choose_policy
from edged.batching.batcher import Batcher
from edged.batching.cap import BatchCap
from edged.batching.inline import Inline
from edged.batching.queue import Pending, PerRequest, Respond
from edged.config.models import ModelConfig
from edged.config.server import Limits
from edged.errors import EdgedError, Unavailable
from edged.host.thread_names import name_os_thread
from edged.metrics import Metrics
from edged.model.batch_record import BatchRecord
from edged.model.contract import InputContract, Prepared
from edged.model.heads import open_head
from edged.model.live_variant import LiveVariant
from edged.model.open import Loaded
from edged.model.request import Request
from edged.model.streams import StreamAdmission
from edged.model.usage import ModelUsage
from edged.preprocess.preprocessor import Preprocessor
from edged.verify.verifier import Verifier


class Model:
    """One configured model: queue, worker thread, live variant, head and contract."""

    def __init__(self, cfg: ModelConfig, metrics: Metrics, limits: Limits,
                 power_w: Callable[[], float | None] | None = None,
                 swap_headroom_bytes: int = 64 << 20) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self.limits = limits
        self.preprocessor = Preprocessor(cfg.preprocess) if cfg.preprocess else None
        self.head = open_head(cfg, metrics, self.preprocessor)
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"edged-{cfg.name}",
                                           initializer=name_os_thread)
        self.cap = BatchCap(cfg.max_batch_size)
        policy = choose_policy(cfg.max_delay_ms, cfg.batch_window, cfg.inline_max_ms)
        self._batcher = Batcher(cfg.name, self.cap, cfg.max_queue, policy, self._compute,
                                self.executor)
        self.verifier = Verifier(cfg, self.preprocessor)
        self.live = LiveVariant(cfg, metrics, self.head, self.verifier, self._batcher,
                                self.cap, self.executor, swap_headroom_bytes)
        if isinstance(policy, Inline):
            # Inline compute (the loop thread) never meets a swap or a check on the worker.
            policy.allowed = lambda: not self.swapping and not self.live.checking
        self.streams = StreamAdmission(cfg.name, metrics, cfg.max_streams, cfg.stream_idle_s,
                                       cfg.max_stream_fps)
        self._batch_buffers = BatchBuffers(cfg.max_batch_size)
        self.usage = ModelUsage()  # duty, cost per row, deadline use: the governor's inputs
        self._batcher.queue.on_deadline = self.usage.answered
        self._batches = BatchRecord(cfg.name, metrics, self._batcher.queue, self.usage, power_w)
        self._batches.rungs(cfg)
        self._batcher.on_batch = self._batches.computed
        self._m_queue_depth = self._batches.queue_depth  # set per request: looked up once
        self._later = metrics.later.add  # ... and applied after the reply
        self.shadow: Any = None  # a candidate version's (``delivery.shadow``): never delays
        #: requests admitted to this model and not yet queued or answered (a frame still
        #: being decoded off the event loop; ``edged.protocols.admission`` counts them)
        self._admitted = 0

    @property
    def variant_names(self) -> list[str]:
        return [v.name for v in self.cfg.variants]

    @property
    def active_index(self) -> int | None:
        return self.live.loaded.index if self.live.loaded else None

    @property
    def active_variant(self) -> str:
        return self.live.loaded.config.name if self.live.loaded else ""

    @property
    def state(self) -> str:
        return self.live.state

    @property
    def error(self) -> str | None:
        return self.live.error

    @property
    def last_swap(self) -> dict[str, Any] | None:
        return self.live.record.last_swap

    @property
    def ready(self) -> bool:
        return self.live.state == "ready" and self.live.loaded is not None

    @property
    def swapping(self) -> bool:
        return self.live.target is not None

    @property
    def inputs(self) -> list[TensorSpec]:
        return self.contract.inputs if self.contract else []

    @property
    def outputs(self) -> list[TensorSpec]:
        return self.contract.outputs if self.contract else []

    @property
    def depth(self) -> int:
        return self._batcher.depth

    @property
    def idle_s(self) -> float:
        """Seconds since this model last computed a batch (infinite: never)."""
        last = self._batches.last
        return float("inf") if last is None else time.monotonic() - last

    @property
    def detects(self) -> bool:
        """It answers with boxes (a ``detections`` reply entry)."""
        return self.cfg.postprocess is not None

    def check_ready(self) -> Loaded:
        """The active variant, or UNAVAILABLE naming the model's state (and why)."""
        loaded = self.live.loaded
        if not self.ready or loaded is None:
            detail = f": {self.error}" if self.error else ""
            raise Unavailable(f"model {self.name!r} is {self.state}{detail}")
        return loaded

    def predicted_latency_s(self) -> float:
        """Seconds until a request submitted now would be answered (offload asks)."""
        return self._batcher.predicted_latency_s()

    def finish_remote(self, prepared: Prepared, outs: dict[str, np.ndarray]) -> PerRequest:
        """One request's outputs computed elsewhere (offload), finished by this model's
        head as a local batch's would be: the asked outputs, a detector's boxes."""
        loaded = self.check_ready()
        assert self.contract is not None
        p = Pending(feeds=prepared.feeds, rows=prepared.rows, key=prepared.key,
                    respond=lambda *_: None, outputs=prepared.outputs, meta=prepared.meta,
                    stream=prepared.stream)
        return self.head.split([p], loaded.post, outs, self.contract.output_names)[0]

    def stuck(self, now: float, stall_s: float) -> bool:
        """A batch has been computing for longer than ``stall_s`` (the watchdog asks)."""
        return self._batcher.busy and now - self._batcher.last_progress > stall_s

    def set_throttle(self, max_batch_size: int | None, max_rate_hz: float | None,
                     shed_priority_above: int | None, reason: str) -> None:
        """What the governor allows from the next batch on."""
        self.cap.throttled = max_batch_size
        self._batcher.throttle.set(max_rate_hz, shed_priority_above, reason)

    async def load(self, index: int = 0) -> None:
        """Load the variant at ``index`` (0 = heaviest) as the first active variant."""
        self._batcher.start()
        await self.live.load(index, self._bind)

    def _bind(self, loaded: Loaded) -> InputContract:
        b = loaded.backend
        return InputContract(self.name, list(b.inputs), list(b.outputs), self.preprocessor,
                             self.limits, self.cfg.max_batch_size)

    @property
    def contract(self) -> InputContract | None:
        """What the first variant promised clients (None until it loaded)."""
        return self.live.contract

    def add_rungs(self, cfg: ModelConfig) -> bool:
        """Take ``cfg``'s ladder in place if it is this one with rungs below, else False
        (``live_variant.LiveVariant.add_rungs``)."""
        if not self.live.add_rungs(cfg):
            return False
        self.cfg = cfg
        self._batches.rungs(cfg)
        return True

    async def swap_to(self, index: int, reason: str) -> bool:
        """Make variant ``index`` active; on any failure stay on the current one
        (``live_variant.LiveVariant.swap_to`` says how)."""
        return await self.live.swap_to(index, reason)

    def prepare(self, req: Request) -> Prepared:
        """Validate a native request against the model and build its input tensors."""
        loaded = self.check_ready()
        assert self.contract is not None
        return self.contract.prepare(req, self.head.begin(loaded.post, req.options))

    def prepare_frame(self, frame: np.ndarray, color: str, options: dict[str, Any],
                      stream: str | None = None) -> Prepared:
        """A uint8 frame in ``color`` handed over whole: Frigate's frame, a pipeline's
        frame (with its ``stream``, for track ids) or crop; it batches with native raw
        frames of the same size."""
        loaded = self.check_ready()
        assert self.contract is not None
        return self.contract.prepare_frame(frame, color, self.head.begin(loaded.post, options),
                                           stream)

    def needs_thread(self, req: Request) -> bool:
        """Image decoding/resizing is heavy enough to keep off the event loop."""
        return self.contract is not None and self.contract.needs_thread(req)

    def submit(self, prepared: Prepared, respond: Respond, *, arrival: float, priority: int = 1,
               deadline: float | None = None, quiet: Callable[[], bool] | None = None) -> None:
        """Queue a prepared request; ``respond`` gets its outcome exactly once. Raises
        EdgedError (and does not call ``respond``) when it cannot be accepted."""
        p = Pending(feeds=prepared.feeds, rows=prepared.rows, key=prepared.key,
                    respond=respond, priority=priority,
                    stream=prepared.stream, deadline=deadline, outputs=prepared.outputs,
                    meta=prepared.meta, arrival=arrival, max_fps=prepared.max_fps,
                    quiet=quiet)
        if p.stream is not None:
            self.streams.admit(p)
        try:
            self._batcher.submit(p)
        finally:
            self._later((self._m_queue_depth, self._batcher.depth))

    def detections_header(self, detections: np.ndarray | None = None) -> dict[str, Any]:
        """``columns`` and ``labels`` for a reply's detections (empty for a tensor head)."""
        return self.head.reply_header(self.live.loaded.post if self.live.loaded else None,
                                      detections)

    def _compute(self, batch: list[Pending]) -> tuple[str, list[PerRequest], float]:
        loaded = self.live.loaded
        if loaded is None or self.contract is None:
            raise Unavailable(f"model {self.name!r} has no loaded variant")
        t0 = time.perf_counter()
        total = sum(p.rows for p in batch)
        if total > 1 and loaded.batch is not None:
            loaded = loaded.batch  # a pair's batch member (edged.model.pair)
        self.head.before_compute(batch, loaded.post)
        if len(batch) == 1:
            feeds = {k: np.ascontiguousarray(a) for k, a in batch[0].feeds.items()}
        else:
            feeds = {k: self._batch_buffers.stack(k, [p.feeds[k] for p in batch], total)
                     for k in batch[0].feeds}
        self.verifier.record(feeds)
        outs = run_batch(loaded.backend, feeds)
        compute_s = time.perf_counter() - t0
        for name in self.contract.output_names:
            a = outs.get(name)
            if a is None or a.ndim == 0 or a.shape[0] < total:
                got = "nothing" if a is None else f"shape {list(a.shape)}"
                raise EdgedError(f"variant {loaded.config.name!r} returned {got} for output "
                                 f"{name!r}; expected {total} rows")
        results = self.head.split(batch, loaded.post, outs, self.contract.output_names)
        shadow = self.shadow
        if shadow is not None:
            shadow.offer(feeds, outs, total, compute_s, self._batcher.depth == 0)
        return loaded.config.name, results, compute_s

    def admitted(self) -> None:
        """A request was admitted to this model (it will be queued or answered)."""
        self._admitted += 1

    def settled(self) -> None:
        """An admitted request was queued here, or answered without being queued."""
        self._admitted = max(0, self._admitted - 1)

    async def drain(self, timeout: float) -> None:
        """Stop accepting once what was admitted is queued; queued requests finish within
        ``timeout``, the rest UNAVAILABLE.

        Why wait for the admitted ones first: a model replaced while serving (a reload, a
        promoted version, a model Frigate sent) is let go the moment the registry points
        at its successor, but a frame admitted to it just before may still be decoding on
        a thread; refusing it then would fail a request across a switch that is meant to
        fail none. So the replaced model takes it, computes it and only then closes."""
        end = time.monotonic() + timeout
        while self._admitted > 0 and time.monotonic() < end:
            await asyncio.sleep(0.005)
        await self._batcher.drain(max(0.0, end - time.monotonic()))

    async def close(self) -> None:
        await self._batcher.stop()
        await self.live.close()
        self.executor.shutdown(wait=False)


class BatchBuffers:
    """One input buffer per (input, dtype, item shape), ``max_rows`` deep, reused by every
    batch: requests are copied into it instead of ``np.concatenate`` allocating (and the
    kernel zeroing) a fresh multi-megabyte array per batch. Used on the model's worker
    thread only, one batch at a time, and the backend is done with it when ``run``
    returns, so one buffer per kind is enough."""

    def __init__(self, max_rows: int) -> None:
        self.max_rows = max_rows
        self._bufs: dict[tuple[str, str, tuple[int, ...]], np.ndarray] = {}

    def stack(self, name: str, parts: list[np.ndarray], rows: int) -> np.ndarray:
        first = parts[0]
        if rows > self.max_rows:
            return np.concatenate(parts)
        key = (name, first.dtype.str, first.shape[1:])
        buf = self._bufs.get(key)
        if buf is None:
            if len(self._bufs) >= 8:  # item shapes vary (dynamic dims): keep a few
                self._bufs.clear()
            buf = self._bufs[key] = np.empty((self.max_rows, *first.shape[1:]), first.dtype)
        return np.concatenate(parts, out=buf[:rows])
