"""A client that behaves as Frigate's ``zmq`` detector plugin does, for tests and benchmarks.

Written from the plugin's behaviour as docs/frigate.md describes it (Frigate 0.17+,
``frigate/detectors/plugins/zmq_ipc.py``), not from its code: one REQ socket with
``RCVTIMEO`` = ``SNDTIMEO`` = ``request_timeout_ms``; in the constructor the start-up
handshake (``model_request``, then ``model_data`` with the file if the server lacks
it; 30 s for each answer); ``detect_raw`` returns zeros while not ready and never
retries the handshake on its own; after a timeout or ZMQ error during inference it
recreates its socket and repeats the whole handshake. Anything but one JSON frame with
true flags leaves it not ready, as Frigate's plugin is.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zmq

HANDSHAKE_WAIT_S = 30.0
ZEROS = np.zeros((20, 6), np.float32)


@dataclass
class Events:
    """What the plugin would have logged, for tests to read."""

    handshakes: int = 0
    transfers: int = 0
    resets: int = 0
    timeouts: int = 0
    not_ready_zeros: int = 0
    answers: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class FrigateDetector:
    """One Frigate ``zmq`` detector process: ``FrigateDetector(endpoint, model_path, ...)``."""

    def __init__(self, endpoint: str, model_path: str | Path, model_type: str = "ssd",
                 request_timeout_ms: int = 200, ctx: zmq.Context | None = None,
                 model_bytes: bytes | None = None) -> None:
        self.endpoint = endpoint
        self.model_path = Path(model_path)
        self.model_name = self.model_path.name  # os.path.basename(model.path)
        self.model_type = model_type
        self.timeout_ms = request_timeout_ms
        self._model_bytes = model_bytes
        self.ctx = ctx or zmq.Context.instance()
        self.events = Events()
        self.ready = False
        self.handshake_s: float | None = None
        self.sock = self._socket()
        self._handshake()

    # -- socket and handshake ------------------------------------------------------------
    def _socket(self) -> zmq.Socket:
        s = self.ctx.socket(zmq.REQ)
        s.setsockopt(zmq.RCVTIMEO, self.timeout_ms)
        s.setsockopt(zmq.SNDTIMEO, self.timeout_ms)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(self.endpoint)
        return s

    def _reset(self) -> None:
        self.events.resets += 1
        self.sock.close(linger=0)
        self.sock = self._socket()
        self._handshake()

    def _ask(self, frames: list[bytes]) -> dict[str, Any] | None:
        """Send, wait up to 30 s for one JSON frame; None (not ready) on anything else."""
        try:
            self.sock.send_multipart(frames)
        except zmq.ZMQError as e:
            self.events.errors.append(f"send: {e}")
            return None
        if not self.sock.poll(int(HANDSHAKE_WAIT_S * 1000), zmq.POLLIN):
            self.events.errors.append("no answer within 30 s")
            return None
        reply = self.sock.recv_multipart()
        if len(reply) != 1:
            self.events.errors.append(f"answer of {len(reply)} frames")
            return None
        try:
            answer = json.loads(reply[0])
        except ValueError:
            self.events.errors.append("Received non-JSON response for model availability check")
            return None
        if not isinstance(answer, dict):
            self.events.errors.append("answer is not a JSON object")
            return None
        self.events.answers.append(answer)
        return answer

    def _handshake(self) -> None:
        t0 = time.perf_counter()
        self.events.handshakes += 1
        self.ready = False
        a = self._ask([json.dumps({"model_request": True,
                                   "model_name": self.model_name}).encode()])
        if a is not None and a.get("model_available") and a.get("model_loaded"):
            self.ready = True
        elif a is not None and a.get("model_available"):
            self.events.errors.append("Model exists but failed to load")
        elif a is not None:
            self.events.transfers += 1
            data = self._model_bytes if self._model_bytes is not None else \
                self.model_path.read_bytes()
            b = self._ask([json.dumps({"model_data": True,
                                       "model_name": self.model_name}).encode(), data])
            self.ready = bool(b is not None and b.get("model_saved") and b.get("model_loaded"))
        self.handshake_s = time.perf_counter() - t0

    # -- inference -------------------------------------------------------------------------
    def detect_raw(self, tensor: np.ndarray) -> np.ndarray:
        """``[20, 6]`` float32 for one prepared model input; zeros when not ready."""
        if not self.ready:
            self.events.not_ready_zeros += 1
            return ZEROS.copy()
        header = {"shape": list(tensor.shape), "dtype": tensor.dtype.name,
                  "model_type": self.model_type}
        try:
            self.sock.send_multipart([json.dumps(header).encode(),
                                      np.ascontiguousarray(tensor).tobytes()])
            reply = self.sock.recv_multipart()
        except zmq.ZMQError as e:  # zmq.Again on a timeout
            self.events.timeouts += 1
            self.events.errors.append(f"inference: {e}")
            self._reset()
            return ZEROS.copy()
        if len(reply) == 1 and len(reply[0]) == ZEROS.nbytes:
            return np.frombuffer(reply[0], np.float32).reshape(20, 6).copy()
        if len(reply) == 2:  # [{"shape","dtype"}, bytes]: reshaped by the header, unchecked
            h = json.loads(reply[0])
            return np.frombuffer(reply[1], h.get("dtype", "float32")).reshape(h["shape"])
        self.events.errors.append(f"unexpected reply of {len(reply)} frame(s)")
        return ZEROS.copy()

    def close(self) -> None:
        self.sock.close(linger=0)
