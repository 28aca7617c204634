"""Opening one variant as the daemon serves it, and what it must promise before it serves.

Why apart from ``edged.model.live_variant`` (which variant serves, and swaps): the daemon, ``edged
check --verify`` and the Frigate rung build all open a variant the same
way, loaded, warmed, profiled, with its head's part, and check it keeps the model's
contract; none of them needs the live variant's swap machinery for that.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np

from edged.backends.base import Backend, TensorSpec, run_batch, zero_feeds
from edged.config.models import ModelConfig, VariantConfig
from edged.model.artifact import artifact_digest
from edged.model.heads import Head
from edged.model.preopen import load_variant
from edged.verify.compare import VerifyRefused

log = logging.getLogger("edged.model")


@dataclass
class Loaded:
    """A variant that is open, warm and ready to take batches."""

    index: int  # position on the model's ladder (0 = heaviest)
    config: VariantConfig
    backend: Backend
    load_s: float
    batch_cap: int | None = None  # from auto_batch profiling; None = max_batch_size
    #: what the model's head keeps for this variant: a detector's post-processor (the
    #: tensor head keeps nothing)
    post: Any = None
    #: sha256 of the artifact's bytes as read before it was opened (``artifact_digest``)
    digest: str | None = None
    #: the rung's ``batch_variant``, opened and checked: it computes every batch of more
    #: than one row (None: this variant computes all; docs/compile.md, "Pairs")
    batch: Loaded | None = None

    @property
    def batches(self) -> Loaded:
        """The member that computes batches of more than one row (its cap and multiple
        are the batcher's)."""
        return self.batch or self

    def close(self) -> None:
        """Close the rung: this variant's backend and its batch member's."""
        if self.batch is not None:
            self.batch.backend.close()
        self.backend.close()


class RunsOnWorker:
    """The active variant's backend as a check uses it: each run a job of its own on the
    model's worker. Why: the check's rows as one job held every batch for all of them
    (eight frames of the person detector, ~100 ms, when a sent model was served again with
    its ladder: Frigate's frames waited past their 200 ms); row by row, a batch waits for
    one row at most."""

    def __init__(self, backend: Backend, worker: Executor) -> None:
        self._backend, self._worker = backend, worker

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self._worker.submit(self._backend.run, feeds).result()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)


def with_reference(job: Callable[[Any], Any], cfg: ModelConfig, head: Head,
                   active: Loaded | None, ref_index: int, worker: Executor) -> Any:
    """Run ``job`` with the reference variant: the ``active`` one if it is the reference,
    each of its runs on the ``worker`` thread between batches, else a copy opened for the
    purpose. Not on the worker."""
    if active is not None and active.index == ref_index:
        return job(replace(active, backend=cast(Backend, RunsOnWorker(active.backend, worker))))
    loaded = open_with_head(cfg, ref_index, head)
    try:
        return job(loaded)
    finally:
        loaded.backend.close()


def open_variant(model: str, index: int, v: VariantConfig, max_batch_size: int,
                 auto_batch: bool = False) -> Loaded:
    """Load, warm and (with auto_batch) profile one variant; blocking."""
    digest = artifact_digest(v.path)  # before opening: a file replaced meanwhile reads new
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
    return Loaded(index, v, backend, secs, cap, digest=digest)


def open_with_head(cfg: ModelConfig, index: int, head: Head) -> Loaded:
    """Variant ``index`` of a model, opened as the daemon serves it: loaded, warmed,
    profiled, with its head's part (a detector's post-processor); blocking. ``edged
    check`` opens every variant this way, so what it passes the daemon can load."""
    loaded = open_variant(cfg.name, index, cfg.variants[index], cfg.max_batch_size,
                          cfg.auto_batch)
    try:
        loaded.post = head.for_variant(loaded.config, loaded.backend)
    except Exception:
        loaded.backend.close()
        raise
    return loaded


def open_batch_member(cfg: ModelConfig, index: int, head: Head) -> Loaded:
    """Rung ``index``'s ``batch_variant``, opened as :func:`open_with_head` opens a variant
    (the rung's index: a member is not a rung of its own); blocking."""
    v = cfg.variants[index].batch_variant
    assert v is not None
    loaded = open_variant(cfg.name, index, v, cfg.max_batch_size, cfg.auto_batch)
    try:
        loaded.post = head.for_variant(v, loaded.backend)
    except Exception:
        loaded.backend.close()
        raise
    return loaded


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


def check_contract(who: str, want: list[TensorSpec], got: list[TensorSpec], what: str) -> None:
    """``who`` (a variant, a new version) must accept and return what clients of the model
    were promised: each tensor by name, dtype and rank. The one contract check: a variant
    before it serves (``check_candidate``) and a delivered version at its gate
    (``edged.delivery.gate.check_contract``, which adds what a version must also keep)."""
    got_by = {s.name: s for s in got}
    for w in want:
        g = got_by.get(w.name)
        if g is None:
            raise VerifyRefused(f"{who} has no {what} named {w.name!r} "
                                f"(it has {', '.join(got_by) or 'none'})")
        if g.dtype != w.dtype or len(g.shape) != len(w.shape):
            raise VerifyRefused(f"{who} {what} {w.name!r} is {g.dtype} {list(g.shape)}; "
                                f"the model's contract is {w.dtype} {list(w.shape)}")


def check_candidate(v: VariantConfig, backend: Backend, inputs: list[TensorSpec],
                    outputs: list[TensorSpec]) -> None:
    """Before a variant goes live: it accepts and returns what the model promised, and a
    zero input gives finite outputs. (What it computes is checked against the reference
    by ``edged.verify``.) A failure is ``VerifyRefused``, as the reference check's: the
    candidate is refused (counted and said as a refusal), not a failed load. Closes the
    backend when the check fails, so a refused candidate leaks nothing."""
    try:
        who = f"variant {v.name!r}"
        check_contract(who, inputs, backend.inputs, "input")
        check_contract(who, outputs, backend.outputs, "output")
        outs = run_batch(backend, zero_feeds(backend.inputs, 1))  # its own sizes
        for o in outputs:
            a = outs.get(o.name)
            if a is None:
                raise VerifyRefused(f"{who} returned no output {o.name!r}")
            if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
                raise VerifyRefused(f"{who} gives non-finite {o.name!r} on a zero input")
    except Exception:
        backend.close()
        raise
