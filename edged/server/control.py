"""The control endpoint: operator ops (status, models, reload, load, unload, level, swap).

One table maps each op to its handler; message shapes are in ``edged.protocols.native.control``
(``CONTROL_OPS``) and the client half in ``edged.client``. Never on an inference
endpoint: the control socket lives in the runtime directory, 0660.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from edged.config.server import ServerConfig
from edged.errors import EdgedError, InvalidArgument, NotFound, StartupError, Unavailable
from edged.host.runtime_dir import resolve_endpoints
from edged.model.status import describe_model
from edged.protocols import sockets
from edged.protocols.native.control import CONTROL_OPS
from edged.protocols.native.reply import encode_header
from edged.protocols.sockets import split_envelope
from edged.server.governing import Governing
from edged.server.health import Health
from edged.server.state import ServerState

log = logging.getLogger("edged.server")

#: how long ``edged ctl level`` waits for the governor's step that applies the pin and the
#: swaps it starts
LEVEL_APPLIED_WAIT_S = 15.0

Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class Control:
    def __init__(self, state: ServerState, health: Health, governing: Governing,
                 reload: Callable[[], Awaitable[dict[str, Any]]],
                 load: Callable[[Any], Awaitable[list[str]]],
                 deliveries: Any = None) -> None:
        self.state = state
        self.health = health
        self.governing = governing
        self._reload = reload
        self._load = load
        self.deliveries = deliveries  # edged.server.delivery.deliveries.Deliveries
        self.ops: dict[str, Handler] = {
            "status": self._status, "models": self._models, "reload": self._reload_op,
            "load": self._load_op, "unload": self._unload, "level": self._level,
            "swap": self._swap, "pull": self._pull, "promote": self._promote,
            "rollback": self._rollback_op, "energy": self._energy,
        }
        assert set(self.ops) == set(CONTROL_OPS), "server and client disagree on control ops"
        self.sock: zmq.asyncio.Socket | None = None
        self.endpoint = ""

    def bind(self, cfg: ServerConfig, runtime_dir: Path) -> str:
        """Bind the control socket (``ipc://`` in the runtime directory, 0660); its address."""
        self.endpoint = resolve_endpoints((cfg.control,), runtime_dir)[0]
        c = self.state.zmq.socket(zmq.ROUTER)
        c.setsockopt(zmq.LINGER, 500)
        c.setsockopt(zmq.MAXMSGSIZE, 1 << 20)
        try:
            c.bind(self.endpoint)
        except zmq.ZMQError as e:
            c.close(linger=0)
            raise StartupError(f"cannot bind control endpoint {self.endpoint}: {e}") from None
        sockets.restrict(self.endpoint)
        self.sock = c
        return self.endpoint

    def close(self) -> None:
        if self.sock is not None:
            sockets.close([self.sock], [self.endpoint])
            self.sock = None

    async def loop(self) -> None:
        sock = self.sock
        assert sock is not None
        while True:
            frames = await sock.recv_multipart()
            envelope, body = split_envelope(frames)
            # each op answered from a task of its own: a pull or a rollback takes seconds
            # to minutes, and `edged status` must answer meanwhile
            self.state.spawn(self._answer(sock, envelope, body))

    async def _answer(self, sock: zmq.asyncio.Socket, envelope: list[bytes],
                      body: list[bytes]) -> None:
        reply = await self.handle(body)
        try:
            await sock.send_multipart([*envelope, encode_header(reply)])
        except zmq.ZMQError as e:
            log.debug("control reply not sent: %s", e)

    async def handle(self, body: list[bytes]) -> dict[str, Any]:
        rid = None
        try:
            if len(body) != 1:
                raise InvalidArgument("a control message is one JSON frame")
            try:
                msg = json.loads(body[0])
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise InvalidArgument(f"not JSON: {e}") from None
            if not isinstance(msg, dict):
                raise InvalidArgument("a control message is a JSON object")
            rid = msg.get("id")
            op = self.ops.get(msg.get("op"))  # type: ignore[arg-type]
            if op is None:
                raise NotFound(f"unknown control op {msg.get('op')!r}; known: "
                               f"{', '.join(self.ops)}")
            return {"status": "OK", "id": rid, **await op(msg)}
        except EdgedError as e:
            return {"status": e.status, "id": rid, "error": str(e)}

    async def _status(self, msg: dict[str, Any]) -> dict[str, Any]:
        return self.health.status()

    async def _models(self, msg: dict[str, Any]) -> dict[str, Any]:
        return {"models": self.state.registry.describe(),
                "pipelines": self.state.registry.describe_pipelines()}

    async def _reload_op(self, msg: dict[str, Any]) -> dict[str, Any]:
        res = await self._reload()
        if not res["ok"]:
            # A rejected reload is the operator's input error: say so with its reasons.
            return {"status": "INVALID_ARGUMENT", "reload": res,
                    "error": "; ".join(map(str, res["error"]))}
        return {"reload": res}

    async def _level(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Pin (or release) a level and answer with the governor's state once its next step
        applied it, so the reply's ``level`` is the one now in force (it used to read the
        old level for up to ``interval_s``)."""
        loop = asyncio.get_running_loop()
        before = self.governing.steps
        snapshot = self.governing.pin_level(msg.get("level"))
        end = loop.time() + LEVEL_APPLIED_WAIT_S
        while self.governing.steps == before and loop.time() < end:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.05)  # the swaps the step started are under way
        while any(m.swapping for m in self.state.registry) and loop.time() < end:
            await asyncio.sleep(0.05)  # answer once the models are on their new rungs
        return {"governor": self.governing.summary() or snapshot}

    async def _energy(self, msg: dict[str, Any]) -> dict[str, Any]:
        """A new energy budget or mission (or only what is in force): the reply is the
        budget in force once it applies."""
        return self.governing.set_energy(msg)

    async def _unload(self, msg: dict[str, Any]) -> dict[str, Any]:
        m = self.state.registry.get(_str_arg(msg, "model"))
        await m.drain(self.state.config.server.drain_timeout_s)
        await m.close()
        return {"model": describe_model(m)}

    async def _load_op(self, msg: dict[str, Any]) -> dict[str, Any]:
        name = _str_arg(msg, "model")
        mc = self.state.config.model(name)
        if mc is None and self.state.config.pipeline(name) is not None:
            raise InvalidArgument(f"{name!r} is a pipeline: it serves while its models do; "
                                  "load those")
        if mc is None:
            raise NotFound(f"model {name!r} is not in {self.state.config.file}; add it there "
                           "and run `edged ctl reload`")
        m = self.state.registry.find(name)
        if m is not None and m.ready:
            return {"model": describe_model(m)}
        failed = await self._load(mc)
        m = self.state.registry.get(name)
        if failed:
            raise Unavailable(f"model {name!r} failed to load: {m.error}")
        return {"model": describe_model(m)}

    async def _pull(self, msg: dict[str, Any]) -> dict[str, Any]:
        """A delivered model's new version (or ``version``) through every stage; the reply
        says where it ended (``delivery``) and is an error when it was refused."""
        name = _str_arg(msg, "model")
        version = msg.get("version")
        if version is not None and (not isinstance(version, str) or not version):
            raise InvalidArgument("'version' must be a non-empty string")
        before = (self.deliveries.entries.get(name) or {}).get("last_refusal")
        return _delivery_answer(await self.deliveries.update(name, version, "operator"), before)

    async def _promote(self, msg: dict[str, Any]) -> dict[str, Any]:
        name = _str_arg(msg, "model")
        before = (self.deliveries.entries.get(name) or {}).get("last_refusal")
        return _delivery_answer(await self.deliveries.promote(name, _str_arg(msg, "version")),
                                before)

    async def _rollback_op(self, msg: dict[str, Any]) -> dict[str, Any]:
        name = _str_arg(msg, "model")
        return {"delivery": await self.deliveries.rollback(name, "by the operator")}

    async def _swap(self, msg: dict[str, Any]) -> dict[str, Any]:
        m = self.state.registry.get(_str_arg(msg, "model"))
        variant = _str_arg(msg, "variant")
        pin = await self.governing.pin_variant(m, variant)  # kept for the next load too
        failed = pin.pop("swap_failed")
        want = m.variant_names[self.governing.index_for(m)]
        out: dict[str, Any] = {"model": describe_model(m), **pin}
        try:
            m.check_ready()
        except Unavailable as e:  # loading, failed or unloaded: nothing to swap now
            out.update(status=e.status, error=f"{e}; the pin applies when it loads")
            return out
        if failed or m.active_variant != want:
            target = variant if failed else want
            out.update(status="INTERNAL", error=f"swap to {target!r} failed: "
                       f"{(m.last_swap or {}).get('error')}")
        return out


def _delivery_answer(entry: dict[str, Any], before: Any) -> dict[str, Any]:
    """A pull's or promotion's reply: the model's delivery entry, and an error when the
    action ended in a refusal of its own (not one the entry already held before it)."""
    out: dict[str, Any] = {"delivery": entry}
    refusal = entry.get("last_refusal")
    if refusal is not None and refusal is not before:
        out.update(status="UNAVAILABLE", error=f"refused at {refusal['stage']}: "
                   f"{refusal['message']}")
    return out


def _str_arg(msg: dict[str, Any], key: str) -> str:
    v = msg.get(key)
    if not isinstance(v, str) or not v:
        raise InvalidArgument(f"{key!r} must be a non-empty string")
    return v
