"""Which of a model's variants serves: the first load, the check before one goes live,
hot swap, the standby rung, rungs added to a served ladder.

Why apart from the model: a variant is opened at start, on a governor or operator
swap and on reload, always the same way (``edged.model.open``), and always on a thread
(it blocks for as long as the runtime takes). The model decides *when*; this module
knows *how*.

A swap (``LiveVariant.swap_to``) loads and warms the new variant *beside* the old
one, checks it, then switches the pointer the worker reads per batch. The old variant
is closed on the model's worker thread *after* whatever batch it is computing, so a
request always finishes on the variant that took it and none fails because of a swap.
When memory is too tight to hold both, the batcher is paused (requests keep
queueing), the old variant is closed, the new one loaded, and batching resumes.

What each of these is counted and logged as, and the last swap and refusal that status
and a reload show, is ``variant_record.VariantRecord``'s to write.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import replace
from typing import Any

import psutil

from edged.batching.batcher import Batcher
from edged.batching.cap import BatchCap
from edged.config.models import ModelConfig, VariantConfig, members
from edged.errors import EdgedError
from edged.metrics import Metrics
from edged.model.contract import InputContract, check_spec
from edged.model.heads import Head
from edged.model.open import Loaded, check_candidate, open_with_head, with_reference
from edged.model.pair import Pairs
from edged.model.standby import Standby
from edged.model.variant_record import VariantRecord
from edged.verify.compare import VerifyRefused
from edged.verify.verifier import Opened, Reference, Verifier

#: the standby rung waits for check inputs (served ones) this often, this many times
STANDBY_RETRY_S = 2.0
STANDBY_TRIES = 150


class LiveVariant:
    """Which variant of one model serves, and how that changes: first load, swap, close.

    The model decides *when* (start, governor, operator, reload); this knows *how*.
    ``loaded`` is the pointer the model's worker reads once per batch. No variant goes
    live unchecked: a candidate is compared with the model's reference variant on this
    device (``edged.verify``) before a load, swap or reload puts it live."""

    def __init__(self, cfg: ModelConfig, metrics: Metrics, head: Head, verifier: Verifier,
                 batcher: Batcher, cap: BatchCap, worker: Executor, headroom_bytes: int) -> None:
        self.cfg = cfg
        self.record = VariantRecord(cfg.name, metrics)
        self.head = head
        self.verifier = verifier
        self.pairs = Pairs(self.record, self.verifier, head)  # a rung's batch member
        self.batcher = batcher  # paused, and waited idle, around a drain-then-swap
        self.cap = cap  # its ``tuned`` input is the active variant's best batch
        self.worker = worker  # the model's one worker thread: closes run after its batch
        self.headroom_bytes = headroom_bytes
        self.loaded: Loaded | None = None
        self.state = "loading"  # loading -> ready | failed; unloaded after close
        self.error: str | None = None
        self.target: int | None = None  # the ladder index a swap is loading
        #: what the first variant promised clients; every later one must match it
        self.contract: InputContract | None = None
        self._lock = asyncio.Lock()
        self._warming: Any = None  # the background job caching the reference's results
        self.standby: Standby | None = None  # next rung held open for load steps
        self._want_standby()
        self._standby_job: Any = None

    @property
    def checking(self) -> bool:
        """The reference's results are being cached, or the standby rung checked."""
        return any(j is not None and not j.done() for j in (self._warming, self._standby_job))

    async def load(self, index: int, bind: Callable[[Loaded], InputContract]) -> None:
        """Open variant ``index`` as the first active one; ``bind`` makes the model's
        contract from it (and may refuse it). A variant other than the reference is checked
        against it first (the reference is opened for that and closed again); one that
        fails the check is not served: the reference is loaded instead."""
        try:
            loaded = await self._load_checked(index)
        except VerifyRefused:
            if index == self.verifier.reference_index:
                raise
            loaded = await self._load_checked(self.verifier.reference_index)
        try:
            self.contract = bind(loaded)
        except Exception as e:
            loaded.close()
            self._load_failed(loaded.config, e)
            raise
        self._activate(loaded)
        self.state, self.error = "ready", None
        self.record.ready(True)
        self._prepare_rungs()

    def add_rungs(self, cfg: ModelConfig) -> bool:
        """Take ``cfg``'s ladder if it is this one with rungs below (else False), without a
        reload (a second fp32 session beside the first cost answers under load): the
        verifier takes it too, and it is prepared as after a load."""
        old = self.cfg
        if (self.state != "ready" or self.loaded is None
                or replace(cfg, variants=cfg.variants[:len(old.variants)]) != old):
            return False
        self.cfg = cfg
        self.verifier.take_ladder(cfg)
        self._want_standby()
        self._prepare_rungs()
        return True

    def _want_standby(self) -> None:
        if self.standby is None and self.cfg.overload.step_down and len(self.cfg.variants) > 1:
            self.standby = Standby(self.worker, self.headroom_bytes)

    def _prepare_rungs(self) -> None:
        loaded, loop = self.loaded, asyncio.get_running_loop()
        if (loaded is not None and loaded.index == self.verifier.reference_index
                and len(self.cfg.variants) > 1):
            # Cache the reference's results on the other rungs' check inputs, so that a
            # swap later need not open the reference again (it may not be active then).
            self._warming = loop.run_in_executor(
                None, self.verifier.warm, check_spec(self.contract), self._with_reference)
        if self.standby is not None:
            self._standby_job = loop.create_task(self._prepare_standby())

    async def swap_to(self, index: int, reason: str) -> bool:
        """Make variant ``index`` active; on any failure stay on the current one.

        Both variants are held while the new one loads when available memory exceeds
        twice the new artifact's size plus ``swap_memory_headroom_mb``; otherwise the
        swap drains first (requests wait in the queue, none fails)."""
        async with self._lock:
            cur = self.loaded
            if cur is None or cur.index == index or self.state != "ready":
                return False
            v = self.cfg.variants[index]
            self.target = index
            t0 = time.perf_counter()
            held = self.standby.take(index) if self.standby is not None else None
            try:
                tight = False
                if held is not None:  # opened and checked already: a switch
                    self.loaded = held
                    self.cap.for_variant(held.batches.batch_cap,
                                         held.batches.backend.batch_multiple)
                    self.record.active(v, held.digest)
                else:
                    ref = await asyncio.to_thread(self._reference_for, index)
                    size = rung_bytes(v)
                    tight = psutil.virtual_memory().available < 2 * size + self.headroom_bytes
                    if tight:
                        await self._swap_drained(cur, index, ref)
                    else:
                        self._activate(await asyncio.to_thread(self._open_checked, index, ref))
                if not tight and (self.standby is None or not self.standby.keep(cur)):
                    self.worker.submit(cur.close)  # on the worker, after its batch
            except Exception as e:
                self._load_failed(v, e)
                self.record.swap_failed(v.name, reason, e)
                return False
            finally:
                self.target = None
            self.record.swapped(cur.config.name, v.name, reason,
                                (time.perf_counter() - t0) * 1000, tight, held is not None)
            return True

    async def _prepare_standby(self) -> None:
        """The rung below, opened and checked in the background (``edged.model.standby``) once it
        has check inputs (served ones take a while to come)."""
        with contextlib.suppress(Exception):
            await self._warming
        for _ in range(STANDBY_TRIES):
            cur = self.loaded
            if self.standby is None or cur is None or self.state != "ready":
                return
            if self.verifier.can_check(cur.index + 1, check_spec(self.contract)):
                async with self._lock:
                    await self.standby.fill(self.cfg, cur.index + 1, self._checked)
                return
            await asyncio.sleep(STANDBY_RETRY_S)

    async def close(self) -> None:
        """Unload (the batcher is stopped first); the backend closes on the worker."""
        if self.standby is not None:
            self.standby.close()
        a, self.loaded = self.loaded, None
        self.state = "unloaded"
        self.record.ready(False)
        if a is not None:
            await asyncio.get_running_loop().run_in_executor(self.worker, a.close)

    async def _load_checked(self, index: int) -> Loaded:
        v = self.cfg.variants[index]
        try:
            ref = await asyncio.to_thread(self._reference_for, index)
            if ref is None:
                return await asyncio.to_thread(self._open_trusted, index)
            return await asyncio.to_thread(self._open_checked, index, ref)
        except Exception as e:
            self._load_failed(v, e)
            raise

    def _open(self, index: int) -> Loaded:
        return open_with_head(self.cfg, index, self.head)

    def _open_trusted(self, index: int) -> Loaded:
        """Variant ``index`` unchecked (the reference, or ``verify = false``), its rung's
        batch member checked beside it."""
        return self._with_member(self._open(index), None)

    def _reference_for(self, index: int) -> Reference | None:
        """The reference's results on variant ``index``'s check inputs (None: the
        variant is the reference, or marked ``verify = false``). Blocking."""
        if self.verifier.trusted(index):
            return None
        try:
            return self.verifier.reference(index, check_spec(self.contract), self._with_reference)
        except VerifyRefused as e:
            self.record.refused(self.cfg.variants[index].name, e)
            raise

    def _with_reference(self, job: Callable[[Opened], Reference]) -> Reference:
        return with_reference(job, self.cfg, self.head, self.loaded,
                              self.verifier.reference_index, self.worker)

    def _open_checked(self, index: int, ref: Reference | None) -> Loaded:
        loaded = self._open(index)
        v = loaded.config.name
        c = self.contract
        try:
            check_candidate(loaded.config, loaded.backend,
                            c.inputs if c else list(loaded.backend.inputs),
                            c.outputs if c else list(loaded.backend.outputs))
        except VerifyRefused as e:  # a refusal, counted and said as the reference check's
            self.record.refused(v, e)
            raise
        if ref is None:  # the reference itself, or marked verify = false
            if index != self.verifier.reference_index:
                self.record.unverified(v)
            return self._with_member(loaded, ref)
        try:
            checked = self.verifier.check(loaded, ref)
        except Exception as e:
            loaded.backend.close()
            if isinstance(e, VerifyRefused):
                self.record.refused(v, e)
            raise
        self.record.checked(v, checked)
        return self._with_member(loaded, ref)

    def _with_member(self, loaded: Loaded, ref: Reference | None) -> Loaded:
        return self.pairs.attach(self.cfg, loaded, ref, self.contract, self._with_reference)

    def _checked(self, index: int) -> Loaded:
        return self._open_checked(index, self._reference_for(index))

    async def _swap_drained(self, cur: Loaded, index: int, ref: Reference | None) -> None:
        self.batcher.pause()
        try:
            await self.batcher.idle()
            await asyncio.get_running_loop().run_in_executor(self.worker, cur.close)
            try:
                loaded = await asyncio.to_thread(self._open_checked, index, ref)
            except Exception:
                # Put the old rung back: reload it the same way (its member checked before).
                self.loaded = await asyncio.to_thread(
                    lambda: self.pairs.reopen(self.cfg, cur, self._open(cur.index)))
                self.cap.for_variant(self.loaded.batches.batch_cap,
                                     self.loaded.batches.backend.batch_multiple)
                raise
            self._activate(loaded)
        finally:
            self.batcher.resume()

    def _activate(self, loaded: Loaded) -> None:
        self.loaded = loaded
        self.cap.for_variant(loaded.batches.batch_cap, loaded.batches.backend.batch_multiple)
        self.record.loaded(loaded)

    def _load_failed(self, v: VariantConfig, e: Exception) -> None:
        """``v`` did not come to serve: the model's state says why; a check's refusal was
        counted and logged as a refusal where it was refused, not again as a failed load."""
        msg = str(e) if isinstance(e, EdgedError) else f"{type(e).__name__}: {e}"
        if self.loaded is None:
            self.state = "failed"
            self.error = msg
        if not isinstance(e, VerifyRefused):
            self.record.load_failed(v.name, msg)


def rung_bytes(v: VariantConfig) -> int:
    """The bytes of a rung's artifacts (both members of a pair): what a swap must hold."""
    return sum(m.path.stat().st_size for m in members(v) if m.path.exists())
