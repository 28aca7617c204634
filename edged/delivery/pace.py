"""How often one client may hand the daemon a new model, and how often a refusal is logged.

Why: a model transfer is code-like input that costs a parse, a check and a load, and a
misbehaving client (or a Frigate restart loop with a changing model) can send one after
another as fast as the socket carries them (600 in 13 s, issue 32). What one Frigate
instance does normally stays far inside a few a minute: one handshake per detector at
start-up, a transfer only when the model changed, and the same bytes from a second
detector are not a new model (they are never counted). Beyond the pace a transfer is
answered with the reason; the log says so once per client and minute, not per message,
so a flood cannot fill the journal either.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable

#: clients remembered at most (least recently seen forgotten first)
MAX_CLIENTS = 1024


def peer_key(address: str) -> str:
    """The client a message came from, as a pace counts it: a TCP peer's IP; for ``ipc://``
    (libzmq gives ``localhost:UID:GID:PID``) the user, not the process, so a client cannot
    reset its pace by starting a new process."""
    if address.startswith("localhost:") and address.count(":") == 3:
        return address.rsplit(":", 1)[0]
    return address or "local"


class Pace:
    """At most ``per_minute`` events per client in any 60 s (a sliding window)."""

    def __init__(self, per_minute: int, window_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self.window_s = window_s
        self.clock = clock
        self._events: OrderedDict[str, deque[float]] = OrderedDict()

    def take(self, client: str) -> float | None:
        """Count one event for ``client``: None when allowed, else the seconds until the
        next one would be."""
        now = self.clock()
        q = self._events.pop(client, None) or deque()
        while q and now - q[0] >= self.window_s:
            q.popleft()
        self._events[client] = q
        while len(self._events) > MAX_CLIENTS:
            self._events.popitem(last=False)
        if len(q) >= self.per_minute:
            return max(0.0, self.window_s - (now - q[0]))
        q.append(now)
        return None


class OncePerMinute:
    """True the first time a (client, what) pair is seen in a minute: log then, not after."""

    def __init__(self, window_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self.clock = clock
        self._last: OrderedDict[tuple[str, str], float] = OrderedDict()

    def __call__(self, client: str, what: str) -> bool:
        now = self.clock()
        key = (client, what)
        last = self._last.pop(key, None)
        due = last is None or now - last >= self.window_s
        self._last[key] = now if due else last  # type: ignore[assignment]
        while len(self._last) > MAX_CLIENTS:
            self._last.popitem(last=False)
        return due
