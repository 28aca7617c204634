"""What is said of a model's variants as they change: counted, logged, kept for status.

Why apart from ``live_variant.LiveVariant`` (which decides what serves): a variant goes
live by a first load, a swap that opens it, or a switch to the standby rung, and is
refused by the check before any of them; each outcome must be counted and logged the
same way whichever road it took (``edged_model_loads_total``, ``edged_variant_checks_total``,
``edged_variant_swaps_total``, ``edged_model_ready``, the active variant's info), and
status and a reload read the last swap and the last refusal. This is the one writer of
those; the live variant only says what happened.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from edged.config.models import VariantConfig
from edged.metrics import Metrics
from edged.model.open import Loaded

log = logging.getLogger("edged.model")


class VariantRecord:
    """One model's record of its variants: metrics, log lines, the last swap and refusal."""

    def __init__(self, model: str, metrics: Metrics) -> None:
        self.model = model
        self.metrics = metrics
        #: the last swap as status shows it: where to, why, and how it went
        self.last_swap: dict[str, Any] | None = None
        #: the last pre-swap check that refused a variant, "VARIANT: why" (not a delivered
        #: version's ``last_refusal``, which is the board's: stage, reason, message)
        self.last_check_refused: str | None = None
        metrics.model_ready.labels(model).set(0)

    def ready(self, ready: bool) -> None:
        """The model serves requests (a variant loaded), or no longer (closed)."""
        self.metrics.model_ready.labels(self.model).set(1 if ready else 0)

    def active(self, v: VariantConfig, digest: str | None) -> None:
        """``v`` serves now (the artifact whose bytes hash to ``digest``)."""
        self.metrics.set_active(self.model, v.name, v.backend, digest)

    def loaded(self, loaded: Loaded) -> None:
        """``loaded`` was opened and serves now (a first load, or a swap that opened it)."""
        v = loaded.config
        self.metrics.model_loads.labels(self.model, v.name, "ok").inc()
        self.metrics.model_load_duration.labels(self.model, v.name).set(loaded.load_s)
        self.active(v, loaded.digest)
        log.info("model loaded model=%s variant=%s backend=%s device=%s load_ms=%.0f",
                 self.model, v.name, v.backend, loaded.backend.info.device,
                 loaded.load_s * 1000)

    def load_failed(self, variant: str, msg: str) -> None:
        self.metrics.model_loads.labels(self.model, variant, "error").inc()
        log.error("load failed model=%s variant=%s error=%s", self.model, variant, msg)

    def checked(self, variant: str, measured: str) -> None:
        """``variant`` agreed with the reference (``measured`` says how closely)."""
        self.metrics.variant_checks.labels(self.model, variant, "ok").inc()
        log.info("verify ok model=%s variant=%s %s", self.model, variant, measured)

    def unverified(self, variant: str) -> None:
        """``variant`` goes live unchecked: its config says ``verify = false``."""
        self.metrics.variant_checks.labels(self.model, variant, "unverified").inc()
        log.warning("unverified variant goes live model=%s variant=%s "
                    "(verify = false)", self.model, variant)

    def refused(self, variant: str, e: Exception) -> None:
        self.last_check_refused = f"{variant}: {e}"  # what a reload of a changed file reports
        self.metrics.variant_checks.labels(self.model, variant, "refused").inc()
        log.error("verify failed: variant refused model=%s variant=%s: %s", self.model,
                  variant, e)

    def swapped(self, old: str, new: str, reason: str, ms: float, drained: bool,
                standby: bool) -> None:
        """A swap from ``old`` to ``new`` took ``ms``: ``drained`` (the batcher paused,
        too little memory for both) or a switch to the ``standby`` rung."""
        self.metrics.swaps.labels(self.model, old, new, _reason_label(reason)).inc()
        self.last_swap = {"from": old, "to": new, "reason": reason, "ok": True,
                          "ms": round(ms, 1), "drained": drained, "standby": standby,
                          "at": time.time()}
        log.info("variant swap model=%s from=%s to=%s reason=%r drained=%s "
                 "standby=%s swap_ms=%.0f", self.model, old, new, reason, drained, standby,
                 ms)

    def swap_failed(self, new: str, reason: str, e: Exception) -> None:
        """A swap to ``new`` failed; the variant that served before serves on."""
        self.last_swap = {"to": new, "reason": reason, "ok": False, "error": str(e),
                          "at": time.time()}


def _reason_label(reason: str) -> str:
    """Bounded label values: the first word of the reason (governor, operator, reload)."""
    return reason.split(":", 1)[0].split()[0] if reason else "unknown"
