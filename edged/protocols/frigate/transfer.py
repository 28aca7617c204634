"""A model file Frigate sends, from its bytes to a version in the store: bounded, checked, stored.

Why apart from serving it (``edged.protocols.frigate.sent``): this is where a transfer is
accepted or refused, before anything loads, and every rule of that is a bound on bytes from
a socket. Bounded three ways before a byte is parsed: the file's size
(``max_model_bytes``), the client's pace (``transfers_per_minute`` new files a minute; the
same bytes again, as a second detector sends them at start-up, are never counted) and the
store's quota (``[server] max_store_bytes``). Then refused when its bytes were rolled back
here, checked (``edged.protocols.frigate.model_check``: onnx parse, no external data,
onnx.checker, the ``model_type``'s layout; its class ids against Frigate's labelmap) and
stored content-addressed (``edged.protocols.frigate.store``). Each outcome is counted
(``edged_frigate_transfers``) and each refusal is the model's last refusal in ``edged
status``, as a delivered version's is (``edged.delivery.board``).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from typing import Any

from edged.delivery.store_bounds import StoreFull
from edged.protocols.frigate.model_check import (
    CheckedModel,
    ModelRefused,
    check_model,
    labelmap_fit,
)
from edged.protocols.frigate.sent_endpoint import SentEndpoint
from edged.protocols.frigate.store import FrigateModels, StoredModel
from edged.protocols.serving import Serving
from edged.protocols.sockets import is_local

log = logging.getLogger("edged.protocols.frigate")


class TransferRefused(Exception):
    """A transfer refused: its message is the answer's ``message``, and it was said in
    ``edged status`` already (the caller answers it)."""


class Transfers:
    """The checks a model file passes on its way into the store, and its bookkeeping."""

    def __init__(self, state: Serving, models: Callable[[SentEndpoint], FrigateModels]
                 ) -> None:
        self.state = state
        #: the endpoint's versions in the store
        self.models = models

    def refused(self, e: SentEndpoint) -> str | None:
        """Why this endpoint takes no model files (None: it does)."""
        a = e.address
        if is_local(a):
            return None
        return (f"edged takes no model files on {a}: it is plain TCP reachable from the "
                "network and Frigate's zmq detector has no CURVE (a model file is code-like "
                "input). Use an ipc:// or 127.0.0.1 endpoint, or configure the model in edged "
                "([[models]] and model = NAME on this endpoint)")

    async def read(self, e: SentEndpoint, name: str, data: Any) -> tuple[bytes, str]:
        """The file's bytes and their sha256, once its size is within ``max_model_bytes``
        (``TransferRefused`` otherwise)."""
        size, limit = len(data), e.cfg.max_model_bytes
        if size > limit:
            raise self._refuse(e, name, "downloading", "too_large", (
                f"the model file is {size} bytes; this endpoint takes at most {limit} "
                "(max_model_bytes)"))
        blob = memoryview(data).tobytes()
        sha = await asyncio.to_thread(lambda: hashlib.sha256(blob).hexdigest())
        return blob, sha

    async def store(self, e: SentEndpoint, name: str, blob: bytes, sha: str,
                    client: str) -> StoredModel:
        """The stored version of these bytes, named ``name``: the one stored before (the
        same bytes, maybe under another name: no new file), else a new one once bounded
        and checked; ``TransferRefused`` when they may not be. Under the endpoint's lock."""
        models = self.models(e)
        never = await asyncio.to_thread(models.never_again, sha)
        if never:
            self._count(e, "refused_rolled_back")
            raise self._refuse(e, name, "verifying", "rolled_back", (
                f"edged refused {name!r}: these bytes were rolled back here ({never}); "
                "send a fixed model"))
        known = await asyncio.to_thread(models.by_digest, sha)
        if known is not None:  # the same bytes (maybe under another name): no new file
            self._count(e, "same")
            return await asyncio.to_thread(models.rename, known, name)
        size = len(blob)
        why = self._bounded(e, models, client, name, sha, size)
        if why:
            raise self._refuse(e, name, "downloading", *why)
        checked = await self._check(e, name, blob, sha, client)
        try:
            stored = await asyncio.to_thread(models.put, name, blob, sha, checked.model_type)
        except StoreFull as exc:  # the store changed since the check above
            raise self._refuse(e, name, "downloading", f"store_{exc.reason}",
                               self._full(e, client, name, exc)) from None
        self._count(e, "stored")
        log.info("frigate %s: stored model %r (%s, %d bytes, sha256 %s)", e.address,
                 name, checked.model_type, size, stored.sha256[:12])
        return stored

    async def _check(self, e: SentEndpoint, name: str, blob: bytes, sha: str,
                     client: str) -> CheckedModel:
        """The *gating* of a new file: the graph against its ``model_type``'s layout, its
        class ids against Frigate's labelmap (what the answer says of them is kept for it)."""
        self.state.board.entry(e.cfg.model, stage="gating", candidate=name,
                               progress=f"{name} ({sha[:12]}): the graph against "
                               "its model_type's layout, its class ids against "
                               "Frigate's labelmap")
        try:
            checked = await asyncio.to_thread(check_model, blob, e.cfg.model_type)
            why_ids, ids_note = labelmap_fit(checked, dict(e.cfg.class_map))
            reason = "labelmap"
        except ModelRefused as exc:
            why_ids, ids_note, reason = str(exc), "", "contract"
        if not why_ids:
            e.ids_note = ids_note
            return checked
        self._count(e, "refused_check")
        if e.log_due(client, "check"):
            log.warning("frigate %s: model %r from %s refused: %s", e.address,
                        name, client, why_ids)
        raise self._refuse(e, name, "gating", reason, f"edged refused {name!r}: {why_ids}")

    def _refuse(self, e: SentEndpoint, name: str, stage: str, reason: str,
                message: str) -> TransferRefused:
        """The transfer's refusal, said in ``edged status`` as a delivered version's
        refusal is (the caller logs it, once a minute per client)."""
        self.state.board.refused(e.cfg.model, stage, reason, message,
                                 self.state.registry.find(e.cfg.model) is not None)
        return TransferRefused(message)

    def _bounded(self, e: SentEndpoint, models: FrigateModels, client: str, name: str,
                 sha: str, size: int) -> tuple[str, str] | None:
        """Why a new file from ``client`` is refused now (the pace, the store), as
        (reason, message), or None."""
        assert e.pace is not None
        wait = e.pace.take(client)
        if wait is not None:
            self._count(e, "refused_pace")
            n = e.cfg.transfers_per_minute
            if e.log_due(client, "pace"):
                log.warning("frigate %s: %s sends more than %d new model files a minute; "
                            "refusing them for %.0f s (transfers_per_minute; logged once a "
                            "minute)", e.address, client, n, wait)
            return "pace", (f"edged refused {name!r}: this client sent {n} new model files "
                            f"in the last minute, the most this endpoint takes "
                            f"(transfers_per_minute = {n}); send it again in {wait:.0f} s")
        try:
            models.admit(sha, size)
        except StoreFull as exc:
            return f"store_{exc.reason}", self._full(e, client, name, exc)
        return None

    def _full(self, e: SentEndpoint, client: str, name: str, exc: StoreFull) -> str:
        self._count(e, f"refused_{exc.reason}")
        if e.log_due(client, exc.reason):
            log.error("frigate %s: model %r from %s refused: %s (logged once a minute per "
                      "client)", e.address, name, client, exc)
        return f"edged refused {name!r}: {exc}"

    def _count(self, e: SentEndpoint, outcome: str) -> None:
        self.state.metrics.frigate_transfers.labels(e.address, outcome).inc()
