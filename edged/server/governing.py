"""Governor application: the one writer of each model's throttle and of variant swaps
made by the governor or an operator.

Why one writer: the governor's decision and an operator's ``edged ctl swap`` both
choose a model's variant; when two places act on their own, the later one silently
undoes the other (an operator swap used to be reverted on the next governor tick).
Here both are inputs to one rule:

    variant index = max(pin, governor ladder step, load's step), clipped to the ladder

An operator pin holds its variant while the governor allows it; a governor level that
needs a lighter variant than the pin wins while it lasts, and the pin applies again
when the level relaxes. ``edged ctl swap MODEL auto`` releases the pin. The pins are
``edged.server.variant_pins``'s; the load's step is ``edged.server.overload``'s (requests
too close to their deadlines).

A model a pipeline runs takes the governor's steps through the pipeline instead: the
level's ladder steps (or the pipeline's own load ask, whichever is further) are a
position on the pipeline's step-down plan (``edged.model.pipeline.plan``), which steps
and sheds the optional stages before the detector moves; the model's "governor ladder
step" above is what that position asks of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from edged.config.file import Config
from edged.errors import InvalidArgument, Unavailable
from edged.model.model import Model
from edged.model.pipeline.pipeline import Pipeline
from edged.protocols.native.control import energy_args
from edged.server.overload import TICK_S, Overload
from edged.server.state import ServerState
from edged.server.variant_pins import VariantPins

log = logging.getLogger("edged.server")

#: a swap that failed (load error, verification) is tried again after this long
RETRY_FAILED_SWAP_S = 60.0


def _sample_and_step(gov: Any, sensors: Any) -> tuple[Any, Any]:
    """One tick's blocking part, on a worker thread: read the sensors, step the policy."""
    readings = sensors.sample()
    return readings, gov.step(readings)


class Governing:
    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.governor: Any = None
        #: the sampler the governor's readings come from (the policy itself reads nothing)
        self.sensors: Any = None
        #: governor ticks applied since start (across reloads): what tests wait on
        self.steps = 0
        self.pins = VariantPins()
        self._decision: Any = None
        self.overload = Overload()
        self._metrics: Any = None
        self._wake = asyncio.Event()
        #: (model, ladder index) -> when a swap to it last failed: not retried for a while
        self._failed: dict[tuple[str, int], float] = {}
        #: set by the lifecycle: refresh systemd's STATUS= line when the level changes
        self.on_level_change: Callable[[], None] | None = None

    # -- governor lifetime ----------------------------------------------------------------
    def configure(self, cfg: Config) -> None:
        """Build the governor for ``cfg`` (at start and on reload), closing the old one.

        A level pinned by the operator survives a reload; pins of variants that no longer
        exist are dropped."""
        old = self.governor
        pinned = old.snapshot().get("pinned") if old is not None else None
        self.close()  # the old governor and its sampler
        if getattr(cfg.governor, "enabled", False):
            from edged.governor.metrics import GovernorMetrics
            from edged.governor.policy import Governor
            from edged.governor.sensors.sampler import Sensors

            self.sensors = Sensors(cfg.governor.sysfs_root, nvml=cfg.governor.nvml)
            self.governor = Governor(cfg.governor, trip_points=self.sensors.trip_points(),
                                     energy_from=getattr(old, "energy", None))
            if self._metrics is None:
                self._metrics = GovernorMetrics(self.state.metrics.registry)
            if pinned:
                with contextlib.suppress(ValueError):
                    self.governor.pin(pinned)
        else:
            self._decision = None
        self.pins.keep(cfg)
        self._place_pipelines()
        self._wake.set()

    def close(self) -> None:
        self.governor = None
        if self.sensors is not None:
            self.sensors.close()
            self.sensors = None

    async def loop(self) -> None:
        """Sample, decide, apply; every ``interval_s``, or at once when woken by a pin."""
        last = time.monotonic()
        while True:
            gov, sensors = self.governor, self.sensors
            if gov is not None:
                try:
                    self._report_load(gov)
                    # The policy steps on the sampling thread too: the mpc planner's work
                    # stays off the event loop that serves requests.
                    readings, decision = await asyncio.to_thread(_sample_and_step, gov, sensors)
                    if gov is self.governor:  # not replaced by a reload meanwhile
                        now = time.monotonic()
                        self._metrics.update(readings, decision, now - last)
                        last = now
                        self.state.power_w = readings.total_power_w
                        self.apply(decision)
                        self.steps += 1
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("governor step failed; keeping the previous level")
            self._wake.clear()
            interval = float(self.state.config.governor.interval_s) if self.governor else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), interval)

    async def watch_load(self) -> None:
        """Every overload tick, models whose load asks for another variant follow it."""
        while True:
            await asyncio.sleep(TICK_S)
            reg = self.state.registry
            for m, why in self.overload.tick([*reg, *reg.pipelines], time.monotonic()):
                if isinstance(m, Pipeline):
                    self._place(m)
                    for name in m.cfg.models:
                        member = reg.find(name)
                        if member is not None:
                            self._settle(member, f"overload of pipeline {m.name}: {why}")
                else:
                    self._settle(m, f"overload: {why}")

    def _report_load(self, gov: Any) -> None:
        """Which variant each model runs, how busy it was and its rows: what the governor
        learns each variant's power (predicted choice) and energy per row (budget) from."""
        for m in self.state.registry:
            if m.ready and m.active_index is not None:
                gov.observe_load(m.name, m.active_index, m.usage.take_duty(),
                                 ladder_len=len(m.variant_names), rows=m.usage.take_rows())

    # -- deciding what each model runs -----------------------------------------------------
    @property
    def level(self) -> str | None:
        return getattr(self._decision, "level", None)

    def position_for(self, p: Pipeline) -> int:
        """The step-down position pipeline ``p`` should be at: the governor level's ladder
        steps or the pipeline's load ask, whichever is further down its plan."""
        d = self._decision
        steps = d.ladder_steps if d is not None else 0
        return min(max(steps, self.overload.index(p.name)), len(p.plan))

    def index_for(self, m: Model) -> int:
        """The ladder index ``m`` should run now (also where a newly loaded model starts)."""
        d = self._decision
        steps = 0
        routed = self.state.registry.pipelines_of(m.name)
        if d is not None:
            # Per-model steps when the governor predicts per variant; else one for all,
            # except for a pipeline's members: their steps come from its plan (below).
            per_model = getattr(d, "variant_steps", None) or {}
            if m.name in per_model:
                steps = per_model[m.name]
            elif not routed:
                steps = d.ladder_steps
        for p in routed:
            steps = max(steps, p.plan.index_of(m.name, self.position_for(p)))
        names = m.variant_names
        steps = max(steps, self.pins.steps(m.name, names))
        return min(max(steps, self.overload.index(m.name)), len(names) - 1)

    def apply(self, decision: Any) -> None:
        prev = self._decision
        self._decision = decision
        if prev is None or prev.level != decision.level:
            log.info("governor level=%s reason=%r", decision.level, decision.reason)
            if self.on_level_change is not None:
                self.on_level_change()
        reason = f"level {decision.level}: {decision.reason}"
        self._place_pipelines()
        for m in self.state.registry:
            m.set_throttle(decision.max_batch_size, decision.max_rate_hz,
                           decision.shed_priority_above, reason)
            self._settle(m, f"governor: {reason}")

    def _place_pipelines(self) -> None:
        for p in self.state.registry.pipelines:
            self._place(p)

    def _place(self, p: Pipeline) -> None:
        """Put ``p`` at its position (which stages are shed) and say who asked for it."""
        position = self.position_for(p)
        d = self._decision
        level = d.ladder_steps if d is not None else 0
        if position and self.overload.index(p.name) > level:
            reason = f"overload: {self.overload.reason(p.name)}"
        elif d is not None:
            reason = f"governor level {d.level}: {d.reason}"
        else:
            reason = ""
        p.set_position(position, reason)

    def adopt(self, m: Model, reason: str) -> None:
        """A model switched in while serving (a delivered version): the current decision's
        throttle and rung now, not at the next step."""
        d = self._decision
        if d is not None:
            m.set_throttle(d.max_batch_size, d.max_rate_hz, d.shed_priority_above,
                           f"level {d.level}: {d.reason}")
        self._settle(m, reason)

    def _settle(self, m: Model, reason: str) -> None:
        if not m.ready or m.swapping:
            return  # a swap in progress settles again when it ends
        want = self.index_for(m)
        failed_at = self._failed.get((m.name, want))
        if failed_at is not None and time.monotonic() - failed_at < RETRY_FAILED_SWAP_S:
            return  # a refused candidate is not reloaded every tick
        if want != m.active_index:
            self.state.spawn(self._swap(m, want, reason))

    async def _swap(self, m: Model, index: int, reason: str) -> None:
        if not await m.swap_to(index, reason) and m.active_index != index:
            self._failed[(m.name, index)] = time.monotonic()
            return
        self._failed.pop((m.name, index), None)
        if m.ready and not m.swapping and self.index_for(m) != m.active_index:
            # The level or a pin moved while we were swapping: follow it now.
            d = self._decision
            self._settle(m, f"governor: level {d.level}: {d.reason}" if d is not None
                         else "operator: edged ctl swap")

    # -- operator inputs -----------------------------------------------------------------
    async def pin_variant(self, m: Model, variant: str, by: str = "operator") -> dict[str, Any]:
        """``edged ctl swap MODEL VARIANT|auto``: pin (or release) and act now."""
        if variant == "auto":
            self.pins.release(m.name)
            reason = "operator: pin released (edged ctl swap auto)"
        else:
            self.pins.pin(m, variant, by)
            reason = "operator: edged ctl swap"
        log.info("variant pin model=%s variant=%s by=%s", m.name, variant, by)
        want = self.index_for(m)
        failed = False
        if m.ready and want != m.active_index:
            if not await m.swap_to(want, reason) and m.active_index != want:
                failed = True
                # Refused (failed load, verification): the pin would only retry it.
                self.pins.release(m.name)
                log.warning("variant pin model=%s variant=%s dropped: the swap failed",
                            m.name, variant)
            else:
                self._failed.pop((m.name, want), None)
        return {"pin": self.pins.describe(m.name),
                "held_by_governor": self.pins.held(m, self.index_for(m), self.level),
                "swap_failed": failed}

    def pin_level(self, level: Any) -> dict[str, Any]:
        """``edged ctl level NAME|auto``: hold a governor level by hand."""
        if self.governor is None:
            raise Unavailable("the governor is disabled ([governor] enabled = false)")
        if not isinstance(level, str) or not level:
            raise InvalidArgument("level needs a level name or 'auto'")
        try:
            self.governor.pin(None if level == "auto" else level)
        except ValueError as e:
            raise InvalidArgument(str(e)) from None
        log.info("governor pinned level=%s by operator", level)
        self._wake.set()  # act now, not at the next monitor tick
        return dict(self.governor.snapshot())

    def set_energy(self, msg: dict[str, Any]) -> dict[str, Any]:
        """``edged ctl energy``: a budget and/or mission from now, or ``off``."""
        if self.governor is None:
            raise Unavailable("the governor is disabled ([governor] enabled = false)")
        if (args := energy_args(msg)) is not None:  # None: it only asks what is in force
            self.governor.set_energy(*args)  # InvalidArgument when nothing would be in force
            log.info("energy budget by operator: budget_wh, mission_s, off = %s", args)
            self._wake.set()  # plan with it now, not at the next tick
        return {"energy": self.governor.snapshot()["energy"]}

    def summary(self) -> dict[str, Any] | None:
        if self.governor is None:
            return None
        try:
            return {**self.governor.snapshot(), "steps": self.steps}
        except Exception as e:  # status must never fail because of a sensor
            return {"error": str(e)}
