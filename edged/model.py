"""One served model: its batcher, its active variant, hot swaps, and request preparation.

A swap loads and warms the new variant *beside* the old one, checks it, then switches
the pointer the worker reads per batch. The old variant is closed on the model's
worker thread *after* whatever batch it is computing, so a request always finishes on
the variant that took it and none fails because of a swap. When memory is too tight
to hold both, the batcher is paused (requests keep queueing), the old variant is
closed, the new one loaded, and batching resumes.

The server talks to a model only through the methods here; the batcher and the
loaded backend are the model's own business.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import psutil

from edged.backends.base import TensorSpec, run_batch
from edged.batcher import Batcher, Pending, PerRequest, Result
from edged.config import Limits, ModelConfig, VariantConfig
from edged.errors import ArtifactError, Dropped, EdgedError, InvalidArgument, Unavailable
from edged.metrics import Metrics
from edged.preprocess import Preprocessor, decode_image
from edged.protocol.request import InputMeta, Request
from edged.streams import OUTCOMES, StreamTable
from edged.variants import Loaded, check_candidate, open_variant
from edged.verify.compare import VerifyRefused
from edged.verify.verifier import Opened, Reference, Verifier

log = logging.getLogger("edged.model")



class Model:
    """One configured model: queue, worker thread, active variant and state."""

    def __init__(self, cfg: ModelConfig, metrics: Metrics, limits: Limits,
                 power_w: Callable[[], float | None] | None = None,
                 swap_headroom_bytes: int = 64 << 20) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self.metrics = metrics
        self.limits = limits
        self.power_w = power_w
        self.swap_headroom_bytes = swap_headroom_bytes
        self.state = "loading"
        self.error: str | None = None
        self.active: Loaded | None = None
        self.inputs: list[TensorSpec] = []
        self.outputs: list[TensorSpec] = []
        self._output_names: set[str] = set()
        self.preprocessor = Preprocessor(cfg.preprocess) if cfg.preprocess else None
        self._pre_input: str | None = None
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"edged-{cfg.name}")
        self._batcher = Batcher(cfg.name, cfg.max_batch_size, cfg.max_queue, cfg.max_delay_ms,
                                self._compute, self.executor, self._on_batch)
        self._swap_lock = asyncio.Lock()
        self._swap_target: int | None = None
        self.last_swap: dict[str, Any] | None = None
        metrics.queue_capacity.labels(cfg.name).set(cfg.max_queue)
        metrics.model_ready.labels(cfg.name).set(0)
        # Labelled series looked up once, not per request (.labels() costs µs each).
        self._m_queue_depth = metrics.queue_depth.labels(cfg.name)
        self._m_request_duration = metrics.request_duration.labels(cfg.name)
        self._m_queue_duration = metrics.queue_duration.labels(cfg.name)
        self._m_batch_size = metrics.batch_size.labels(cfg.name)
        self._m_post = metrics.postprocess_duration.labels(cfg.name)
        self._m_dets = metrics.detections_per_frame.labels(cfg.name)
        #: a detector with several rungs keeps each queued frame, to re-fit it if a swap
        #: changes the input size (bounded by max_queue)
        self._keep_frames = cfg.postprocess is not None and len(cfg.variants) > 1
        self._m_variant: dict[str, tuple[Any, Any]] = {}
        self._streams = StreamTable(cfg.max_streams, cfg.stream_idle_s)
        self._trackers: Any = None  # edged.detect.tracking.Trackers, made on first use
        self._m_stream = {o: metrics.stream_frames.labels(cfg.name, o) for o in OUTCOMES}
        self._m_streams = metrics.streams_tracked.labels(cfg.name)
        self._batch_buffers = BatchBuffers(cfg.max_batch_size)
        self._busy_s = 0.0  # compute seconds since the last take_duty()
        self._duty_since = time.monotonic()
        self.verifier = Verifier(cfg, self.preprocessor)
        self._warming: Any = None  # the background job caching the reference's results

    # -- what the server asks -----------------------------------------------------------
    @property
    def variant_names(self) -> list[str]:
        return [v.name for v in self.cfg.variants]

    @property
    def active_index(self) -> int | None:
        return self.active.index if self.active else None

    @property
    def active_variant(self) -> str:
        return self.active.config.name if self.active else ""

    @property
    def ready(self) -> bool:
        return self.state == "ready" and self.active is not None

    @property
    def swapping(self) -> bool:
        return self._swap_target is not None

    @property
    def depth(self) -> int:
        return self._batcher.depth

    def stuck(self, now: float, stall_s: float) -> bool:
        """A batch has been computing for longer than ``stall_s`` (the watchdog asks)."""
        return self._batcher.busy and now - self._batcher.last_progress > stall_s

    def take_duty(self) -> float:
        """Fraction of the time since the last call that a batch was computing (0..1)."""
        now = time.monotonic()
        span, busy = now - self._duty_since, self._busy_s
        self._duty_since, self._busy_s = now, 0.0
        return min(1.0, busy / span) if span > 0 else 0.0

    def set_throttle(self, max_batch_size: int | None, max_rate_hz: float | None,
                     shed_priority_above: int | None, reason: str) -> None:
        """What the governor allows from the next batch on."""
        t = self._batcher.throttle
        t.max_batch_size = max_batch_size
        t.max_rate_hz = max_rate_hz
        t.shed_priority_above = shed_priority_above
        t.reason = reason

    # -- loading ------------------------------------------------------------------------
    async def load(self, index: int = 0) -> None:
        """Load the variant at ``index`` (0 = heaviest) as the first active variant.

        A variant other than the reference is checked against it first (the reference
        is opened for that and closed again); one that fails the check is not served:
        the reference is loaded instead."""
        self._batcher.start()
        try:
            loaded = await self._load_checked(index)
        except VerifyRefused:
            if index == self.verifier.reference_index:
                raise
            index = self.verifier.reference_index
            loaded = await self._load_checked(index)
        backend = loaded.backend
        self.inputs, self.outputs = list(backend.inputs), list(backend.outputs)
        self._output_names = {o.name for o in self.outputs}
        self._pick_preprocessed_input()
        self._activate(loaded)
        self.state, self.error = "ready", None
        self.metrics.model_ready.labels(self.name).set(1)
        if loaded.index == self.verifier.reference_index and len(self.cfg.variants) > 1:
            # Cache the reference's results on the other rungs' check inputs, so that a
            # swap later need not open the reference again (it may not be active then).
            spec = self._check_spec()
            self._warming = asyncio.get_running_loop().run_in_executor(
                None, self.verifier.warm, spec, self._with_reference)

    async def _load_checked(self, index: int) -> Loaded:
        v = self.cfg.variants[index]
        try:
            ref = await asyncio.to_thread(self._reference_for, index)
            if ref is None:
                return await asyncio.to_thread(self._open, index)
            return await asyncio.to_thread(self._open_checked, index, ref)
        except Exception as e:
            self._load_failed(v, e)
            raise

    def _open(self, index: int) -> Loaded:
        loaded = open_variant(self.name, index, self.cfg.variants[index],
                              self.cfg.max_batch_size, self.cfg.auto_batch)
        if self.cfg.postprocess is not None and self.cfg.preprocess is not None:
            from edged.detect.serving import build_postprocessor

            if self.cfg.postprocess.track:
                from edged.detect.tracking import require_tracker

                require_tracker()  # a model that tracks fails its load without the extra

            try:
                loaded.post = build_postprocessor(
                    self.cfg.postprocess, self.cfg.preprocess, loaded.backend,
                    loaded.config.path, self.cfg.preprocess.input)
            except Exception:
                loaded.backend.close()
                raise
        return loaded

    @property
    def detector(self) -> bool:
        return self.cfg.postprocess is not None

    def detections_header(self, detections: np.ndarray | None = None) -> dict[str, Any]:
        """``columns`` and ``labels`` for a detections reply (the count is per reply); a
        tracked reply's 7th column is ``track_id``."""
        post = self.active.post if self.active is not None else None
        if post is None:
            return {}
        h = dict(post.detections_header(np.zeros((0, 6), np.float32)))
        h.pop("count", None)
        if detections is not None and detections.ndim == 2 and detections.shape[1] == 7:
            from edged.detect.tracking import TRACK_COLUMN

            h["columns"] = [*h["columns"], TRACK_COLUMN]
        return h

    def _load_failed(self, v: VariantConfig, e: Exception) -> None:
        self.metrics.model_loads.labels(self.name, v.name, "error").inc()
        msg = str(e) if isinstance(e, EdgedError) else f"{type(e).__name__}: {e}"
        if self.active is None:
            self.state = "failed"
            self.error = msg
        log.error("load failed model=%s variant=%s error=%s", self.name, v.name, msg)

    def _activate(self, loaded: Loaded) -> None:
        self.active = loaded
        self._batcher.tuned_cap = loaded.batch_cap
        self.metrics.model_loads.labels(self.name, loaded.config.name, "ok").inc()
        self.metrics.model_load_duration.labels(self.name, loaded.config.name).set(loaded.load_s)
        self.metrics.set_active(self.name, loaded.config.name, loaded.config.backend)
        log.info("model loaded model=%s variant=%s backend=%s device=%s load_ms=%.0f",
                 self.name, loaded.config.name, loaded.config.backend,
                 loaded.backend.info.device, loaded.load_s * 1000)

    def _pick_preprocessed_input(self) -> None:
        if self.preprocessor is None:
            return
        want = self.preprocessor.cfg.input
        names = [s.name for s in self.inputs]
        if want is not None and want not in names:
            raise ArtifactError(f"model {self.name!r}: preprocess.input {want!r} is not an input "
                                f"of the model (inputs: {', '.join(names)})")
        self._pre_input = want or names[0]

    # -- hot swap -----------------------------------------------------------------------
    async def swap_to(self, index: int, reason: str) -> bool:
        """Make variant ``index`` active; on any failure stay on the current one.

        Both variants are held while the new one loads when available memory exceeds
        twice the new artifact's size plus ``swap_memory_headroom_mb``; otherwise the
        swap drains first (requests wait in the queue, none fails)."""
        async with self._swap_lock:
            cur = self.active
            if cur is None or cur.index == index or self.state != "ready":
                return False
            v = self.cfg.variants[index]
            self._swap_target = index
            t0 = time.perf_counter()
            try:
                ref = await asyncio.to_thread(self._reference_for, index)
                size = v.path.stat().st_size if v.path.exists() else 0
                need = 2 * size + self.swap_headroom_bytes
                tight = psutil.virtual_memory().available < need
                if tight:
                    loaded = await self._swap_drained(cur, v, index, ref)
                else:
                    loaded = await asyncio.to_thread(self._open_checked, index, ref)
                    self._activate(loaded)
                    # Runs on the worker thread after the batch in flight (if any).
                    self.executor.submit(cur.backend.close)
            except Exception as e:
                self._load_failed(v, e)
                self.last_swap = {"to": v.name, "reason": reason, "ok": False,
                                  "error": str(e), "at": time.time()}
                return False
            finally:
                self._swap_target = None
            ms = (time.perf_counter() - t0) * 1000
            self.metrics.swaps.labels(self.name, cur.config.name, v.name,
                                      _reason_label(reason)).inc()
            self.last_swap = {"from": cur.config.name, "to": v.name, "reason": reason, "ok": True,
                              "ms": round(ms, 1), "drained": tight, "at": time.time()}
            log.info("variant swap model=%s from=%s to=%s reason=%r drained=%s swap_ms=%.0f",
                     self.name, cur.config.name, v.name, reason, tight, ms)
            return True

    def _reference_for(self, index: int) -> Reference | None:
        """The reference's results on variant ``index``'s check inputs (None: the
        variant is the reference, or marked ``verify = false``). Blocking."""
        if self.verifier.trusted(index):
            return None
        try:
            return self.verifier.reference(index, self._check_spec(), self._with_reference)
        except VerifyRefused as e:
            self._refused(self.cfg.variants[index].name, e)
            raise

    def _with_reference(self, job: Callable[[Opened], Reference]) -> Reference:
        """Run ``job`` with the reference variant: the active one on the worker thread
        (between batches), else a copy opened for the purpose. Not on the worker."""
        ref_index = self.verifier.reference_index
        cur = self.active
        if cur is not None and cur.index == ref_index:
            return self.executor.submit(job, cur).result()
        loaded = self._open(ref_index)
        try:
            return job(loaded)
        finally:
            loaded.backend.close()

    def _check_spec(self) -> TensorSpec | None:
        """The input validation frames are made for (the preprocessed one)."""
        want = self._pre_input or (self.inputs[0].name if len(self.inputs) == 1 else None)
        return next((s for s in self.inputs if s.name == want), None)

    def _open_checked(self, index: int, ref: Reference | None) -> Loaded:
        loaded = self._open(index)
        v = loaded.config.name
        check_candidate(loaded.config, loaded.backend, self.inputs or loaded.backend.inputs,
                        self.outputs or loaded.backend.outputs)
        if ref is None:  # the reference itself, or marked verify = false
            if index == self.verifier.reference_index:
                return loaded
            self.metrics.variant_checks.labels(self.name, v, "unverified").inc()
            log.warning("unverified variant goes live model=%s variant=%s (verify = false)",
                        self.name, v)
            return loaded
        try:
            checked = self.verifier.check(loaded, ref)
        except Exception as e:
            loaded.backend.close()
            if isinstance(e, VerifyRefused):
                self._refused(v, e)
            raise
        self.metrics.variant_checks.labels(self.name, v, "ok").inc()
        log.info("verify ok model=%s variant=%s %s", self.name, v, checked)
        return loaded

    def _refused(self, variant: str, e: Exception) -> None:
        self.metrics.variant_checks.labels(self.name, variant, "refused").inc()
        log.error("verify failed: variant refused model=%s variant=%s: %s", self.name,
                  variant, e)

    async def _swap_drained(self, cur: Loaded, v: VariantConfig, index: int,
                            ref: Reference | None) -> Loaded:
        self._batcher.pause()
        try:
            await self._batcher.idle()
            await asyncio.get_running_loop().run_in_executor(self.executor, cur.backend.close)
            try:
                loaded = await asyncio.to_thread(self._open_checked, index, ref)
            except Exception:
                # Put the old variant back: reload it the same way.
                self.active = await asyncio.to_thread(self._open, cur.index)
                self._batcher.tuned_cap = self.active.batch_cap
                raise
            self._activate(loaded)
            return loaded
        finally:
            self._batcher.resume()

    # -- requests -----------------------------------------------------------------------
    def prepare(self, req: Request) -> tuple[dict[str, np.ndarray], int, tuple[Any, ...], Any]:
        """Validate a request against the model and build its input tensors.

        Raw tensors that match an input (apart from batch) go through untouched; an
        encoded image or a uint8 HxW(xC) frame goes through the model's preprocessing.
        Returns (feeds, rows, batch key, meta): ``meta`` is a detector's DetectJob.
        """
        if not self.ready:
            detail = f": {self.error}" if self.error else ""
            raise Unavailable(f"model {self.name!r} is {self.state}{detail}")
        if req.options and not self.detector:
            raise InvalidArgument(f"{', '.join(sorted(req.options))}: detection options, but "
                                  f"model {self.name!r} is not a detection model")
        if req.outputs:
            unknown = [o for o in req.outputs if o not in self._output_names]
            if unknown:
                raise InvalidArgument(f"unknown output(s) {', '.join(map(repr, unknown))}; "
                                      f"model {self.name!r} has {', '.join(self._output_names)}")
        active = self.active
        assert active is not None
        det = None
        if active.post is not None:
            from edged.detect.serving import DetectPrep

            det = DetectPrep(active.post, req.options)
        specs = {s.name: s for s in self.inputs}
        feeds: dict[str, np.ndarray] = {}
        unnamed = [s.name for s in self.inputs]
        for i, meta in enumerate(req.inputs):
            name = meta.name
            if name is None:
                if len(req.inputs) != 1 and len(self.inputs) != 1:
                    raise InvalidArgument(f"inputs[{i}] needs a name: model {self.name!r} has "
                                          f"inputs {', '.join(specs)}")
                name = self._pre_input if (self._pre_input and meta.encoding != "raw") \
                    else unnamed[min(i, len(unnamed) - 1)]
            spec = specs.get(name)
            if spec is None:
                raise InvalidArgument(f"inputs[{i}]: model {self.name!r} has no input {name!r}; "
                                      f"its inputs are {', '.join(specs)}")
            if name in feeds:
                raise InvalidArgument(f"input {name!r} given twice")
            feeds[name] = self._tensor(i, meta, spec, det)
        missing = [n for n in specs if n not in feeds]
        if missing:
            raise InvalidArgument(f"missing input(s) {', '.join(missing)} for model {self.name!r}")
        rows = {a.shape[0] for a in feeds.values()}
        if len(rows) != 1:
            raise InvalidArgument(f"inputs disagree on the batch dimension: {sorted(rows)}")
        n = rows.pop()
        if n < 1:
            raise InvalidArgument("batch dimension is 0: nothing to compute")
        if n > self.cfg.max_batch_size:
            raise InvalidArgument(f"{n} rows exceed max_batch_size {self.cfg.max_batch_size} of "
                                  f"model {self.name!r}; split the request")
        key = tuple((k, a.dtype.str, a.shape[1:]) for k, a in sorted(feeds.items()))
        job = None
        if det is not None:
            if n != 1:
                raise InvalidArgument(f"a detection request carries one image; got {n} rows "
                                      f"(send one request per frame)")
            job = det.job(self._keep_frames)
            asked = req.options.get("track")
            if asked and req.stream is None:
                raise InvalidArgument("option 'track' needs a 'stream': track ids are per stream")
            job.track = req.stream is not None and (
                asked if asked is not None else self.cfg.postprocess.track)
            if job.track:
                from edged.detect.tracking import missing_tracker

                missing = missing_tracker()  # cheap: the import itself runs on the worker
                if missing:
                    raise InvalidArgument(missing)
        return feeds, n, key, job

    def prepare_frame(self, frame: np.ndarray, color: str, options: dict[str, Any]
                      ) -> tuple[dict[str, np.ndarray], int, tuple[Any, ...], Any]:
        """A detector's uint8 HxWx3 frame from another protocol (Frigate), in ``color``.

        Same result as ``prepare`` for a native raw frame, so both batch together; a frame
        already at the model's input size gets the identity transform."""
        if not self.ready:
            detail = f": {self.error}" if self.error else ""
            raise Unavailable(f"model {self.name!r} is {self.state}{detail}")
        active = self.active
        assert active is not None and self.preprocessor is not None
        if active.post is None or self._pre_input is None or len(self.inputs) != 1:
            raise InvalidArgument(f"model {self.name!r} is not a one-input detection model")
        from edged.detect.serving import DetectPrep

        det = DetectPrep(active.post, options)
        tensor = det.fit(self.preprocessor, frame, color)
        key = ((self._pre_input, tensor.dtype.str, tensor.shape[1:]),)
        return {self._pre_input: tensor}, 1, key, det.job(self._keep_frames)

    def _tensor(self, i: int, meta: InputMeta, spec: TensorSpec,
                det: Any = None) -> np.ndarray:
        if meta.encoding != "raw":
            if self.preprocessor is None or spec.name != self._pre_input:
                raise InvalidArgument(f"inputs[{i}]: model {self.name!r} has no preprocessing "
                                      f"for input {spec.name!r}; send a raw tensor "
                                      f"{spec.dtype} {list(spec.shape)}")
            if det is not None and spec.name == self._pre_input:
                frame = decode_image(meta.data, self.limits.max_image_pixels, meta.encoding)
                return det.fit(self.preprocessor, frame, "bgr")
            return self.preprocessor.from_encoded(meta.data, self.limits.max_image_pixels,
                                                  meta.encoding)
        arr = meta.data
        assert meta.dtype is not None and meta.shape is not None
        if spec.matches_item(meta.dtype, meta.shape):
            if det is not None and spec.name == self._pre_input:
                det.identity()
            return arr
        if (self.preprocessor is not None and spec.name == self._pre_input
                and meta.dtype == np.uint8 and len(meta.shape) in (2, 3)):
            if meta.shape[0] * meta.shape[1] > self.limits.max_image_pixels:
                raise InvalidArgument(f"inputs[{i}]: frame of {meta.shape[1]}x{meta.shape[0]} "
                                      f"exceeds {self.limits.max_image_pixels} pixels")
            if det is not None:
                return det.fit(self.preprocessor, arr, None)
            return self.preprocessor.from_frame(arr)
        want = f"{spec.dtype} {['N' if d == -1 else d for d in spec.shape]}"
        hint = " or a uint8 HxWxC image frame / JPEG / PNG" if self.preprocessor else ""
        raise InvalidArgument(f"inputs[{i}] ({spec.name!r}): got {meta.dtype} "
                              f"{list(meta.shape)}; model {self.name!r} expects {want}{hint}")

    def needs_thread(self, req: Request) -> bool:
        """Image decoding/resizing is heavy enough to keep off the event loop."""
        return any(m.encoding != "raw" or (m.dtype == np.uint8 and m.shape is not None
                                           and len(m.shape) in (2, 3)) for m in req.inputs)

    def submit(self, p: Pending) -> None:
        """Queue a prepared request; raises EdgedError when it cannot be accepted."""
        if p.stream is not None:
            self._admit_stream(p)
        try:
            self._batcher.submit(p)
        finally:
            self._m_queue_depth.set(self._batcher.depth)

    def _admit_stream(self, p: Pending) -> None:
        """Count the stream's frame, apply its rate limit, count how it ends."""
        assert p.stream is not None
        fps = self.cfg.max_stream_fps or None
        if p.max_fps:
            fps = min(fps, p.max_fps) if fps else p.max_fps
        m = self._m_stream
        m["received"].inc()
        try:
            entry = self._streams.admit(p.stream, time.monotonic(), fps)
        except Dropped:
            m["dropped_rate"].inc()
            raise
        finally:
            self._m_streams.set(len(self._streams))
        respond = p.respond

        def counted(p: Pending, outcome: Result | EdgedError) -> None:
            if isinstance(outcome, Result):
                entry.served += 1
                m["served"].inc()
            elif isinstance(outcome, Dropped):  # a newer frame of the stream replaced it
                entry.dropped_stale += 1
                m["dropped_stale"].inc()
            respond(p, outcome)

        p.respond = counted

    def observe_reply(self, variant: str, total_s: float, queue_s: float) -> None:
        """Per-model request metrics for an answered request (cached series)."""
        self.variant_series(variant)[0].inc()
        self._m_request_duration.observe(total_s)
        self._m_queue_duration.observe(queue_s)
        self._m_queue_depth.set(self._batcher.depth)

    # -- the worker-thread side ---------------------------------------------------------
    def _compute(self, batch: list[Pending]) -> tuple[str, list[PerRequest], float]:
        loaded = self.active
        if loaded is None:
            raise Unavailable(f"model {self.name!r} has no loaded variant")
        t0 = time.perf_counter()
        total = sum(p.rows for p in batch)
        if loaded.post is not None:
            self._refit(batch, loaded)
        if len(batch) == 1:
            feeds = {k: np.ascontiguousarray(a) for k, a in batch[0].feeds.items()}
        else:
            feeds = {k: self._batch_buffers.stack(k, [p.feeds[k] for p in batch], total)
                     for k in batch[0].feeds}
        self.verifier.record(feeds)
        outs = run_batch(loaded.backend, feeds)
        compute_s = time.perf_counter() - t0
        for o in self.outputs:
            a = outs.get(o.name)
            if a is None or a.ndim == 0 or a.shape[0] < total:
                got = "nothing" if a is None else f"shape {list(a.shape)}"
                raise EdgedError(f"variant {loaded.config.name!r} returned {got} for output "
                                 f"{o.name!r}; expected {total} rows")
        if loaded.post is not None:
            return loaded.config.name, self._detections(batch, loaded, outs), compute_s
        results: list[PerRequest] = []
        start = 0
        for p in batch:
            names = p.outputs or [o.name for o in self.outputs]
            results.append(([(n, outs[n][start:start + p.rows]) for n in names], None))
            start += p.rows
        return loaded.config.name, results, compute_s

    def _detections(self, batch: list[Pending], loaded: Loaded,
                    outs: dict[str, np.ndarray]) -> list[PerRequest]:
        """Decode + NMS + map back, for the whole batch, here on the worker thread."""
        from edged.detect.serving import detect_batch

        t0 = time.perf_counter()
        dets = detect_batch(loaded.post, outs, [p.meta for p in batch])
        self._m_post.observe(time.perf_counter() - t0)
        results: list[PerRequest] = []
        for k, (p, d) in enumerate(zip(batch, dets, strict=True)):
            self._m_dets.observe(d.shape[0])
            if p.meta.track:
                d = self._track(p.stream, d)
            names = (p.outputs or [o.name for o in self.outputs]) if p.meta.raw else []
            results.append(([(n, outs[n][k:k + 1]) for n in names], d))
        return results

    def _track(self, stream: str, detections: np.ndarray) -> np.ndarray:
        """Worker thread only: frames reach each stream's tracker in queue order."""
        from edged.detect.tracking import Trackers

        if self._trackers is None:
            self._trackers = Trackers(self.cfg.max_streams, self.cfg.stream_idle_s)
        return self._trackers.update(stream, detections)

    def _refit(self, batch: list[Pending], loaded: Loaded) -> None:
        """Requests prepared for another input size (a swap to a rung of another
        resolution happened while they queued) are fitted again for this variant."""
        from edged.detect.serving import fit_frame, input_size

        assert self.preprocessor is not None and self.preprocessor.cfg is not None
        spec = next(s for s in loaded.backend.inputs if s.name == self._pre_input)
        size = input_size(spec, self.preprocessor.cfg)
        for p in batch:
            job = p.meta
            if job.size == size:
                continue
            if job.frame is None:
                raise Unavailable(f"the variant changed to input {size[0]}x{size[1]} while "
                                  f"this {job.size[0]}x{job.size[1]} tensor queued; send again")
            tensor, job.transform = fit_frame(loaded.post, self.preprocessor, job.frame,
                                              job.color, size)
            job.size = size
            p.feeds = {**p.feeds, self._pre_input: tensor}

    def variant_series(self, variant: str) -> tuple[Any, Any]:
        """(requests_total{status=OK}, compute_duration) for a variant, cached."""
        c = self._m_variant.get(variant)
        if c is None:
            m = self.metrics
            c = self._m_variant[variant] = (m.requests.labels(self.name, variant, "OK"),
                                            m.compute_duration.labels(self.name, variant))
        return c

    def _on_batch(self, variant: str, rows: int, compute_s: float, batch: list[Pending]) -> None:
        self.variant_series(variant)[1].observe(compute_s)
        self._m_batch_size.observe(rows)
        self._busy_s += compute_s
        if self.power_w is not None:
            w = self.power_w()
            if w:
                self.metrics.energy.labels(self.name).inc(w * compute_s)

    # -- introspection and teardown -----------------------------------------------------
    def describe(self) -> dict[str, Any]:
        a = self.active
        return {
            "name": self.name,
            "state": self.state,
            "error": self.error,
            "inputs": [s.to_json() for s in self.inputs],
            "outputs": [s.to_json() for s in self.outputs],
            "variants": self.variant_names,
            "active_variant": a.config.name if a else None,
            "backend": a.config.backend if a else None,
            "device": a.backend.info.device if a else None,
            "runtime": a.backend.info.details if a else None,  # version, threads, ...
            "max_batch_size": self.cfg.max_batch_size,
            "batch_cap": a.batch_cap if a else None,
            "max_queue": self.cfg.max_queue,
            "queue_depth": self._batcher.depth,
            "preprocess": bool(self.preprocessor),
            "streams": {"tracked": len(self._streams), "max_streams": self.cfg.max_streams,
                        "max_stream_fps": self.cfg.max_stream_fps or None,
                        "top": self._streams.top(5)},
            **({"detections": {"decoder": self.cfg.postprocess.decoder,
                               **self.detections_header()}} if self.cfg.postprocess else {}),
            "last_swap": self.last_swap,
            "verify": self.verifier.describe(),
        }

    async def drain(self, timeout: float) -> None:
        """Stop accepting; queued requests finish within ``timeout``, the rest UNAVAILABLE."""
        await self._batcher.drain(timeout)

    async def close(self) -> None:
        await self._batcher.stop()
        a = self.active
        self.active = None
        self.state = "unloaded"
        self.metrics.model_ready.labels(self.name).set(0)
        if a is not None:
            await asyncio.get_running_loop().run_in_executor(self.executor, a.backend.close)
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


def _reason_label(reason: str) -> str:
    """Bounded label values: the first word of the reason (governor, operator, reload)."""
    return reason.split(":", 1)[0].split()[0] if reason else "unknown"

