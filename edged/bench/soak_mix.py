"""The soak's requests and the client that sends them: ``MixClient``, one DEALER sending
the mix open loop and checking every reply.

Why one client for the probe and the load: the capacity probe (``soak_probe``) and the
steady load (``soak``) run this same class, so the probe measures the load the soak will
run — the same mix, the same work per request (building, timing and checking it), the
same open-loop pacing. The mix: mostly valid inferences of the digits model (checked
against a reference ONNX Runtime run), plus invalid requests, requests that expire (a
tiny ``timeout_ms``) and superseded stream frames (bursts on one ``stream``).
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import numpy as np

from edged.testing.harness import ROOT

#: the digits model's directory: ``validation.npz`` (the images) and ``cnn-fp32.onnx``
#: (the reference the valid answers are checked against)
DIGITS = ROOT / "models" / "digits"

KINDS = ("valid", "invalid", "expired", "stream")

#: which statuses each kind of request may get; anything else is a failure. A valid
#: request answered RESOURCE_EXHAUSTED (queue full) is the daemon's honest answer to a
#: burst: counted and reported as refused, but not a failure.
ALLOWED = {"valid": ("OK", "RESOURCE_EXHAUSTED"),
           "invalid": ("INVALID_ARGUMENT", "NOT_FOUND", "UNSUPPORTED_VERSION"),
           "expired": ("DEADLINE_EXCEEDED", "OK", "RESOURCE_EXHAUSTED"),
           "stream": ("OK", "DROPPED", "RESOURCE_EXHAUSTED")}

META = [{"name": "input", "dtype": "float32", "shape": [1, 1, 28, 28]}]


def samples(digits: Path, n: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """``n`` validation images as model tensors and their reference argmax."""
    import onnxruntime as ort

    x = np.load(digits / "validation.npz")["x"][:n].astype(np.float32)[:, None] / 255.0
    sess = ort.InferenceSession(str(digits / "cnn-fp32.onnx"),
                                providers=["CPUExecutionProvider"])
    ref = sess.run(None, {"input": x})[0]
    return np.ascontiguousarray(x), np.argmax(ref, axis=1)


def header(rid: str, model: str, **kw: Any) -> bytes:
    return json.dumps({"v": 1, "id": rid, "op": "infer", "model": model, "inputs": META,
                       **kw}).encode()


def invalid_frames(rid: str, model: str, j: int, good: bytes) -> list[bytes]:
    """Malformed requests that still carry an id, so their replies can be matched."""
    variants = [
        lambda: [header(rid, model), good[:-4]],                      # byte length
        lambda: [header(rid, model, colour="red"), good],             # unknown key
        lambda: [json.dumps({"v": 2, "id": rid}).encode()],           # version
        lambda: [header(rid, "no-such-model"), good],                 # NOT_FOUND
        lambda: [header(rid, model,
                        inputs=[{"dtype": "float32", "shape": [1 << 30, 1 << 30]}]), good],
        lambda: [header(rid, model, inputs=[{"dtype": "int32",
                                             "shape": [1, 1, 28, 28]}]), good],
        lambda: [header(rid, model, timeout_ms=-1), good],
    ]
    return variants[j % len(variants)]()


def mix_frames(kind: str, rid: str, model: str, k: int, seq: int, good: bytes) -> list[Any]:
    """One request of the soak's mix: valid, invalid, expired or a camera stream frame."""
    if kind == "valid":
        return [header(rid, model), good]
    if kind == "invalid":
        return invalid_frames(rid, model, seq, good)
    if kind == "expired":
        return [header(rid, model, timeout_ms=0.001), good]
    return [header(rid, model, stream=f"cam-{k}-{seq % 3}"), good]


class MixClient:
    """One DEALER sending the soak's mix open loop and checking every reply, counting per
    *bucket* (a latency window of the soak or a step of the probe): what was sent, how it
    was answered and the valid requests' latencies in seconds."""

    def __init__(self, k: int, endpoint: str, model: str, mix: dict[str, float],
                 seed: int, n_buckets: int, digits: Path = DIGITS) -> None:
        import zmq

        self.k, self.model = k, model
        x, self.want = samples(digits, 64)
        self.good = [x[i:i + 1].tobytes() for i in range(len(x))]
        self.rng = random.Random(seed)
        self.kinds = list(mix)
        self.weights = [mix[kind] for kind in self.kinds]
        self.ctx = zmq.Context()
        self.s = self.ctx.socket(zmq.DEALER)
        self.s.setsockopt(zmq.LINGER, 0)
        self.s.setsockopt(zmq.RCVHWM, 0)
        self.s.setsockopt(zmq.SNDHWM, 0)
        self.s.connect(endpoint)
        #: id -> (sent at, kind, sample, bucket)
        self.pending: dict[str, tuple[float, str, int, int]] = {}
        self.sent = [{kind: 0 for kind in KINDS} for _ in range(n_buckets)]
        self.statuses: list[dict[str, dict[str, int]]] = [
            {kind: {} for kind in KINDS} for _ in range(n_buckets)]
        self.lat: list[list[float]] = [[] for _ in range(n_buckets)]
        self.unexpected: list[str] = []
        self.wrong = self.duplicates = self.unknown_ids = self.seq = 0

    def send(self, kind: str, bucket: int) -> None:
        rid = f"{self.k}-{self.seq}"
        self.seq += 1
        i = self.rng.randrange(len(self.good))
        frames = mix_frames(kind, rid, self.model, self.k, self.seq, self.good[i])
        self.pending[rid] = (time.monotonic(), kind, i, bucket)
        self.sent[bucket][kind] += 1
        self.s.send_multipart(frames)

    def send_mix(self, bucket: int) -> None:
        """One draw of the mix (a stream draw sometimes sends a burst of two frames)."""
        kind = self.rng.choices(self.kinds, self.weights)[0]
        self.send(kind, bucket)
        if kind == "stream" and self.rng.random() < 0.5:
            self.send("stream", bucket)  # a burst on one stream: the older may be superseded

    def receive(self) -> None:
        import zmq

        while True:
            try:
                reply = self.s.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            now = time.monotonic()
            h = json.loads(reply[0])
            rid = h.get("id")
            entry = self.pending.pop(rid, None) if isinstance(rid, str) else None
            if entry is None:
                if isinstance(rid, str) and rid.startswith(f"{self.k}-"):
                    self.duplicates += 1
                else:
                    self.unknown_ids += 1
                continue
            t_sent, kind, i, b = entry
            st = str(h.get("status"))
            sts = self.statuses[b][kind]
            sts[st] = sts.get(st, 0) + 1
            if st not in ALLOWED[kind] and len(self.unexpected) < 20:
                self.unexpected.append(f"{kind}: {st}: {h.get('error')}")
            if kind == "valid" and st == "OK":
                logits = np.frombuffer(reply[1], np.float32)
                if int(np.argmax(logits)) != int(self.want[i]):
                    self.wrong += 1
                self.lat[b].append(now - t_sent)

    def run_open_loop(self, rate: float, until: float, bucket_of: Any) -> int:
        """Send the mix at ``rate`` req/s until ``until``; how often it fell > 1 s behind
        (the client itself could not keep up: the machine is busy)."""
        interval = 1.0 / rate
        next_send = time.monotonic()
        behind = 0
        while True:
            now = time.monotonic()
            if now >= until:
                return behind
            while next_send <= now:
                self.send_mix(bucket_of(next_send))
                next_send += interval
            if now - next_send > 1.0:  # fell far behind (machine busy): do not burst
                next_send = now
                behind += 1
            self.receive()
            wait_ms = max(0, int((next_send - time.monotonic()) * 1000))
            if wait_ms:
                self.s.poll(wait_ms)

    def wait_until(self, start: float) -> None:
        """Receive (late replies of the last bucket) until the monotonic time ``start``."""
        while time.monotonic() < start:
            self.receive()
            self.s.poll(max(1, int((start - time.monotonic()) * 1000)))

    def drain(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while self.pending and time.monotonic() < end:
            if self.s.poll(200):
                self.receive()

    def refused_share_over(self, bucket: int, share: float) -> bool:
        """More than ``share`` of this bucket's valid requests answered queue full."""
        valid = self.sent[bucket]["valid"]
        refused = self.statuses[bucket]["valid"].get("RESOURCE_EXHAUSTED", 0)
        return valid > 0 and refused > share * valid

    def close(self) -> None:
        self.s.close(0)
        self.ctx.term()
