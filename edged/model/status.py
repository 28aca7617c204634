"""A model's entry in status and control replies (``edged status``, ``edged models``,
``edged ctl``).

Why apart from ``model.Model``: the model serves requests; this only reads it, gathering
each part's own account (the live variant with its artifact and runtime, the head, the
streams, the pre-swap check) when a reply asks for it. No request passes through here,
so the entry can grow without the model's serving code changing.
"""

from __future__ import annotations

from typing import Any

from edged.model.model import Model


def describe_model(m: Model) -> dict[str, Any]:
    """Model ``m``'s entry in a status or control reply."""
    a = m.live.loaded
    cfg = m.cfg
    return {
        "name": m.name,
        "state": m.state,
        "error": m.error,
        "inputs": [s.to_json() for s in m.inputs],
        "outputs": [s.to_json() for s in m.outputs],
        "variants": m.variant_names,
        "active_variant": a.config.name if a else None,
        # the active rung's member for batches of > 1 row (None: the variant computes all)
        "batch_variant": a.batch.config.name if a and a.batch else None,
        # each rung that is a pair: its variant -> its batch_variant, as configured
        "pairs": {v.name: v.batch_variant.name for v in cfg.variants if v.batch_variant},
        "backend": a.config.backend if a else None,
        "path": str(a.config.path) if a else None,
        "digest": a.digest if a else None,  # sha256 of the live artifact's bytes
        "device": a.backend.info.device if a else None,
        "runtime": a.backend.info.details if a else None,  # version, threads, ...
        "max_batch_size": cfg.max_batch_size,
        # the batcher's: a pair's batch member's (it computes every batch of > 1 row)
        "batch_cap": a.batches.batch_cap if a else None,
        # the parts the backend computes a batch in (OpenVINO's streams; 1: one part)
        "batch_multiple": a.batches.backend.batch_multiple if a else None,
        "max_queue": cfg.max_queue,
        "queue_depth": m.depth,
        "preprocess": bool(m.preprocessor),
        "streams": {"tracked": len(m.streams), "max_streams": cfg.max_streams,
                    "max_stream_fps": cfg.max_stream_fps or None,
                    "top": m.streams.table.top(5)},
        **m.head.describe(a.post if a else None),
        "last_swap": m.last_swap,
        "verify": m.verifier.describe(),
    }
