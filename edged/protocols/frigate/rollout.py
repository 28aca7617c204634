"""The shadow and the watch window of a model Frigate sent: a delivered version's two
stages after its gate (``edged.delivery.shadow``, ``edged.delivery.watch``), as they apply
to a transfer.

Why these limits: Frigate waits 30 s for the answer to its transfer, so a shadow takes at
most ``SHADOW_S`` of it, and only while frames keep reaching the model being replaced
(another client's: the sender sends none while it waits, and Frigate sends its model in a
detector's start-up handshake, before its frames, so usually there are none and the shadow
is skipped, saying why). The watch has no p99 rule: the model replaced had no frames to
compare with while Frigate restarted; errors and deadline misses decide, at
``[models.rollout]``'s defaults. Both decide only; ``edged.protocols.frigate.sent`` acts
(answers the transfer, rolls back), and every stage is said on ``edged.delivery.board``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from edged.config.rollout import RolloutConfig
from edged.delivery.shadow import refusal, shadow_live
from edged.delivery.watch import judge, read, window
from edged.model.model import Model
from edged.protocols.serving import Serving

log = logging.getLogger("edged.protocols.frigate")

#: the most of Frigate's 30 s wait for its transfer's answer a shadow may take
SHADOW_S = 5.0
#: the model being replaced computed a frame this recently: frames are arriving
LIVE_S = 2.0


async def shadow_transfer(state: Serving, address: str, name: str, sent: str,
                          cur: Model | None, cand: Model) -> str | None:
    """Shadow ``cand`` (model ``name``'s new version, the file ``sent``) against ``cur``
    (what serves it now) where that applies; None, or why ``cand`` is refused (it failed
    live frames)."""
    board = state.board
    loaded = cand.live.loaded
    if cur is None or not cur.ready or loaded is None:
        return None  # nothing serves: nothing to compare with
    if (cur.inputs, cur.outputs) != (cand.inputs, cand.outputs):
        skipped = "it takes or gives other tensors than the model it replaces"
    elif cur.idle_s > LIVE_S:
        skipped = (f"the model it replaces computed no frame in the last {LIVE_S:g} s "
                   "(Frigate sends its model before its frames)")
    else:
        skipped = ""
    if skipped:
        board.entry(name, shadow={"skipped": skipped})
        return None
    cfg = RolloutConfig()
    seconds = min(cfg.shadow_s, SHADOW_S)
    board.entry(name, stage="shadowing", progress=f"{sent}: {cfg.shadow_share:.0%} of live "
                f"frames, up to {cfg.shadow_requests} or {seconds:g} s")
    shadow = await shadow_live(cur, loaded, cfg.shadow_share, cfg.shadow_requests, seconds,
                               idle_s=LIVE_S)
    report = shadow.report()
    board.entry(name, shadow=report)
    log.info("frigate %s: model %r shadow: %s", address, sent, report)
    why = refusal(shadow, cfg.min_agreement)
    if why is None:
        return None
    msg = f"edged refused {sent!r}: {why[1]}"
    log.error("frigate %s: %s", address, msg)
    board.refused(name, "shadowing", why[0], msg, True)
    return msg


def watching(state: Serving, name: str, sent: str) -> None:
    """Model ``name``'s new version (the file ``sent``) is in its watch window now (said
    before the transfer is answered; ``watch_transfer`` then watches it)."""
    state.board.entry(name, stage="watching", watch={
        "version": sent, "seconds": RolloutConfig().watch_s, "baseline": None})


async def watch_transfer(state: Serving, name: str, sent: str, digest: str,
                         served: Callable[[], bool]) -> str | None:
    """Watch model ``name``'s new version (the file ``sent``) while ``served()``; the
    regression that must roll it back, or None (it passed, or was replaced)."""
    cfg = RolloutConfig()
    board, metrics = state.board, state.metrics
    start = read(metrics, name)
    while True:
        await asyncio.sleep(1.0)
        if not served():
            return None  # replaced meanwhile: its own watch decides
        w = window(start, read(metrics, name))
        board.entry(name, watch={**(board.entries[name].get("watch") or {}),
                                 "watched": w.to_json()})
        why = judge(w, None, cfg)
        if why is not None:
            return why
        if w.seconds >= cfg.watch_s:
            board.entry(name, stage="serving", progress=f"{sent} passed its "
                        f"{cfg.watch_s:g} s watch window")
            board.history(name, version=sent, digest=digest, event="watched")
            return None
