"""Models, their variant ladders, and hot swaps between variants.

A swap loads and warms the new variant *beside* the old one, checks it on a golden
input, then switches the pointer the batcher reads per batch. The old variant is
closed on the model's worker thread *after* whatever batch it is computing, so a
request always finishes on the variant that took it and none fails because of a
swap. When memory is too tight to hold both, the batcher is paused (requests keep
queueing), the old variant is closed, the new one loaded, and batching resumes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import psutil

from edged.backends import backend_module
from edged.backends.base import Backend, TensorSpec, zero_feeds
from edged.batcher import Batcher, Pending
from edged.config import ModelConfig, VariantConfig
from edged.errors import ArtifactError, EdgedError, InvalidArgument, NotFound, Unavailable
from edged.metrics import Metrics
from edged.preprocess import Preprocessor
from edged.protocol import InputMeta, Limits, Request

log = logging.getLogger("edged.registry")


@dataclass
class Loaded:
    index: int
    config: VariantConfig
    backend: Backend
    load_s: float
    batch_cap: int | None = None  # from auto_batch profiling; None = max_batch_size


def load_variant(v: VariantConfig, max_batch_size: int) -> tuple[Backend, float]:
    """Open and warm up one artifact (blocking; call from a thread)."""
    t0 = time.perf_counter()
    mod = backend_module(v.backend)
    backend = mod.open_backend(v.path, v.options, max_batch_size)
    try:
        backend.warmup(1)
        if max_batch_size > 1:
            sizes = backend.batch_sizes
            backend.warmup(min(max_batch_size, sizes[-1]) if sizes else max_batch_size)
    except Exception as e:
        backend.close()
        raise ArtifactError(f"{v.path}: warm-up run failed: {type(e).__name__}: {e}") from None
    return backend, time.perf_counter() - t0


def profile_batch_sizes(backend: Backend, max_batch_size: int,
                        budget_s: float = 0.5) -> tuple[int, dict[int, float]]:
    """Rows/s at each batch size up to the max, and the smallest size within 5% of the best.

    Why: on a small CPU a bigger batch is not always faster per row (MobileNetV2 on 2
    cores runs fewer images/s at batch 2-7 than at 1), so the batcher should not fill
    batches the hardware does not reward. Measured per variant, at load, on this device.
    """
    sizes = sorted({*(1 << i for i in range(max_batch_size.bit_length())), max_batch_size})
    if backend.batch_sizes:
        sizes = [b for b in backend.batch_sizes if b <= max_batch_size] or [1]
    per_size = budget_s / len(sizes)
    rates: dict[int, float] = {}
    for bs in sizes:
        feeds = zero_feeds(backend.inputs, bs)
        backend.run(feeds)
        n, t0 = 0, time.perf_counter()
        while True:
            backend.run(feeds)
            n += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= per_size or n >= 20:
                break
        rates[bs] = bs * n / elapsed
    best = max(rates.values())
    chosen = min(b for b, r in rates.items() if r >= 0.95 * best)
    return chosen, rates


def check_contract(name: str, want: list[TensorSpec], got: list[TensorSpec], what: str) -> None:
    """A variant must accept and return what clients of the model were promised."""
    got_by = {s.name: s for s in got}
    for w in want:
        g = got_by.get(w.name)
        if g is None:
            raise ArtifactError(f"variant {name!r} has no {what} named {w.name!r} "
                                f"(it has {', '.join(got_by) or 'none'})")
        if g.dtype != w.dtype or len(g.shape) != len(w.shape):
            raise ArtifactError(f"variant {name!r} {what} {w.name!r} is {g.dtype} "
                                f"{list(g.shape)}; the model's contract is {w.dtype} "
                                f"{list(w.shape)}")


class ModelRuntime:
    """One configured model: its queue, worker thread, active variant and state."""

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
        self.batcher = Batcher(cfg.name, cfg.max_batch_size, cfg.max_queue, cfg.max_delay_ms,
                               self._compute, self.executor, self._on_batch)
        self._swap_lock = asyncio.Lock()
        self.swap_target: int | None = None
        self.last_swap: dict[str, Any] | None = None
        metrics.queue_capacity.labels(cfg.name).set(cfg.max_queue)
        metrics.model_ready.labels(cfg.name).set(0)
        # Labelled series looked up once, not per request (.labels() costs µs each).
        self.m_queue_depth = metrics.queue_depth.labels(cfg.name)
        self.m_request_duration = metrics.request_duration.labels(cfg.name)
        self.m_queue_duration = metrics.queue_duration.labels(cfg.name)
        self.m_batch_size = metrics.batch_size.labels(cfg.name)
        self._m_variant: dict[str, tuple[Any, Any]] = {}

    # -- loading ------------------------------------------------------------------------
    async def load(self, index: int = 0) -> None:
        """Load the variant at ``index`` (0 = heaviest) as the first active variant."""
        self.batcher.start()
        v = self.cfg.variants[index]
        try:
            loaded = await asyncio.to_thread(self._open, index)
        except Exception as e:
            self._load_failed(v, e)
            raise
        backend = loaded.backend
        self.inputs, self.outputs = list(backend.inputs), list(backend.outputs)
        self._output_names = {o.name for o in self.outputs}
        self._pick_preprocessed_input()
        self._activate(loaded)
        self.state = "ready"
        self.metrics.model_ready.labels(self.name).set(1)

    def _open(self, index: int) -> Loaded:
        """Load, warm and (with auto_batch) profile one variant; blocking."""
        v = self.cfg.variants[index]
        backend, secs = load_variant(v, self.cfg.max_batch_size)
        cap = None
        if self.cfg.auto_batch and self.cfg.max_batch_size > 1:
            try:
                cap, rates = profile_batch_sizes(backend, self.cfg.max_batch_size)
            except Exception:
                backend.close()
                raise
            log.info("auto_batch model=%s variant=%s rows_per_s=%s batch_cap=%d", self.name,
                     v.name, ",".join(f"{b}:{r:.0f}" for b, r in rates.items()), cap)
        return Loaded(index, v, backend, secs, cap)

    def _load_failed(self, v: VariantConfig, e: Exception) -> None:
        self.metrics.model_loads.labels(self.name, v.name, "error").inc()
        msg = str(e) if isinstance(e, EdgedError) else f"{type(e).__name__}: {e}"
        if self.active is None:
            self.state = "failed"
            self.error = msg
        log.error("load failed model=%s variant=%s error=%s", self.name, v.name, msg)

    def _activate(self, loaded: Loaded) -> None:
        self.active = loaded
        self.batcher.tuned_cap = loaded.batch_cap
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
            self.swap_target = index
            t0 = time.perf_counter()
            try:
                size = v.path.stat().st_size if v.path.exists() else 0
                need = 2 * size + self.swap_headroom_bytes
                tight = psutil.virtual_memory().available < need
                if tight:
                    loaded = await self._swap_drained(cur, v, index)
                else:
                    loaded = await asyncio.to_thread(self._open, index)
                    self._check_new(v, loaded.backend)
                    self._activate(loaded)
                    # Runs on the worker thread after the batch in flight (if any).
                    self.executor.submit(cur.backend.close)
            except Exception as e:
                self._load_failed(v, e)
                self.last_swap = {"to": v.name, "reason": reason, "ok": False,
                                  "error": str(e), "at": time.time()}
                return False
            finally:
                self.swap_target = None
            ms = (time.perf_counter() - t0) * 1000
            self.metrics.swaps.labels(self.name, cur.config.name, v.name,
                                      _reason_label(reason)).inc()
            self.last_swap = {"from": cur.config.name, "to": v.name, "reason": reason, "ok": True,
                              "ms": round(ms, 1), "drained": tight, "at": time.time()}
            log.info("variant swap model=%s from=%s to=%s reason=%r drained=%s swap_ms=%.0f",
                     self.name, cur.config.name, v.name, reason, tight, ms)
            return True

    async def _swap_drained(self, cur: Loaded, v: VariantConfig, index: int) -> Loaded:
        self.batcher.pause()
        try:
            await self.batcher.idle()
            await asyncio.get_running_loop().run_in_executor(self.executor, cur.backend.close)
            try:
                loaded = await asyncio.to_thread(self._open, index)
                self._check_new(v, loaded.backend)
            except Exception:
                # Put the old variant back: reload it the same way.
                self.active = await asyncio.to_thread(self._open, cur.index)
                self.batcher.tuned_cap = self.active.batch_cap
                raise
            self._activate(loaded)
            return loaded
        finally:
            self.batcher.resume()

    def _check_new(self, v: VariantConfig, backend: Backend) -> None:
        """Golden check: contract matches, and a zero input gives finite outputs."""
        try:
            check_contract(v.name, self.inputs, backend.inputs, "input")
            check_contract(v.name, self.outputs, backend.outputs, "output")
            outs = backend.run(zero_feeds(self.inputs, 1))
            for o in self.outputs:
                a = outs.get(o.name)
                if a is None:
                    raise ArtifactError(f"variant {v.name!r} returned no output {o.name!r}")
                if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
                    raise ArtifactError(f"variant {v.name!r} gives non-finite {o.name!r} on the "
                                        "golden input")
        except Exception:
            backend.close()
            raise

    # -- requests -----------------------------------------------------------------------
    def prepare(self, req: Request) -> tuple[dict[str, np.ndarray], int, tuple[Any, ...]]:
        """Validate a request against the model and build its input tensors.

        Raw tensors that match an input (apart from batch) go through untouched; an
        encoded image or a uint8 HxW(xC) frame goes through the model's preprocessing.
        """
        if self.state != "ready" or self.active is None:
            detail = f": {self.error}" if self.error else ""
            raise Unavailable(f"model {self.name!r} is {self.state}{detail}")
        if req.outputs:
            unknown = [o for o in req.outputs if o not in self._output_names]
            if unknown:
                raise InvalidArgument(f"unknown output(s) {', '.join(map(repr, unknown))}; "
                                      f"model {self.name!r} has {', '.join(self._output_names)}")
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
            feeds[name] = self._tensor(i, meta, spec)
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
        return feeds, n, key

    def _tensor(self, i: int, meta: InputMeta, spec: TensorSpec) -> np.ndarray:
        if meta.encoding != "raw":
            if self.preprocessor is None or spec.name != self._pre_input:
                raise InvalidArgument(f"inputs[{i}]: model {self.name!r} has no preprocessing "
                                      f"for input {spec.name!r}; send a raw tensor "
                                      f"{spec.dtype} {list(spec.shape)}")
            return self.preprocessor.from_encoded(meta.data, self.limits.max_image_pixels,
                                                  meta.encoding)
        arr = meta.data
        assert meta.dtype is not None and meta.shape is not None
        if spec.matches_item(meta.dtype, meta.shape):
            return arr
        if (self.preprocessor is not None and spec.name == self._pre_input
                and meta.dtype == np.uint8 and len(meta.shape) in (2, 3)):
            if meta.shape[0] * meta.shape[1] > self.limits.max_image_pixels:
                raise InvalidArgument(f"inputs[{i}]: frame of {meta.shape[1]}x{meta.shape[0]} "
                                      f"exceeds {self.limits.max_image_pixels} pixels")
            return self.preprocessor.from_frame(arr)
        want = f"{spec.dtype} {['N' if d == -1 else d for d in spec.shape]}"
        hint = " or a uint8 HxWxC image frame / JPEG / PNG" if self.preprocessor else ""
        raise InvalidArgument(f"inputs[{i}] ({spec.name!r}): got {meta.dtype} "
                              f"{list(meta.shape)}; model {self.name!r} expects {want}{hint}")

    def needs_thread(self, req: Request) -> bool:
        """Image decoding/resizing is heavy enough to keep off the event loop."""
        return any(m.encoding != "raw" or (m.dtype == np.uint8 and m.shape is not None
                                           and len(m.shape) in (2, 3)) for m in req.inputs)

    # -- the worker-thread side ---------------------------------------------------------
    def _compute(self, batch: list[Pending]) -> tuple[str, list[list[tuple[str, np.ndarray]]],
                                                        float]:
        loaded = self.active
        if loaded is None:
            raise Unavailable(f"model {self.name!r} has no loaded variant")
        backend = loaded.backend
        t0 = time.perf_counter()
        total = sum(p.rows for p in batch)
        if len(batch) == 1:
            feeds = {k: np.ascontiguousarray(a) for k, a in batch[0].feeds.items()}
        else:
            feeds = {k: np.concatenate([p.feeds[k] for p in batch]) for k in batch[0].feeds}
        sizes = backend.batch_sizes
        if sizes:
            target = next((s for s in sizes if s >= total), None)
            if target is None:
                raise InvalidArgument(f"{total} rows exceed the largest compiled batch size "
                                      f"{sizes[-1]} of variant {loaded.config.name!r}")
            if target > total:
                feeds = {k: np.concatenate([a, np.zeros((target - total, *a.shape[1:]), a.dtype)])
                         for k, a in feeds.items()}
        outs = backend.run(feeds)
        compute_s = time.perf_counter() - t0
        for o in self.outputs:
            a = outs.get(o.name)
            if a is None or a.ndim == 0 or a.shape[0] < total:
                got = "nothing" if a is None else f"shape {list(a.shape)}"
                raise EdgedError(f"variant {loaded.config.name!r} returned {got} for output "
                                 f"{o.name!r}; expected {total} rows")
        results = []
        start = 0
        for p in batch:
            names = p.outputs or [o.name for o in self.outputs]
            results.append([(n, outs[n][start:start + p.rows]) for n in names])
            start += p.rows
        return loaded.config.name, results, compute_s

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
        self.m_batch_size.observe(rows)
        if self.power_w is not None:
            w = self.power_w()
            if w:
                self.metrics.energy.labels(self.name).inc(w * compute_s)

    # -- introspection ------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        a = self.active
        return {
            "name": self.name,
            "state": self.state,
            "error": self.error,
            "inputs": [s.to_json() for s in self.inputs],
            "outputs": [s.to_json() for s in self.outputs],
            "variants": [v.name for v in self.cfg.variants],
            "active_variant": a.config.name if a else None,
            "backend": a.config.backend if a else None,
            "device": a.backend.info.device if a else None,
            "max_batch_size": self.cfg.max_batch_size,
            "batch_cap": a.batch_cap if a else None,
            "max_queue": self.cfg.max_queue,
            "queue_depth": self.batcher.depth,
            "preprocess": bool(self.preprocessor),
            "last_swap": self.last_swap,
        }

    async def close(self) -> None:
        await self.batcher.stop()
        a = self.active
        self.active = None
        self.state = "unloaded"
        self.metrics.model_ready.labels(self.name).set(0)
        if a is not None:
            await asyncio.get_running_loop().run_in_executor(self.executor, a.backend.close)
        self.executor.shutdown(wait=False)


def _reason_label(reason: str) -> str:
    """Bounded label values: the first word of the reason (governor, operator, reload)."""
    return reason.split(":", 1)[0].split()[0] if reason else "unknown"


def unknown_model(name: str, known: list[str]) -> NotFound:
    return NotFound(f"unknown model {name!r}; this daemon serves: {', '.join(known) or 'none'}")
