"""A remote KServe v2 server (Triton, KServe, another edged) as edged's offload target.

Why tritonclient's asyncio clients: they are the protocol's reference clients for both
transports, already in the ``kserve`` extra, and they run on the daemon's event loop.
Every call has its own timeout; the token, when configured, travels as a header.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl

import numpy as np

from edged.config.kserve import OffloadConfig
from edged.protocols.kserve.tensors import datatype


class RemoteError(Exception):
    """The remote could not answer; ``down`` says whether it looks unreachable (not tried
    again until a health check passes) rather than refusing this one request."""

    def __init__(self, message: str, down: bool) -> None:
        super().__init__(message)
        self.down = down


class Remote:
    def __init__(self, cfg: OffloadConfig) -> None:
        self.cfg = cfg
        self.headers = ({cfg.token_header: f"Bearer {cfg.token}"
                         if cfg.token_header == "authorization" else cfg.token}
                        if cfg.token else None)
        if cfg.scheme == "grpc":
            import tritonclient.grpc as tg
            import tritonclient.grpc.aio as tga

            root = open(cfg.ca_file, "rb").read() if cfg.ca_file else None  # noqa: SIM115
            self._mod = tg
            self._client = tga.InferenceServerClient(cfg.address, ssl=cfg.tls,
                                                     root_certificates=root)
        else:
            import tritonclient.http as th
            import tritonclient.http.aio as tha

            ctx = ssl.create_default_context(cafile=cfg.ca_file) if cfg.tls else None
            self._mod = th
            self._client = tha.InferenceServerClient(cfg.address, ssl=cfg.tls,
                                                     ssl_context=ctx)

    async def ready(self, model: str, timeout_s: float) -> bool:
        """Server and model ready, within ``timeout_s`` (False on any failure)."""
        try:
            return bool(await asyncio.wait_for(self._ready(model), timeout_s))
        except Exception:
            return False

    async def _ready(self, model: str) -> bool:
        c = self._client
        return await c.is_server_ready(headers=self.headers) and await c.is_model_ready(
            model, headers=self.headers)

    async def infer(self, model: str, feeds: dict[str, np.ndarray], outputs: list[str],
                    timeout_s: float) -> dict[str, np.ndarray]:
        m = self._mod
        inputs = []
        for name, arr in feeds.items():
            a = np.ascontiguousarray(arr)
            i = m.InferInput(name, list(a.shape), datatype(a.dtype))
            i.set_data_from_numpy(a)
            inputs.append(i)
        asked = [m.InferRequestedOutput(n) for n in outputs]
        try:
            r = await asyncio.wait_for(self._client.infer(
                model, inputs, outputs=asked, headers=self.headers), timeout_s)
        except TimeoutError:
            raise RemoteError(f"no answer within {timeout_s * 1000:.0f} ms", down=False) from None
        except Exception as e:
            status = str(getattr(e, "status", lambda: "")() or "")
            down = not any(s in status for s in ("INVALID_ARGUMENT", "NOT_FOUND", "400", "404",
                                                 "RESOURCE_EXHAUSTED", "429", "DEADLINE"))
            raise RemoteError(f"{type(e).__name__}: {e}", down=down) from None
        out = {}
        for n in outputs:
            a = r.as_numpy(n)
            if a is None:
                raise RemoteError(f"the remote answered without output {n!r}", down=False)
            out[n] = a
        return out

    async def close(self) -> None:
        # Closing a client whose server is gone must not fail a reload.
        with contextlib.suppress(Exception):
            await self._client.close()
