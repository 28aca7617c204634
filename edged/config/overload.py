"""``[models.overload]``: whether and when a model steps down its ladder under load.

Why a table of its own: the governor's ladder is walked for heat and power; a model whose
clients wait on deadlines (Frigate's plugin gives up after 200 ms and shows no detection
for that frame) is better served by a checked lighter variant than by a late answer, so
``edged.server.overload`` walks the same ladder for load. Off by default for native
models, whose clients choose their own deadlines; on for a model a ``[[server.frigate]]``
endpoint serves, configured or sent.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from edged.config.schema import Table


def _share(v: float) -> str | None:
    return None if 0.0 < v <= 1.0 else "must be a share of the deadline, above 0 and up to 1"


@dataclass(frozen=True)
class OverloadConfig:
    #: None: on when a Frigate endpoint serves the model (resolved at load)
    step_down: bool | None = None
    #: step down when a quarter of the answers in the window used this share of their deadline
    down_at: float = 0.6
    #: step back up when the heavier variant, at its cost per row, would keep the window's
    #: 95th percentile under this share
    up_at: float = 0.4
    #: least time on a rung before stepping back up
    dwell_s: float = 10.0
    #: the answers the rule reads: those of the last this many seconds
    window_s: float = 2.0

    @classmethod
    def from_table(cls, t: Table) -> OverloadConfig:
        if not t.data:
            return cls()
        cfg = cls(step_down=t.get("step_down", bool, None),
                  down_at=t.get("down_at", float, cls.down_at, check=_share),
                  up_at=t.get("up_at", float, cls.up_at, check=_share),
                  dwell_s=t.get("dwell_s", float, cls.dwell_s,
                                check=lambda v: None if v >= 0 else "must be >= 0"),
                  window_s=t.get("window_s", float, cls.window_s,
                                 check=lambda v: None if v > 0 else "must be > 0"))
        if cfg.up_at >= cfg.down_at:
            t.problem("up_at", f"must be below down_at ({cfg.down_at}): a rung the model "
                      "steps up to must not be one it would step down from at once")
        t.done()
        return cfg

    def resolved(self, frigate_serves: bool) -> OverloadConfig:
        """``step_down`` decided: as configured, else whether a Frigate endpoint serves."""
        return self if self.step_down is not None else replace(self, step_down=frigate_serves)
