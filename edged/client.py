"""A small synchronous client for edged's wire protocol (used by `edged infer` and tests).

DEALER socket, so several requests may be in flight (``send``/``recv``) as well as
one-shot calls (``infer``). Optional CURVE keys for TCP endpoints.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from edged.protocol import DTYPES, decode_reply


@dataclass
class Reply:
    header: dict[str, Any]
    outputs: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def status(self) -> str:
        return str(self.header.get("status"))

    @property
    def ok(self) -> bool:
        return self.status == "OK"


class ClientTimeout(Exception):
    pass


class Client:
    def __init__(
        self,
        endpoint: str,
        timeout_s: float = 10.0,
        server_public_key: str | Path | None = None,
        client_secret_key: str | Path | None = None,
        context: zmq.Context[Any] | None = None,
    ) -> None:
        self.ctx = context or zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        # A DEALER with no connected peer (daemon down, CURVE handshake refused) blocks
        # in send(); bound it like the reply wait.
        self.sock.setsockopt(zmq.SNDTIMEO, int(timeout_s * 1000))
        if server_public_key is not None:
            from zmq.auth import load_certificate

            if client_secret_key is None:
                raise ValueError("CURVE needs both the server's public key and a client key pair")
            server_pub, _ = load_certificate(str(server_public_key))
            pub, sec = load_certificate(str(client_secret_key))
            if sec is None:
                raise ValueError(f"{client_secret_key} holds no secret key (use *.key_secret)")
            self.sock.curve_serverkey = server_pub
            self.sock.curve_publickey = pub
            self.sock.curve_secretkey = sec
        self.sock.connect(endpoint)
        self.timeout_ms = int(timeout_s * 1000)
        self._ids = itertools.count(1)

    def close(self) -> None:
        self.sock.close(linger=0)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- raw send/recv (pipelining) ------------------------------------------------------
    def send(self, header: dict[str, Any], frames: list[Any] | None = None) -> Any:
        header = {"v": 1, **header}
        header.setdefault("id", next(self._ids))
        try:
            self.sock.send_multipart([json.dumps(header).encode(), *(frames or [])], copy=False)
        except zmq.Again:
            raise ClientTimeout(f"could not send within {self.timeout_ms} ms: no daemon "
                                "accepted the connection (down, or the CURVE key was refused)") \
                from None
        return header["id"]

    def recv(self, timeout_s: float | None = None) -> Reply:
        t = self.timeout_ms if timeout_s is None else int(timeout_s * 1000)
        if not self.sock.poll(t):
            raise ClientTimeout(f"no reply within {t} ms")
        frames = self.sock.recv_multipart()
        header, outs = decode_reply(frames)
        return Reply(header, outs)

    def call(self, header: dict[str, Any], frames: list[Any] | None = None) -> Reply:
        rid = self.send(header, frames)
        while True:
            r = self.recv()
            if r.header.get("id") == rid:
                return r

    # -- ops ------------------------------------------------------------------------------
    def health(self) -> Reply:
        return self.call({"op": "health"})

    def models(self) -> Reply:
        return self.call({"op": "models"})

    def infer(self, model: str, inputs: Any, **opts: Any) -> Reply:
        header, frames = build_infer(model, inputs, **opts)
        return self.call(header, frames)


def build_infer(model: str, inputs: Any, **opts: Any) -> tuple[dict[str, Any], list[Any]]:
    """Header and frames for an infer request.

    ``inputs``: one array, a dict name -> array, an image path, or (encoding, bytes)."""
    metas: list[dict[str, Any]] = []
    frames: list[Any] = []
    items: list[tuple[str | None, Any]]
    items = list(inputs.items()) if isinstance(inputs, dict) else [(None, inputs)]
    for name, val in items:
        meta: dict[str, Any] = {}
        if name is not None:
            meta["name"] = name
        if isinstance(val, (str, Path)):
            p = Path(val)
            enc = {".jpg": "jpeg", ".jpeg": "jpeg", ".png": "png"}.get(p.suffix.lower())
            if enc is None:
                raise ValueError(f"{p}: only .jpg/.jpeg/.png images can be sent as files")
            meta["encoding"] = enc
            frames.append(p.read_bytes())
        elif isinstance(val, tuple) and len(val) == 2 and isinstance(val[0], str):
            meta["encoding"] = val[0]
            frames.append(bytes(val[1]))
        else:
            a = np.require(val, requirements="C")  # keeps rank 0 (ascontiguousarray does not)
            if a.dtype.name not in DTYPES:
                raise ValueError(f"dtype {a.dtype} is not supported by the protocol")
            if a.dtype.byteorder == ">":
                a = a.astype(a.dtype.newbyteorder("<"))
            meta.update(dtype=a.dtype.name, shape=list(a.shape))
            frames.append(a.data if a.nbytes else b"")
        metas.append(meta)
    header = {"op": "infer", "model": model, "inputs": metas, **opts}
    return header, frames
