"""The shadow stage: a candidate version computes a share of live requests beside the one
that answers them, and what it computes is compared, never sent.

Why: the gate checks a version on its own validation set; live traffic is what it will
meet. For ``shadow_requests`` rows or ``shadow_s`` seconds (``[models.rollout]``) a share of
the batches the serving version computes is computed again by the candidate, and recorded:
task-level agreement with the live version (the same top-1 class for a classifier's
outputs, else the largest difference as a share of the live output's range), the
candidate's latency at each batch size the live version served (beside the live one's),
and its errors.

Why it never delays a live reply: the live worker only *offers* a batch (a copy of its
inputs and outputs, taken after it computed them) and goes on; the offer is dropped unless
the live queue is empty, no shadow batch is in flight, and the share's dice say so. The
candidate computes on a thread of its own at the lowest priority (nice 19), so it only
gets CPU the serving path leaves idle. (A runtime's own worker threads, such as ONNX
Runtime's intra-op pool of a variant without ``threads = 1``, keep the priority of the
thread that loaded the candidate.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from edged.backends.base import run_batch
from edged.verify.compare import classifier_shaped, rel_err_by_input

log = logging.getLogger("edged.delivery")


def _lowest_priority() -> None:
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


class Shadow:
    """One candidate's shadow: ``offer`` from the live worker, ``report`` at the end."""

    def __init__(self, candidate: Any, share: float, max_rows: int,
                 rng: Callable[[], float] = random.random) -> None:
        self.candidate = candidate  # an open variant: its ``backend``
        self.share = share
        self.max_rows = max_rows
        self.rng = rng
        self.done = threading.Event()
        self._busy = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="edged-shadow",
                                        initializer=_lowest_priority)
        self.rows = 0
        self.agreed = 0
        self.compared = 0
        self.max_rel_err = 0.0
        self.errors: list[str] = []
        self.offered = 0
        self.skipped_busy = 0
        self._live_ms: dict[int, list[float]] = {}
        self._cand_ms: dict[int, list[float]] = {}

    def offer(self, feeds: dict[str, np.ndarray], outs: dict[str, np.ndarray], rows: int,
              live_s: float, live_idle: bool) -> None:
        """A live batch was computed (on the live worker thread): maybe compute it again
        in the candidate. Returns at once."""
        if self.done.is_set():
            return
        self.offered += 1
        if not live_idle or self.rng() >= self.share:
            return
        if not self._busy.acquire(blocking=False):
            self.skipped_busy += 1
            return
        try:
            job = ({k: np.array(a[:rows]) for k, a in feeds.items()},
                   {k: np.array(a[:rows]) for k, a in outs.items()}, rows, live_s)
            self._pool.submit(self._compute, *job)
        except BaseException:
            self._busy.release()
            raise

    def _compute(self, feeds: dict[str, np.ndarray], live: dict[str, np.ndarray], rows: int,
                 live_s: float) -> None:
        try:
            t0 = time.perf_counter()
            try:
                cand = run_batch(self.candidate.backend, feeds)
            except Exception as e:
                self.errors.append(f"{type(e).__name__}: {e}"[:300])
                return
            ms = (time.perf_counter() - t0) * 1000
            self._cand_ms.setdefault(rows, []).append(ms)
            self._live_ms.setdefault(rows, []).append(live_s * 1000)
            for name, a in live.items():
                c = cand.get(name)
                if c is None or c.shape != a.shape:
                    self.errors.append(f"output {name!r} is "
                                       f"{None if c is None else list(c.shape)}, live "
                                       f"{list(a.shape)}")
                    continue
                if classifier_shaped(a):
                    self.agreed += int((c.argmax(1) == a.argmax(1)).sum())
                    self.compared += len(a)
                elif a.dtype.kind == "f" and a.size:
                    self.max_rel_err = max(self.max_rel_err,
                                           float(rel_err_by_input(c, a).max()))
            self.rows += rows
            if self.rows >= self.max_rows:
                self.done.set()
        finally:
            self._busy.release()

    @property
    def agreement(self) -> float | None:
        return self.agreed / self.compared if self.compared else None

    def report(self) -> dict[str, Any]:
        def p50(v: list[float]) -> float:
            return round(float(np.median(v)), 3)

        return {
            "rows": self.rows, "offered_batches": self.offered,
            "agreement": None if self.agreement is None else round(self.agreement, 4),
            "max_rel_err": round(self.max_rel_err, 4) if not self.compared else None,
            "errors": len(self.errors), "first_error": self.errors[0] if self.errors else None,
            "latency_ms_p50_by_batch": {
                str(b): {"candidate": p50(v), "live": p50(self._live_ms[b]), "batches": len(v)}
                for b, v in sorted(self._cand_ms.items())},
        }

    def close(self) -> None:
        self.done.set()
        self._pool.shutdown(wait=True)


async def shadow_live(live: Any, candidate: Any, share: float, max_rows: int,
                      seconds: float, idle_s: float | None = None) -> Shadow:
    """Shadow the batches ``live`` (a served ``Model``) computes with ``candidate`` (an
    open variant) for ``max_rows`` rows or ``seconds``, whichever comes first, or (with
    ``idle_s``) until ``live`` has computed nothing for that long; the closed ``Shadow``
    (its ``report``). Both roads of a version use it: a delivered version before its
    promotion, a model Frigate sent while another client's frames reach the one it
    replaces (whose sender waits: it stops when the frames do)."""
    shadow = Shadow(candidate, share, max_rows)
    live.shadow = shadow
    end = time.monotonic() + seconds
    try:
        while not shadow.done.is_set() and time.monotonic() < end:
            step = end - time.monotonic() if idle_s is None else min(0.25, idle_s)
            await asyncio.to_thread(shadow.done.wait, max(0.0, step))
            if idle_s is not None and live.idle_s > idle_s:
                break
    finally:
        live.shadow = None
        await asyncio.to_thread(shadow.close)
    return shadow


def refusal(shadow: Shadow, min_agreement: float | None) -> tuple[str, str] | None:
    """Why the candidate is refused after its shadow, as (reason, message): it failed live
    batches, or (only when ``min_agreement`` is set) it agreed with the live version on
    fewer of them. None: it may go on."""
    if shadow.errors:
        return "errors", (f"the new version failed {len(shadow.errors)} shadow batches: "
                          f"{shadow.errors[0]}")
    agreement = shadow.agreement
    if min_agreement is not None and agreement is not None and agreement < min_agreement:
        return "agreement", (f"the new version agrees with the live one on {agreement:.1%} "
                             f"of {shadow.compared} shadowed requests (min_agreement "
                             f"{min_agreement:.0%})")
    return None
