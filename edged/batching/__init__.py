"""Dynamic batching: the batcher (``batcher``), the queue requests wait in (``queue``),
the one owner of the batch cap (``cap``), the governor's rate and shedding (``throttle``),
and the policies that decide when a batch starts (``policy`` is their interface;
``immediate``, ``max_delay``, ``window``, ``inline``, one per file).
"""

from __future__ import annotations

from edged.batching.immediate import Immediate
from edged.batching.inline import Inline
from edged.batching.max_delay import MaxDelay
from edged.batching.policy import Policy
from edged.batching.window import Window


def choose_policy(max_delay_ms: float, batch_window: float, inline_max_ms: float) -> Policy:
    """A model's policy from its ``[models]`` batching keys (``max_delay_ms`` wins over
    ``batch_window``: a deliberate wait already gives late arrivals their chance)."""
    base: Policy
    if max_delay_ms > 0:
        base = MaxDelay(max_delay_ms / 1000.0)
    elif batch_window > 0:
        base = Window(batch_window)
    else:
        base = Immediate()
    return Inline(base, inline_max_ms / 1000.0) if inline_max_ms > 0 else base
