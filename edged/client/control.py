"""The control endpoint's client half: operator actions (status, reload, swap, ...).

The control socket is ``ipc://`` only (operator actions stay on the host), in the daemon's
runtime directory; ``find_control`` looks where ``edged/host/runtime_dir.py`` would have put
it, and refuses to choose between two daemons that answer. Message shapes are
``edged.protocols.native.control.CONTROL_OPS``.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from typing import Any

import zmq

from edged.client.daemons import the_running_control
from edged.client.errors import ClientTimeout, ProtocolViolation, Unavailable, error_for
from edged.client.socket_support import open_dealer
from edged.errors import EdgedError
from edged.host.runtime_dir import CONTROL_SOCKET_NAME, runtime_dir_candidates
from edged.protocols.native.control import control_message


def find_control(explicit: str | None = None) -> str | None:
    """The control endpoint: ``explicit``, else $EDGED_CONTROL, else the one
    ``control.sock`` that answers in ``runtime_dir_candidates()``; None if none does, and
    ``Ambiguous`` (naming them) if several do: two daemons are never guessed between."""
    if explicit:
        return explicit
    if os.environ.get("EDGED_CONTROL"):
        return os.environ["EDGED_CONTROL"]
    return the_running_control()


def _where_searched() -> str:
    return ", ".join(str(d / CONTROL_SOCKET_NAME) for d in runtime_dir_candidates()[:4])


class ControlClient:
    """``ControlClient().call("swap", model="digits", variant="cnn-int8")`` -> reply dict.

    A non-OK reply raises its status's exception (with the reply as ``.header``) unless
    ``raise_on_error=False``; a timeout resets the socket like the inference client."""

    def __init__(self, endpoint: str | None = None, timeout_s: float = 60.0,
                 context: zmq.Context[Any] | None = None) -> None:
        found = find_control(endpoint)
        if found is None:
            raise Unavailable("no daemon's control socket answers (looked for $EDGED_CONTROL, "
                              f"then {_where_searched()}, ...); is the daemon running? Pass "
                              "the control endpoint it printed at start (ipc://PATH)")
        self.endpoint = found
        self.timeout_s = timeout_s
        self.ctx = context or zmq.Context.instance()
        self._ids = itertools.count(1)
        self.sock = open_dealer(self.ctx, found, None, self._ms(timeout_s))

    @staticmethod
    def _ms(seconds: float) -> int:
        return max(1, int(seconds * 1000))

    def close(self) -> None:
        self.sock.close(linger=0)

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, op: str, *, raise_on_error: bool = True, **args: Any) -> dict[str, Any]:
        """Send ``op`` with its fields (checked against CONTROL_OPS) and return the reply."""
        try:
            msg = control_message(op, next(self._ids), **args)
        except EdgedError as e:
            raise error_for({"status": e.status, "error": str(e)}) from None
        reply = self.send_message(msg)
        if raise_on_error and reply.get("status") != "OK":
            raise error_for(reply)
        return reply

    def send_message(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Send a prepared control message as is and return the reply, whatever its status
        (an ``id`` is added if missing, to match the reply)."""
        msg = {**msg}
        rid = msg.setdefault("id", f"ctl-{next(self._ids)}")
        try:
            self.sock.send(json.dumps(msg).encode())
        except zmq.Again:
            raise ClientTimeout(f"could not send to {self.endpoint}: no daemon listens there",
                                rid) from None
        end = time.monotonic() + self.timeout_s
        while True:
            left = end - time.monotonic()
            if left <= 0 or not self.sock.poll(self._ms(left)):
                self.sock.close(linger=0)
                self.sock = open_dealer(self.ctx, self.endpoint, None, self._ms(self.timeout_s))
                raise ClientTimeout(f"no reply from {self.endpoint} within "
                                    f"{self.timeout_s:g} s", rid)
            frames = self.sock.recv_multipart()
            try:
                reply = json.loads(frames[-1])
            except ValueError as e:
                raise ProtocolViolation(f"control reply is not JSON: {e}", rid) from None
            if not isinstance(reply, dict):
                raise ProtocolViolation("control reply is not a JSON object", rid)
            if reply.get("id") == rid:
                return reply
            # Otherwise a late reply to an earlier call that timed out: drop it.

