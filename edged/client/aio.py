"""The asyncio client: many requests in flight on one DEALER, each awaited by its id.

One reader task (owned by the client, started with the first request, ended by
``close``) hands each reply to the future waiting for its id. A request that times out
or is cancelled forgets its id at once, so its late reply finds nobody and is dropped
(counted in ``stale_replies``); it never reaches another request.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from edged.client.errors import ClientTimeout, EdgedClientError, ProtocolViolation
from edged.client.messages import Reply, build_infer, parse_reply, with_version
from edged.client.shm import ShmSlots
from edged.client.socket_support import load_curve_keys, open_dealer

log = logging.getLogger("edged.client")


class AsyncClient:
    """``async with AsyncClient(endpoint) as c: r = await c.infer(model, array)``.

    Same replies and exceptions as ``Client``; use ``asyncio.gather`` or tasks for many
    requests at once. Use one client from one event loop. ``shm=True`` as ``Client``;
    a request finding every slot in flight goes as frames."""

    def __init__(
        self,
        endpoint: str,
        timeout_s: float = 10.0,
        server_public_key: str | Path | None = None,
        client_secret_key: str | Path | None = None,
        context: zmq.asyncio.Context | None = None,
        shm: bool = False,
        shm_slots: int = 8,
    ) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.ctx = context or zmq.asyncio.Context.instance()
        self.sock = open_dealer(self.ctx, endpoint, load_curve_keys(server_public_key,
                                                                      client_secret_key), None)
        self._ids = itertools.count(1)
        self._pending: dict[str | int, asyncio.Future[Reply]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._closed = False
        #: Replies dropped because their request had timed out or was cancelled.
        self.stale_replies = 0
        self.shm = ShmSlots(shm_slots) if shm else None
        self._shm_lock = asyncio.Lock()

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop the reader; requests still waiting fail with ClientTimeout."""
        if self.shm is not None and self.shm.ring is not None:
            name = self.shm.drop()
            # give the ring back now rather than when the daemon reaps it
            with contextlib.suppress(ClientTimeout):
                await self.call({"op": "shm", "release": name}, timeout_s=1.0)
        self._closed = True
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
            self._reader = None
        self._fail_all(ClientTimeout(f"the client for {self.endpoint} was closed"))
        self.sock.close(linger=0)

    # -- requests ---------------------------------------------------------------------------
    async def call(self, header: dict[str, Any], frames: list[Any] | None = None, *,
                   timeout_s: float | None = None, raise_on_error: bool = False) -> Reply:
        """Send one request and await its own reply (``timeout_s`` bounds send + wait)."""
        if self._closed:
            raise RuntimeError("this AsyncClient is closed")
        h = with_version(header, next(self._ids))
        rid = h["id"]
        if rid in self._pending:
            raise ValueError(f"id {rid!r} is already in flight on this client; ids must be "
                             "unique among requests in flight")
        fut: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        self._start_reader()
        wait = self.timeout_s if timeout_s is None else timeout_s
        try:
            async with asyncio.timeout(wait):
                await self.sock.send_multipart([json.dumps(h).encode(), *(frames or [])],
                                               copy=False)
                reply = await fut
        except TimeoutError:
            raise ClientTimeout(f"no reply from {self.endpoint} within {wait:g} s", rid) \
                from None
        finally:
            # Done, timed out or cancelled: a reply that still comes finds nobody.
            if self._pending.get(rid) is fut:
                del self._pending[rid]
        return reply.raise_for_status() if raise_on_error else reply

    async def infer(self, model: str, inputs: Any, *, raise_on_error: bool = True,
                    timeout_s: float | None = None, **opts: Any) -> Reply:
        header, frames = build_infer(model, inputs, **opts)
        shm = self.shm
        if shm is None:
            return await self.call(header, frames, timeout_s=timeout_s,
                                   raise_on_error=raise_on_error)
        for _ in range(2):
            if shm.wanted:
                async with self._shm_lock:
                    if shm.wanted:
                        shm.adopt(await self.call(shm.ask(frames), timeout_s=timeout_s))
            h, f, taken = shm.place(header, frames)
            try:
                reply = await self.call(h, f, timeout_s=timeout_s)
            finally:
                shm.release(taken)
            if not (taken and shm.stale(reply)):
                break
        return reply.raise_for_status() if raise_on_error else reply

    async def models(self) -> Reply:
        return await self.call({"op": "models"}, raise_on_error=True)

    async def health(self) -> Reply:
        """Never raises on its status: ``UNAVAILABLE`` (not ready yet) is the answer."""
        return await self.call({"op": "health"})

    # -- the reader -------------------------------------------------------------------------
    def _start_reader(self) -> None:
        if self._reader is None or self._reader.done():
            self._reader = asyncio.get_running_loop().create_task(
                self._read_replies(), name=f"edged-client-reader {self.endpoint}")

    async def _read_replies(self) -> None:
        try:
            while True:
                frames = await self.sock.recv_multipart()
                self._deliver(frames)
        except zmq.ZMQError as e:
            self._fail_all(ClientTimeout(f"the socket to {self.endpoint} failed: {e}"))

    def _deliver(self, frames: list[bytes]) -> None:
        try:
            reply = parse_reply(frames)
        except ProtocolViolation as e:
            # Unattributable: the waiting request times out; say why in the log.
            log.warning("dropped an undecodable reply from %s: %s", self.endpoint, e)
            self.stale_replies += 1
            return
        fut = self._pending.pop(reply.id, None) if reply.id is not None else None
        if fut is None or fut.done():
            self.stale_replies += 1
            return
        fut.set_result(reply)

    def _fail_all(self, err: EdgedClientError) -> None:
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(err)
