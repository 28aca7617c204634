"""What an operator sees of every model version that arrives, by either road: one status
entry per model, and the two delivery metrics.

Why one board for both roads: a signed bundle from a source (``edged.server.delivery``) and
a model Frigate sends (``edged.protocols.frigate.sent``) take the same stages
(docs/delivery.md: downloading, verifying, gating, shadowing, promoting, watching,
serving) and an operator reads them in one place: ``edged status``'s ``delivery`` entry of
the model (its version, digest and source, the stage and the candidate in it, the last
refusal and rollback with their reasons, a short history), and the counter
``edged_model_updates_total{model,outcome,reason}``. This class is the one writer of both,
and of ``edged_model_version_info`` (which version serves, for the fleet's view: written for
delivered models only, since a model Frigate sends is chosen by each Frigate's config, not
by a fleet's publisher, and the fleet's alerts compare devices by it).
"""

from __future__ import annotations

import time
from typing import Any

#: events kept per model in its entry's ``history``
HISTORY = 20


class Board:
    def __init__(self, metrics: Any) -> None:
        self.metrics = metrics
        #: per model: what ``edged status`` shows (``delivery``)
        self.entries: dict[str, dict[str, Any]] = {}

    def entry(self, name: str, **fields: Any) -> None:
        """Set fields of ``name``'s entry (a stage, its progress, a report)."""
        e = self.entries.setdefault(name, {"history": []})
        e.update(fields, at=round(time.time(), 1))

    def history(self, name: str, **event: Any) -> None:
        e = self.entries.setdefault(name, {"history": []})
        e["history"] = [*e["history"], {"at": round(time.time(), 1), **event}][-HISTORY:]

    def served(self, name: str, version: str, digest: str, source: str | None, how: str,
               fleet: bool = True) -> None:
        """``version`` serves ``name`` now (``how``: promoted, restored); with ``fleet``,
        it is the model's ``edged_model_version_info``."""
        if fleet:
            self._forget_version(name)
            self.metrics.model_version.labels(name, version, digest).set(1)
        self.history(name, version=version, digest=digest, event=how)
        self.entry(name, version=version, digest=digest, source=source, stage="serving",
                   candidate=None, progress=None)

    def promoted(self, name: str, by: str) -> None:
        """Counted once per promotion (``by``: poll, operator, frigate)."""
        self.metrics.model_updates.labels(name, "promoted", by).inc()

    def unserved(self, name: str, stage: str) -> None:
        """No delivered version serves ``name`` any more (its configured variants do)."""
        self._forget_version(name)
        self.entry(name, version=None, digest=None, stage=stage)

    def refused(self, name: str, stage: str, reason: str, message: str,
                serving: bool) -> None:
        """A version refused at ``stage`` for ``reason``; ``serving``: the model still
        serves (what it served before). The caller logs it (a flood of Frigate transfers
        is logged once a minute, not per refusal)."""
        self.metrics.model_updates.labels(name, "refused", reason).inc()
        self.history(name, event="refused", stage=stage, reason=reason)
        self.entry(name, stage="serving" if serving else "waiting", candidate=None,
                   progress=None, last_refusal={"stage": stage, "reason": reason,
                                                "message": message,
                                                "at": round(time.time(), 1)})

    def rolled_back(self, name: str, version: str, digest: str, reason: str, by: str,
                    automatic: bool) -> None:
        """``version`` stopped serving ``name`` (``by``: automatic, operator); counted by
        the rule that fired (``errors``, ``p99``, ...) or by the operator."""
        self.metrics.model_updates.labels(
            name, "rolled_back", reason.split(":", 1)[0] if automatic else by).inc()
        self.history(name, version=version, digest=digest, event="rolled back",
                     reason=reason[:200], by=by)
        self.entry(name, last_rollback={"version": version, "reason": reason, "by": by,
                                        "at": round(time.time(), 1)})

    def status(self) -> dict[str, Any]:
        return {name: dict(e) for name, e in self.entries.items()}

    def _forget_version(self, name: str) -> None:
        g = self.metrics.model_version
        for labels in list(g._metrics):
            if labels[0] == name:
                g.remove(*labels)
