"""The blocking client: one call at a time with ``infer``, or pipelined ``send``/``recv``.

After a call times out the socket is replaced, as a REQ socket must be: requests still
queued for a daemon that went away are not sent later, and replies to them are not
mistaken for the next call's (ids are never reused within a client, and a reply whose
id is not the one awaited is dropped).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from pathlib import Path
from typing import Any

import zmq

from edged.client.errors import ClientTimeout
from edged.client.messages import Reply, build_infer, parse_reply, with_version
from edged.client.shm import ShmSlots
from edged.client.socket_support import load_curve_keys, open_dealer


class Client:
    """``Client(endpoint).infer(model, array)`` -> ``Reply``; non-OK raises its status's
    exception unless ``raise_on_error=False``. Not thread-safe: one client per thread.

    ``shm=True``: on the daemon's host, ``infer`` puts raw tensors into a shared-memory
    ring of ``shm_slots`` slots instead of socket frames (docs/protocol.md); frames stay
    the fallback whenever a ring cannot be had."""

    def __init__(
        self,
        endpoint: str,
        timeout_s: float = 10.0,
        server_public_key: str | Path | None = None,
        client_secret_key: str | Path | None = None,
        context: zmq.Context[Any] | None = None,
        shm: bool = False,
        shm_slots: int = 4,
    ) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.ctx = context or zmq.Context.instance()
        self._keys = load_curve_keys(server_public_key, client_secret_key)
        self._ids = itertools.count(1)
        #: Replies dropped because nobody awaited their id any more (late after a timeout).
        self.stale_replies = 0
        self.sock = open_dealer(self.ctx, endpoint, self._keys, self._ms(timeout_s))
        self.shm = ShmSlots(shm_slots) if shm else None

    @property
    def timeout_ms(self) -> int:
        return self._ms(self.timeout_s)

    @staticmethod
    def _ms(seconds: float) -> int:
        return max(1, int(seconds * 1000))

    def reset(self) -> None:
        """A fresh socket: whatever the old one had queued or still had coming is gone.
        The daemon sees a new client, so a shared-memory ring is dropped (it reaps it)."""
        if self.shm is not None:
            self.shm.drop()
        self.sock.close(linger=0)
        self.sock = open_dealer(self.ctx, self.endpoint, self._keys, self.timeout_ms)

    def close(self) -> None:
        if self.shm is not None and self.shm.ring is not None:
            name = self.shm.drop()
            # give the ring back now rather than when the daemon reaps it
            with contextlib.suppress(ClientTimeout):
                self.call({"op": "shm", "release": name}, timeout_s=1.0)
        self.sock.close(linger=0)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- pipelining: raw replies, never raises on a status ------------------------------
    def send(self, header: dict[str, Any], frames: list[Any] | None = None) -> Any:
        """Send one request; returns its id (the caller's ``id``, else a fresh one)."""
        h = with_version(header, next(self._ids))
        try:
            self.sock.send_multipart([json.dumps(h).encode(), *(frames or [])], copy=False)
        except zmq.Again:
            raise ClientTimeout(f"could not send to {self.endpoint} within {self.timeout_ms} "
                                "ms: no daemon accepted the connection (down, or the CURVE key "
                                "was refused)", h["id"]) from None
        return h["id"]

    def recv(self, timeout_s: float | None = None) -> Reply:
        """The next reply, whichever request it answers."""
        t = self.timeout_ms if timeout_s is None else self._ms(timeout_s)
        if not self.sock.poll(t):
            raise ClientTimeout(f"no reply from {self.endpoint} within {t} ms")
        return parse_reply(self.sock.recv_multipart())

    # -- one request, one reply -----------------------------------------------------------
    def call(self, header: dict[str, Any], frames: list[Any] | None = None, *,
             timeout_s: float | None = None, raise_on_error: bool = False) -> Reply:
        """Send and wait for this request's own reply. Replies to other ids are dropped, so
        do not mix with requests still outstanding from ``send``."""
        rid = self.send(header, frames)
        wait = self.timeout_s if timeout_s is None else timeout_s
        end = time.monotonic() + wait
        while True:
            left = end - time.monotonic()
            if left <= 0 or not self.sock.poll(self._ms(left)):
                self.reset()
                raise ClientTimeout(f"no reply from {self.endpoint} within {wait:g} s", rid)
            reply = parse_reply(self.sock.recv_multipart())
            if reply.id == rid:
                return reply.raise_for_status() if raise_on_error else reply
            self.stale_replies += 1

    def infer(self, model: str, inputs: Any, *, raise_on_error: bool = True,
              timeout_s: float | None = None, **opts: Any) -> Reply:
        """Run ``model`` on ``inputs`` (see ``build_infer``); ``opts`` are header keys such
        as ``timeout_ms``, ``priority``, ``stream``, ``outputs`` or ``id``."""
        header, frames = build_infer(model, inputs, **opts)
        if self.shm is None:
            return self.call(header, frames, timeout_s=timeout_s, raise_on_error=raise_on_error)
        for _ in range(2):
            if self.shm.wanted:
                self.shm.adopt(self.call(self.shm.ask(frames), timeout_s=timeout_s))
            h, f, taken = self.shm.place(header, frames)
            try:
                reply = self.call(h, f, timeout_s=timeout_s)
            finally:
                self.shm.release(taken)
            if not (taken and self.shm.stale(reply)):
                break
        return reply.raise_for_status() if raise_on_error else reply

    def models(self) -> Reply:
        return self.call({"op": "models"}, raise_on_error=True)

    def health(self) -> Reply:
        """Never raises on its status: ``UNAVAILABLE`` (not ready yet) is the answer."""
        return self.call({"op": "health"})
