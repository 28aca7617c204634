"""A remote KServe v2 server (Triton, MLServer, KServe, another edged) as edged's offload target.

Why tritonclient's asyncio clients: they are the protocol's reference clients for both
transports, already in the ``kserve`` extra, and they run on the daemon's event loop.
Every call has its own timeout; the token, when configured, travels as a header.

What the real servers differ in, and what this client does about it (docs/kserve.md,
"Offloading to Triton, MLServer and KServe"):

- **Binary tensors over HTTP.** Triton, KServe and edged take the binary-tensor extension;
  MLServer does not (it answers 422 or 500). Over HTTP the first request goes binary; if
  the remote answers it with an HTTP error, the same request is sent again with JSON
  tensors, and if that one is answered, JSON is what this remote gets from then on
  (``tensors`` says which). A JSON body always carries ``Content-Type: application/json``:
  KServe refuses one without it.
- **Which failure is whose.** A refusal or an error the remote *answers* (any HTTP status,
  any gRPC status but UNAVAILABLE) is that one request's failure: the request is computed
  here, and the remote stays in use. Only a connection failure (refused, reset, gRPC
  UNAVAILABLE) says the remote is down (``RemoteError.down``). KServe and MLServer close a
  kept-alive HTTP connection after answering 500, so a connection the server closed under
  a request is tried once more on a fresh one before it counts.
- **The remote model's metadata** is read by :meth:`Remote.metadata` and compared with the
  local model's tensors by :func:`metadata_mismatch`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Iterable
from typing import Any

import numpy as np

from edged.backends.base import TensorSpec
from edged.config.kserve import OffloadConfig
from edged.protocols.kserve.tensors import datatype

log = logging.getLogger(__name__)

#: the gRPC status that means "not reachable" (the channel could not connect or broke)
DOWN_STATUS = "StatusCode.UNAVAILABLE"


class RemoteError(Exception):
    """The remote could not answer; ``down`` says whether it looks unreachable (not tried
    again until a health check passes) rather than refusing or failing this one request."""

    def __init__(self, message: str, down: bool) -> None:
        super().__init__(message)
        self.down = down


class Remote:
    def __init__(self, cfg: OffloadConfig) -> None:
        self.cfg = cfg
        self._token = ({cfg.token_header: f"Bearer {cfg.token}"
                        if cfg.token_header == "authorization" else cfg.token}
                       if cfg.token else {})
        self.http = cfg.scheme != "grpc"
        #: over HTTP: does the remote take binary tensors (None: not known yet)
        self.binary: bool | None = None if self.http else True
        if not self.http:
            import tritonclient.grpc as tg
            import tritonclient.grpc.aio as tga

            self._mod: Any = tg
            self._client: Any = tga.InferenceServerClient(
                cfg.address, ssl=cfg.tls, root_certificates=cfg.ca_file,
                channel_args=_channel_args(tg, cfg.health_interval_s))
        else:
            import tritonclient.http as th
            import tritonclient.http.aio as tha

            ctx = ssl.create_default_context(cafile=cfg.ca_file) if cfg.tls else None
            self._mod = th
            self._client = tha.InferenceServerClient(cfg.address, ssl=cfg.tls,
                                                     ssl_context=ctx)

    @property
    def tensors(self) -> str:
        """How tensors travel to this remote: ``binary``, ``json`` or ``not known yet``."""
        return {True: "binary", False: "json", None: "not known yet"}[self.binary]

    def _headers(self, **extra: str) -> dict[str, str] | None:
        """A new dict per call: tritonclient's HTTP client writes into the one it is given
        (``Inference-Header-Content-Length``), which must not leak into the next call."""
        h = {**self._token, **extra}
        if self.http:
            # An error body readable in the log: tritonclient does not inflate one.
            h.setdefault("Accept-Encoding", "identity")
        return h or None

    async def ready(self, model: str, timeout_s: float) -> bool:
        """Server and model ready, within ``timeout_s`` (False on any failure)."""
        try:
            return bool(await asyncio.wait_for(self._ready(model), timeout_s))
        except Exception:
            return False

    async def _ready(self, model: str) -> bool:
        c = self._client
        return await c.is_server_ready(headers=self._headers()) and await c.is_model_ready(
            model, headers=self._headers())

    async def metadata(self, model: str, timeout_s: float) -> dict[str, list[RemoteTensor]]:
        """The remote model's ``inputs`` and ``outputs`` as it states them. No answer in
        ``timeout_s`` counts as down, as for the readiness check it follows."""
        try:
            meta = await asyncio.wait_for(self._client.get_model_metadata(
                model, headers=self._headers()), timeout_s)
        except TimeoutError:
            raise RemoteError(f"no metadata within {timeout_s * 1000:.0f} ms",
                              down=True) from None
        except Exception as e:
            raise _error(e) from None
        if not isinstance(meta, dict):  # gRPC: a ModelMetadataResponse
            meta = {k: [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)}
                        for t in getattr(meta, k)] for k in ("inputs", "outputs")}
        return {k: [RemoteTensor.read(t) for t in meta.get(k) or []]
                for k in ("inputs", "outputs")}

    async def infer(self, model: str, feeds: dict[str, np.ndarray], outputs: list[str],
                    timeout_s: float) -> dict[str, np.ndarray]:
        try:
            r = await asyncio.wait_for(self._infer(model, feeds, outputs), timeout_s)
        except TimeoutError:
            raise RemoteError(f"no answer within {timeout_s * 1000:.0f} ms", down=False) from None
        out = {}
        for n in outputs:
            a = r.as_numpy(n)
            if a is None:
                raise RemoteError(f"the remote answered without output {n!r}", down=False)
            out[n] = a
        return out

    async def _infer(self, model: str, feeds: dict[str, np.ndarray], outputs: list[str]) -> Any:
        if self.binary is not False:
            try:
                r = await self._call(model, feeds, outputs, binary=True)
            except RemoteError as e:
                if self.binary is not None or e.down:
                    raise
                # Not known yet whether it takes binary tensors: the same request in JSON.
                try:
                    r = await self._call(model, feeds, outputs, binary=False)
                except RemoteError as j:
                    raise RemoteError(f"{e} (and with JSON tensors: {j})", down=j.down) from None
                if self.binary is None:  # once, though several requests may learn it
                    self.binary = False
                    log.warning("offload remote %s answered binary tensors with %s; sending "
                                "it JSON tensors from now on", self.cfg.url, e)
                return r
            if self.binary is None:
                self.binary = True
            return r
        return await self._call(model, feeds, outputs, binary=False)

    async def _call(self, model: str, feeds: dict[str, np.ndarray], outputs: list[str],
                    binary: bool) -> Any:
        m = self._mod
        inputs = []
        for name, arr in feeds.items():
            a = np.ascontiguousarray(arr)
            i = m.InferInput(name, list(a.shape), datatype(a.dtype))
            if self.http:
                i.set_data_from_numpy(a, binary_data=binary)
            else:
                i.set_data_from_numpy(a)
            inputs.append(i)
        if self.http:
            asked = [m.InferRequestedOutput(n, binary_data=binary) for n in outputs]
            extra = {} if binary else {"Content-Type": "application/json"}
        else:
            asked, extra = [m.InferRequestedOutput(n) for n in outputs], {}
        for attempt in (1, 2):
            try:
                return await self._client.infer(model, inputs, outputs=asked,
                                                headers=self._headers(**extra))
            except Exception as e:
                err = _error(e)
                if attempt == 1 and self.http and _closed_under_us(e):
                    continue  # a kept-alive connection the server closed: once more, anew
                raise err from None
        raise AssertionError("unreachable")

    async def close(self) -> None:
        # Closing a client whose server is gone must not fail a reload.
        with contextlib.suppress(Exception):
            await self._client.close()


def _channel_args(tg: Any, health_interval_s: float) -> list[tuple[str, Any]]:
    """tritonclient's own channel options, and reconnection attempts at most a health
    interval apart (gRPC's default backoff grows to 2 minutes): a remote that comes back
    is seen by the next health check, not minutes later."""
    ka = tg.KeepAliveOptions()
    backoff = max(1000, int(health_interval_s * 1000))
    return [("grpc.max_send_message_length", tg.MAX_GRPC_MESSAGE_SIZE),
            ("grpc.max_receive_message_length", tg.MAX_GRPC_MESSAGE_SIZE),
            ("grpc.keepalive_time_ms", ka.keepalive_time_ms),
            ("grpc.keepalive_timeout_ms", ka.keepalive_timeout_ms),
            ("grpc.keepalive_permit_without_calls", ka.keepalive_permit_without_calls),
            ("grpc.http2.max_pings_without_data", ka.http2_max_pings_without_data),
            ("grpc.initial_reconnect_backoff_ms", backoff),
            ("grpc.min_reconnect_backoff_ms", backoff),
            ("grpc.max_reconnect_backoff_ms", backoff)]


def _error(e: Exception) -> RemoteError:
    """A client exception as a RemoteError: down only for a connection failure."""
    status = getattr(e, "status", None)
    status = str(status() or "") if callable(status) else ""
    if status:  # the remote answered: an HTTP status code or a gRPC status
        return RemoteError(f"{status}: {_message(e)}", down=status == DOWN_STATUS)
    down = isinstance(e, OSError) or _is_aiohttp_connection_error(e)
    return RemoteError(f"{type(e).__name__}: {e}", down=down)


def _message(e: Exception) -> str:
    msg = e.message() if callable(getattr(e, "message", None)) else str(e)
    return " ".join(str(msg).split())[:500]


def _is_aiohttp_connection_error(e: Exception) -> bool:
    try:
        import aiohttp
    except ImportError:
        return False
    return isinstance(e, aiohttp.ClientConnectionError)


def _closed_under_us(e: Exception) -> bool:
    """The server closed a connection the client had kept (not: nothing listens)."""
    try:
        import aiohttp
    except ImportError:
        return False
    return (isinstance(e, aiohttp.ClientConnectionError)
            and not isinstance(e, aiohttp.ClientConnectorError))


class RemoteTensor:
    """One input or output of the remote model's metadata."""

    __slots__ = ("datatype", "name", "shape")

    def __init__(self, name: str, datatype: str, shape: tuple[int, ...]) -> None:
        self.name, self.datatype, self.shape = name, datatype, shape

    @classmethod
    def read(cls, t: Any) -> RemoteTensor:
        """From a metadata entry (gRPC states int64 dims; as JSON they may be strings)."""
        try:
            return cls(str(t["name"]), str(t["datatype"]),
                       tuple(int(d) for d in t.get("shape") or ()))
        except (KeyError, TypeError, ValueError, AttributeError):
            raise RemoteError(f"unreadable tensor in the remote's metadata: {t!r}",
                              down=False) from None

    def __repr__(self) -> str:
        return f"{self.name} {self.datatype} {list(self.shape)}"


def metadata_mismatch(inputs: Iterable[TensorSpec], outputs: Iterable[TensorSpec],
                      remote: dict[str, list[RemoteTensor]]) -> str | None:
    """Why the remote model cannot stand for the local one (None: it can).

    The remote must take exactly the local model's inputs and give at least its outputs,
    each with the same datatype and a compatible shape: the same rank, each dimension
    equal or ``-1`` (any size) on either side. A remote that states no inputs and no
    outputs at all (a custom model server that does not describe its model) cannot be
    checked and is not refused for it."""
    if not remote["inputs"] and not remote["outputs"]:
        return None
    problems: list[str] = []
    ins = {t.name: t for t in remote["inputs"]}
    local_in = list(inputs)
    for s in local_in:
        problems += _compare("input", s, ins.get(s.name))
    extra = sorted(set(ins) - {s.name for s in local_in})
    if extra:
        problems.append(f"the remote also needs input(s) {', '.join(map(repr, extra))}, "
                        "which the local model does not take")
    outs = {t.name: t for t in remote["outputs"]}
    for s in outputs:
        problems += _compare("output", s, outs.get(s.name))
    return "; ".join(problems) or None


def _compare(kind: str, s: TensorSpec, r: RemoteTensor | None) -> list[str]:
    local = f"{datatype(s.dtype)} {list(s.shape)}"
    if r is None:
        return [f"{kind} {s.name!r} ({local}) is not in the remote model"]
    if r.datatype != datatype(s.dtype) or len(r.shape) != len(s.shape) or any(
            a != b and -1 not in (a, b) for a, b in zip(s.shape, r.shape, strict=True)):
        return [f"{kind} {s.name!r} is {r.datatype} {list(r.shape)} on the remote, "
                f"{local} here"]
    return []
