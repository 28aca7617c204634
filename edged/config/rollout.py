"""``[models.rollout]``: how a delivered model's new version is watched into service.

Why per model: what counts as a regression is the model's own business (a detector's p99
matters at Frigate's 200 ms, a classifier's error rate at its clients'), so the shadow's
length and share and the watch window's thresholds are set here (docs/delivery.md,
"What each stage checks"). Read once, with errors naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass

from edged.config.schema import Table, non_negative, positive


def _fraction(v: float) -> str | None:
    return None if 0.0 <= v <= 1.0 else "must be a fraction from 0 to 1"


@dataclass(frozen=True)
class RolloutConfig:
    #: a version whose ladder is one fp32 ONNX model gets rungs built here (INT8, and
    #: OpenVINO's when installed), at the lowest priority, before its gate
    build_rungs: bool = True
    #: shadow: this share of live requests is also computed by the candidate (after the
    #: live reply, with idle CPU only), for at most ``shadow_requests`` or ``shadow_s``
    shadow_share: float = 0.2
    shadow_requests: int = 200
    shadow_s: float = 30.0
    #: agreement with the live version below this refuses the candidate (None: recorded
    #: only; a retrained model may disagree on purpose)
    min_agreement: float | None = None
    #: the watch window after promotion, and what rolls the version back by itself
    watch_s: float = 120.0
    max_error_rate: float = 0.01
    max_deadline_miss_rate: float = 0.02
    #: p99 over the previous version's at a comparable load
    max_p99_ratio: float = 1.5
    #: requests each window needs before its p99 is compared
    min_requests: int = 50


def read_rollout(t: Table) -> RolloutConfig:
    d = RolloutConfig()
    cfg = RolloutConfig(
        build_rungs=t.get("build_rungs", bool, d.build_rungs),
        shadow_share=t.get("shadow_share", float, d.shadow_share, check=_fraction),
        shadow_requests=t.get("shadow_requests", int, d.shadow_requests, check=non_negative),
        shadow_s=t.get("shadow_s", float, d.shadow_s, check=non_negative),
        min_agreement=t.get("min_agreement", float, None, check=_fraction),
        watch_s=t.get("watch_s", float, d.watch_s, check=non_negative),
        max_error_rate=t.get("max_error_rate", float, d.max_error_rate, check=_fraction),
        max_deadline_miss_rate=t.get("max_deadline_miss_rate", float,
                                     d.max_deadline_miss_rate, check=_fraction),
        max_p99_ratio=t.get("max_p99_ratio", float, d.max_p99_ratio,
                            check=lambda v: None if v >= 1.0 else "must be >= 1.0"),
        min_requests=t.get("min_requests", int, d.min_requests, check=positive),
    )
    t.done()
    return cfg
