"""Opening one variant of a model: load, warm, profile, and check it before it serves.

Why apart from the model: a variant is opened at start, on a governor or operator
swap and on reload, always the same way, and always on a thread (it blocks for as
long as the runtime takes). The model decides *when*; this module knows *how*.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from edged.backends import backend_module
from edged.backends.base import Backend, TensorSpec, run_batch, zero_feeds
from edged.config import VariantConfig
from edged.errors import ArtifactError

log = logging.getLogger("edged.variants")


@dataclass
class Loaded:
    """A variant that is open, warm and ready to take batches."""

    index: int  # position on the model's ladder (0 = heaviest)
    config: VariantConfig
    backend: Backend
    load_s: float
    batch_cap: int | None = None  # from auto_batch profiling; None = max_batch_size
    #: a detector variant's post-processor (edged.detect), built at load
    post: Any = None


def open_variant(model: str, index: int, v: VariantConfig, max_batch_size: int,
                 auto_batch: bool = False) -> Loaded:
    """Load, warm and (with auto_batch) profile one variant; blocking."""
    backend, secs = load_variant(v, max_batch_size)
    cap = None
    if auto_batch and max_batch_size > 1:
        try:
            cap, rates = profile_batch_sizes(backend, max_batch_size)
        except Exception:
            backend.close()
            raise
        log.info("auto_batch model=%s variant=%s rows_per_s=%s batch_cap=%d", model, v.name,
                 ",".join(f"{b}:{r:.0f}" for b, r in rates.items()), cap)
    return Loaded(index, v, backend, secs, cap)


def load_variant(v: VariantConfig, max_batch_size: int) -> tuple[Backend, float]:
    """Open and warm up one artifact (blocking; call from a thread)."""
    t0 = time.perf_counter()
    mod = backend_module(v.backend)
    backend = mod.open_backend(v.path, v.options, max_batch_size)
    try:
        backend.warmup(1)
        sizes = backend.batch_sizes
        if max_batch_size > 1 and sizes:
            # Compiled batch sizes (TVM libraries, TensorRT profiles) are slow on their
            # first run; a runtime with dynamic batch grows its buffers on first use
            # instead of holding the largest batch's memory from the start.
            backend.warmup(min(max_batch_size, sizes[-1]))
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
        run_batch(backend, feeds)
        n, t0 = 0, time.perf_counter()
        while True:
            run_batch(backend, feeds)
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


def check_candidate(v: VariantConfig, backend: Backend, inputs: list[TensorSpec],
                    outputs: list[TensorSpec]) -> None:
    """Before a variant goes live: it accepts and returns what the model promised, and a
    zero input gives finite outputs. (What it computes is checked against the reference
    by ``edged.verify``.) Closes the backend when the check fails, so a refused
    candidate leaks nothing."""
    try:
        check_contract(v.name, inputs, backend.inputs, "input")
        check_contract(v.name, outputs, backend.outputs, "output")
        outs = run_batch(backend, zero_feeds(backend.inputs, 1))  # its own sizes
        for o in outputs:
            a = outs.get(o.name)
            if a is None:
                raise ArtifactError(f"variant {v.name!r} returned no output {o.name!r}")
            if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
                raise ArtifactError(f"variant {v.name!r} gives non-finite {o.name!r} on a "
                                    "zero input")
    except Exception:
        backend.close()
        raise
