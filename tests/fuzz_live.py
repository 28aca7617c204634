"""A bounded live fuzzer for a running daemon (tests/test_live_fuzz.py, scripts/ops/fuzz).

Malformed, truncated, mutated, oversized and random multipart messages go out over
several "lanes" (DEALER and REQ sockets over tcp and ipc, some with hostile routing
ids), one message in flight per lane, so every reply is attributed to exactly the
message that caused it without trusting the echoed id. Meanwhile a separate thread
does real inferences and checks every answer against a reference ONNX Runtime run.

What is checked per message: a reply arrives (else it is *lost*); its status is one
the message may legitimately get (never INTERNAL/UNAVAILABLE; garbage gets a client
error); the echoed id is the one sent or null. The daemon's RSS is sampled.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zmq

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models" / "digits"

CLIENT = frozenset({"INVALID_ARGUMENT", "UNSUPPORTED_VERSION", "NOT_FOUND"})
# A mutated message may turn out valid; these are all legitimate answers to one.
ANY = CLIENT | {"OK", "DEADLINE_EXCEEDED", "DROPPED", "RESOURCE_EXHAUSTED"}

#: [server.limits] the fuzz daemon runs with: small enough that "over the limit" is cheap.
FUZZ_LIMITS = """
[server.limits]
max_message_bytes = 1048576
"""
MAX_MESSAGE_BYTES = 1 << 20


@dataclass
class Msg:
    kind: str
    frames: list[bytes]
    expect: frozenset[str]
    rid: str | None  # the id put in the header, if any


def _valid_header(rid: str, **kw: Any) -> dict[str, Any]:
    return {"v": 1, "id": rid, "op": "infer", "model": "digits",
            "inputs": [{"name": "input", "dtype": "float32", "shape": [1, 1, 28, 28]}], **kw}


def _junk_json(rng: random.Random, depth: int = 0) -> Any:
    r = rng.random()
    if depth > 3 or r < 0.5:
        return rng.choice([None, True, False, 0, -1, 1, 2**63, -(2**63) - 1, 1.5, 1e308,
                           float("inf"), float("nan"), "", "x" * rng.randrange(0, 300),
                           "\u0000", "\ud800", "float32", "digits", "infer", "jpeg",
                           rng.randrange(-10**6, 10**6)])
    if r < 0.75:
        return [_junk_json(rng, depth + 1) for _ in range(rng.randrange(0, 5))]
    return {rng.choice(["v", "id", "op", "inputs", "shape", "dtype", "", "x"]):
            _junk_json(rng, depth + 1) for _ in range(rng.randrange(0, 4))}


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj).encode("utf-8", "surrogatepass")


class Generator:
    """Deterministic (per seed) stream of hostile messages and what each may get back."""

    def __init__(self, seed: int, exclude: frozenset[str] = frozenset()) -> None:
        self.rng = random.Random(seed)
        x = np.load(MODELS / "validation.npz")["x"][:16]
        self.tensors = [(x[i].astype(np.float32) / 255.0)[None, None].tobytes()
                        for i in range(len(x))]
        self.images = [p.read_bytes() for p in sorted((MODELS / "samples").glob("digit*"))]
        self.n = 0
        self.kinds: list[tuple[str, Callable[[str], tuple[list[bytes], frozenset[str]]], int]] = [
            ("random-frames", self._random_frames, 10),
            ("truncated-header", self._truncated_header, 8),
            ("flipped-header", self._flipped_header, 8),
            ("junk-key", self._junk_key, 12),
            ("junk-input-meta", self._junk_meta, 12),
            ("tensor-bytes", self._tensor_bytes, 8),
            ("frame-count", self._frame_count, 6),
            ("image", self._image, 8),
            ("uint8-frame", self._uint8_frame, 6),
            ("huge-shape", self._huge_shape, 5),
            ("version", self._version, 4),
            ("unknown-model-or-op", self._unknown, 4),
            ("many-frames", self._many_frames, 2),
            ("over-total-size", self._over_total, 1),
            ("valid-odd-options", self._odd_options, 6),
        ]
        self._weights = [0 if k in exclude else w for k, _, w in self.kinds]

    def __iter__(self) -> Iterator[Msg]:
        return self

    def __next__(self) -> Msg:
        self.n += 1
        rid = f"fz-{self.n}"
        kind, make, _ = self.rng.choices(self.kinds, self._weights)[0]
        frames, expect = make(rid)
        return Msg(kind, frames, expect, rid)

    # -- kinds ----------------------------------------------------------------------------
    def _tensor(self) -> bytes:
        return self.rng.choice(self.tensors)

    def _random_frames(self, rid: str) -> tuple[list[bytes], frozenset[str]]:
        frames = [self.rng.randbytes(self.rng.choice([0, 1, 2, 7, 64, 300, 3000]))
                  for _ in range(self.rng.randrange(1, 5))]
        if frames[0][:1] in (b"{", b"[") or frames[0].strip()[:1].isdigit():
            frames[0] = b"\xff" + frames[0]  # keep it garbage: never valid JSON by chance
        if len(frames[0]) == 0 and len(frames) > 1 and frames[1][:1] in (b"{", b"["):
            frames[1] = b"\xff" + frames[1]
        return frames, CLIENT

    def _truncated_header(self, rid: str) -> tuple[list[bytes], frozenset[str]]:
        h = _dumps(_valid_header(rid))
        cut = self.rng.randrange(1, len(h))  # a JSON object cut short is never valid
        return [h[:cut], self._tensor()], CLIENT

    def _flipped_header(self, rid: str) -> tuple[list[bytes], frozenset[str]]:
        h = bytearray(_dumps(_valid_header(rid)))
        for _ in range(self.rng.randrange(1, 4)):
            h[self.rng.randrange(len(h))] = self.rng.randrange(256)
        return [bytes(h), self._tensor()], ANY

    def _junk_key(self, rid: str) -> tuple[list[bytes], frozenset[str]]:
        h = _valid_header(rid)
        key = self.rng.choice(["v", "op", "model", "inputs", "timeout_ms", "priority",
                               "stream", "outputs", "id", "colour", ""])
        if key == "id":
            h["id"] = _junk_json(self.rng)
        elif self.rng.random() < 0.2:
            h.pop(key, None)
        else:
            h[key] = _junk_json(self.rng)
        return [_dumps(h), self._tensor()], ANY

    def _junk_meta(self, rid: str) -> tuple[list[bytes], frozenset[str]]:
        h = _valid_header(rid)
        meta = h["inputs"][0]
        key = self.rng.choice(["name", "dtype", "shape", "encoding", "extra"])
        r = self.rng.random()
        if r < 0.2:
            meta.pop(key, None)
        elif key == "shape" and r < 0.7:
            meta["shape"] = [self.rng.choice([-1, 0, 1, 2, 3, 27, 28, 29, 784, 2**20, 2**31])
                             for _ in range(self.rng.randrange(0, 9))]
        elif key == "dtype" and r < 0.7:
            meta["dtype"] = self.rng.choice(["uint8", "int8", "float16", "float64", "int64",
                                             "bool", "object", "float128", ">f4", "<f4", "f4"])
        else:
            meta[key] = _junk_json(self.rng)
        return [_dumps(h), self._tensor()], ANY

    def _tensor_bytes(self, rid: str) -> tuple[list[bytes], frozenset[str]]:
        t = self._tensor()
        r = self.rng.random()
        if r < 0.3:
            return [_dumps(_valid_header(rid)), t[: self.rng.randrange(0, len(t))]], CLIENT
        if r < 0.6:
            extra = self.rng.randbytes(self.rng.randrange(1, 64))
            return [_dumps(_valid_header(rid)), t + extra], CLIENT
        # Right length, random bits: NaNs, infinities, denormals: computed, not a crash.
        return [_dumps(_valid_header(rid)), self.rng.randbytes(len(t))], ANY

    def _frame_count(self, rid: str) -> tuple[list[bytes], frozenset[str]]:
        h = _dumps(_valid_header(rid))
        if self.rng.random() < 0.5:
            return [h], CLIENT
        return [h, self._tensor(), *[self._tensor()] * self.rng.randrange(1, 4)], CLIENT

    def _image(self, rid: str) -> tuple[list[bytes], frozenset[str]]:
        enc = self.rng.choice(["jpeg", "png"])
        img = bytearray(self.rng.choice(self.images))
        r = self.rng.random()
        if r < 0.3:
            data = bytes(img[: self.rng.randrange(1, len(img))])
        elif r < 0.6:
            for _ in range(self.rng.randrange(1, 10)):
                img[self.rng.randrange(len(img))] = self.rng.randrange(256)
            data = bytes(img)
        elif r < 0.8:
            data = self.rng.randbytes(self.rng.randrange(1, 4000))
        else:  # a JPEG SOF claiming up to 65535 x 65535
            w, hh = self.rng.randrange(1, 65536), self.rng.randrange(1, 65536)
            data = (b"\xff\xd8\xff\xc0\x00\x11\x08" + hh.to_bytes(2, "big")
                    + w.to_bytes(2, "big") + b"\x03" + self.rng.randbytes(64))
        h = {"v": 1, "id": rid, "model": "digits", "inputs": [{"encoding": enc}]}
        return [_dumps(h), data], ANY

    def _uint8_frame(self, rid: str) -> tuple[list[bytes], frozenset[str]]:
        shape = [self.rng.randrange(0, 70), self.rng.randrange(0, 70)]
        if self.rng.random() < 0.6:
            shape.append(self.rng.choice([0, 1, 2, 3, 4, 5, 7]))
        n = int(np.prod(shape))
        h = {"v": 1, "id": rid, "model": "digits",
             "inputs": [{"dtype": "uint8", "shape": shape}]}
        return [_dumps(h), self.rng.randbytes(n)], ANY

    def _huge_shape(self, rid: str) -> tuple[list[bytes], frozenset[str]]:
        shape = [self.rng.choice([1 << 20, 1 << 21, 1 << 30, 2**62, 1 << 13])
                 for _ in range(self.rng.randrange(1, 9))]
        h = _valid_header(rid)
        h["inputs"][0]["shape"] = shape
        h["inputs"][0]["dtype"] = self.rng.choice(["float64", "uint8"])
        if all(d <= (1 << 20) for d in shape) and np.prod(shape, dtype=object) <= (1 << 26):
            shape.append(1 << 21)  # make sure it is over some limit
        return [_dumps(h), self.rng.randbytes(self.rng.randrange(0, 64))], CLIENT

    def _version(self, rid: str) -> tuple[list[bytes], frozenset[str]]:
        h = _valid_header(rid)
        h["v"] = self.rng.choice([0, 2, 3, -1, "1", "v1", None, [], {}, 1.5])
        if self.rng.random() < 0.2:
            del h["v"]
        return [_dumps(h), self._tensor()], frozenset({"UNSUPPORTED_VERSION"})

    def _unknown(self, rid: str) -> tuple[list[bytes], frozenset[str]]:
        if self.rng.random() < 0.5:
            h = _valid_header(rid, model=self.rng.choice(["nope", "digits ", "DIGITS", "\u0000"]))
        else:
            h = {"v": 1, "id": rid, "op": self.rng.choice(["explode", "reload", "status", "Infer",
                                                            "load", "unload", "level"])}
            return [_dumps(h)], frozenset({"NOT_FOUND"})
        return [_dumps(h), self._tensor()], frozenset({"NOT_FOUND"})

    def _many_frames(self, rid: str) -> tuple[list[bytes], frozenset[str]]:
        n = self.rng.randrange(20, 300)
        return [_dumps(_valid_header(rid)), *[b"\x00" * self.rng.randrange(0, 8)] * n], CLIENT

    def _over_total(self, rid: str) -> tuple[list[bytes], frozenset[str]]:
        # Each frame under MAXMSGSIZE (libzmq lets it in), the sum over the limit.
        half = MAX_MESSAGE_BYTES // 2 + 1024
        h = {"v": 1, "id": rid, "model": "digits",
             "inputs": [{"dtype": "uint8", "shape": [half]}, {"dtype": "uint8", "shape": [half]}]}
        return [_dumps(h), bytes(half), bytes(half)], frozenset({"RESOURCE_EXHAUSTED"})

    def _odd_options(self, rid: str) -> tuple[list[bytes], frozenset[str]]:
        opts = self.rng.choice([
            {"timeout_ms": self.rng.choice([1e-9, 0.001, 1e12, 5])},
            {"priority": self.rng.choice([0, 1000, 999])},
            {"stream": "s" + str(self.rng.randrange(3))},
            {"outputs": ["logits", "logits"]},
            {"id": self.rng.choice([2**63 - 1, -(2**63), "", "\u00e9" * 256])},
        ])
        h = _valid_header(rid, **opts)
        return [_dumps(h), self._tensor()], ANY


# -- lanes --------------------------------------------------------------------------------

class Lane:
    """One socket, at most one message in flight."""

    def __init__(self, ctx: zmq.Context[Any], endpoint: str, kind: int,
                 routing_id: bytes | None) -> None:
        self.ctx, self.endpoint, self.kind, self.routing_id = ctx, endpoint, kind, routing_id
        self.sock = self._open()
        self.msg: Msg | None = None
        self.sent_at = 0.0

    def _open(self) -> zmq.Socket[Any]:
        s = self.ctx.socket(self.kind)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.SNDTIMEO, 5000)
        if self.routing_id is not None:
            s.setsockopt(zmq.ROUTING_ID, self.routing_id)
        s.connect(self.endpoint)
        return s

    def reopen_fresh(self) -> None:
        """A fresh socket, and a fresh routing id: late replies to the old one must not
        land here and be taken for answers to the next message."""
        if self.routing_id is not None:
            self.routing_id = b"\x01" + os.urandom(len(self.routing_id) - 1)
        self.sock = self._open()

    def close(self) -> None:
        self.sock.close(0)


@dataclass
class Report:
    messages: int = 0
    elapsed_s: float = 0.0
    by_kind: dict[str, Counter[str]] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)  # never answered (within timeout + grace)
    late: list[str] = field(default_factory=list)  # answered, but after the reply timeout
    unexpected: list[str] = field(default_factory=list)
    id_mismatch: list[str] = field(default_factory=list)
    oversize_dropped: int = 0
    oversize_answered: int = 0
    valid_ok: int = 0
    valid_bad: list[str] = field(default_factory=list)
    valid_max_latency_ms: float = 0.0
    rss_start: int = 0
    rss_warm: int = 0
    rss_end: int = 0
    rss_max: int = 0
    rss_peak: int = 0  # VmHWM: catches spikes between samples
    daemon_alive: bool = True

    @property
    def rss_growth_pct(self) -> float:
        return 100.0 * (self.rss_end - self.rss_warm) / self.rss_warm if self.rss_warm else 0.0

    @property
    def rate(self) -> float:
        return self.messages / self.elapsed_s if self.elapsed_s else 0.0

    def statuses(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for c in self.by_kind.values():
            total.update(c)
        return total

    def to_dict(self) -> dict[str, Any]:
        mib = 2**20
        return {
            "messages": self.messages, "elapsed_s": round(self.elapsed_s, 1),
            "messages_per_s": round(self.rate, 1),
            "statuses": dict(self.statuses()),
            "by_kind": {k: dict(v) for k, v in sorted(self.by_kind.items())},
            "lost": len(self.lost), "lost_sample": self.lost[:10],
            "late": len(self.late), "late_sample": self.late[:10],
            "unexpected": len(self.unexpected), "unexpected_sample": self.unexpected[:10],
            "id_mismatch": len(self.id_mismatch), "id_mismatch_sample": self.id_mismatch[:10],
            "oversize_frames_dropped": self.oversize_dropped,
            "oversize_frames_answered": self.oversize_answered,
            "valid_ok": self.valid_ok, "valid_failures": len(self.valid_bad),
            "valid_failure_sample": self.valid_bad[:10],
            "valid_max_latency_ms": round(self.valid_max_latency_ms, 1),
            "rss_mib": {"start": round(self.rss_start / mib, 1),
                        "after_warmup": round(self.rss_warm / mib, 1),
                        "end": round(self.rss_end / mib, 1), "max": round(self.rss_max / mib, 1),
                        "peak_vmhwm": round(self.rss_peak / mib, 1)},
            "rss_growth_pct": round(self.rss_growth_pct, 2),
            "daemon_alive": self.daemon_alive,
        }


class ValidClient(threading.Thread):
    """Real inferences, checked, for as long as the fuzz runs."""

    def __init__(self, endpoint: str, report: Report) -> None:
        super().__init__(daemon=True, name="valid-client")
        import onnxruntime as ort

        self.endpoint = endpoint
        self.report = report
        self.stop = threading.Event()
        x = np.load(MODELS / "validation.npz")["x"][:32].astype(np.float32)[:, None] / 255.0
        self.x = np.ascontiguousarray(x)
        sess = ort.InferenceSession(str(MODELS / "cnn-fp32.onnx"),
                                    providers=["CPUExecutionProvider"])
        self.want = sess.run(None, {"input": self.x})[0]

    def run(self) -> None:
        from edged.client import Client, ClientTimeout

        i = 0
        with Client(self.endpoint, timeout_s=10.0, context=zmq.Context.instance()) as c:
            while not self.stop.is_set():
                k = i % len(self.x)
                t0 = time.monotonic()
                try:
                    r = c.infer("digits", self.x[k:k + 1], id=f"valid-{i}",
                                raise_on_error=False)
                except ClientTimeout:
                    self.report.valid_bad.append(f"valid-{i}: no reply within 10 s")
                    break
                ms = (time.monotonic() - t0) * 1000
                self.report.valid_max_latency_ms = max(self.report.valid_max_latency_ms, ms)
                if not r.ok:
                    self.report.valid_bad.append(f"valid-{i}: {r.status} {r.header.get('error')}")
                elif r.header.get("id") != f"valid-{i}" or not np.allclose(
                        r.outputs["logits"][0], self.want[k], atol=1e-4):
                    self.report.valid_bad.append(f"valid-{i}: wrong answer {r.header}")
                else:
                    self.report.valid_ok += 1
                i += 1
                time.sleep(0.002)


def sent_id(frames: list[bytes]) -> Any:
    """The id the daemon could read from what was sent (it strips one empty REQ frame)."""
    body = frames[1:] if frames and frames[0] == b"" else frames
    try:
        h = json.loads(body[0])
    except (ValueError, IndexError, RecursionError):
        return None
    return h.get("id") if isinstance(h, dict) else None


def _rss(pid: int) -> int:
    import psutil

    return int(psutil.Process(pid).memory_info().rss)


def peak_rss(pid: int) -> int:
    """The kernel's high-water mark of the process's RSS (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def oversize_frames(endpoint: str, n: int, report: Report) -> None:
    """A single frame above MAXMSGSIZE (the hard cap, 2x the limit): libzmq drops that
    peer before edged reads it."""
    ctx = zmq.Context.instance()
    for i in range(n):
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(endpoint)
        s.send_multipart([_dumps(_valid_header(f"big-{i}")), bytes(2 * MAX_MESSAGE_BYTES + 1)])
        if s.poll(300):
            report.oversize_answered += 1
        else:
            report.oversize_dropped += 1
        s.close(0)


def run_fuzz(tcp: str, ipc: str, pid: int, messages: int, seed: int = 0, lanes: int = 8,
             reply_timeout_s: float = 10.0, grace_s: float = 60.0,
             warmup_fraction: float = 0.1, exclude: frozenset[str] = frozenset(),
             progress: Callable[[Report], None] | None = None) -> Report:
    """``messages`` hostile messages; a message unanswered after ``reply_timeout_s`` frees
    its lane (a fresh socket) and is *late* if its reply still comes within ``grace_s``
    on the old socket, *lost* if not."""
    rep = Report()
    rng = random.Random(seed ^ 0x5EED)
    ctx = zmq.Context.instance()
    gen = Generator(seed, exclude)
    stale: list[tuple[zmq.Socket[Any], Msg, float]] = []  # (old socket, message, sent at)
    rep.rss_start = rep.rss_max = _rss(pid)
    valid = ValidClient(ipc, rep)
    valid.start()
    specs = []
    for k in range(lanes):
        ep = tcp if k % 3 != 2 else ipc
        kind = zmq.REQ if k % 4 == 3 else zmq.DEALER
        rid = None
        if k % 4 == 1:  # hostile routing ids: long and binary
            rid = b"\x01" + rng.randbytes(rng.randrange(0, 254))
        specs.append((ep, kind, rid))
    lane_list = [Lane(ctx, *s) for s in specs]
    poller = zmq.Poller()
    for ln in lane_list:
        poller.register(ln.sock, zmq.POLLIN)
    warm_at = max(1, int(messages * warmup_fraction))
    sent = 0
    t0 = time.monotonic()
    next_progress = t0 + 5.0

    def send(ln: Lane) -> None:
        nonlocal sent
        msg = next(gen)
        ln.msg, ln.sent_at = msg, time.monotonic()
        try:
            ln.sock.send_multipart(msg.frames)
        except zmq.Again:
            rep.lost.append(f"{msg.kind} {msg.rid}: could not send")
            ln.msg = None
        sent += 1

    def record(ln: Lane, frames: list[bytes]) -> None:
        msg = ln.msg
        assert msg is not None
        ln.msg = None
        if frames and frames[0] == b"" and len(frames) > 1:
            frames = frames[1:]  # the echoed REQ delimiter (first frame was empty)
        try:
            h = json.loads(frames[0])
            st = str(h.get("status"))
            got_id = h.get("id")
        except (ValueError, IndexError):
            st, got_id = "UNPARSEABLE-REPLY", None
        rep.by_kind.setdefault(msg.kind, Counter())[st] += 1
        if st not in msg.expect and len(rep.unexpected) < 1000:
            rep.unexpected.append(f"{msg.kind} {msg.rid}: {st}: {h.get('error')!s:.200} "
                                  f"sent={msg.frames[0][:200]!r}")
        if got_id is not None and got_id != sent_id(msg.frames):
            rep.id_mismatch.append(f"{msg.kind}: sent {msg.rid} got {got_id!r}")

    try:
        for ln in lane_list:
            send(ln)
        while True:
            events = dict(poller.poll(200))
            now = time.monotonic()
            for ln in lane_list:
                if ln.sock in events:
                    record(ln, ln.sock.recv_multipart())
                elif ln.msg is not None and now - ln.sent_at > reply_timeout_s:
                    # Park the old socket to see whether the reply is late or lost, and
                    # give the lane a fresh one (a REQ socket waiting cannot send again).
                    stale.append((ln.sock, ln.msg, ln.sent_at))
                    ln.msg = None
                    ln.reopen_fresh()
                    poller.register(ln.sock, zmq.POLLIN)
                if ln.msg is None and sent < messages:
                    send(ln)
            rep.messages = sent
            if sent >= warm_at and not rep.rss_warm:
                rep.rss_warm = _rss(pid)
            if now >= next_progress:
                next_progress = now + 5.0
                if not _alive(pid):
                    rep.daemon_alive = False
                    break
                rep.rss_max = max(rep.rss_max, _rss(pid))
                rep.elapsed_s = now - t0
                if progress is not None:
                    progress(rep)
            for entry in list(stale):
                old, m, t_sent = entry
                if old in events:
                    frames = old.recv_multipart()
                    rep.late.append(f"{m.kind} {m.rid}: answered after {now - t_sent:.1f} s "
                                    f"({frames[-1][:120]!r})")
                elif now - t_sent <= reply_timeout_s + grace_s:
                    continue
                else:
                    rep.lost.append(f"{m.kind} {m.rid}: no reply in "
                                    f"{reply_timeout_s + grace_s:.0f} s; frames="
                                    f"{[len(f) for f in m.frames][:8]} head={m.frames[0][:200]!r}")
                stale.remove(entry)
                poller.unregister(old)
                old.close(0)
            if sent >= messages and all(ln.msg is None for ln in lane_list) and not stale:
                break
        rep.elapsed_s = time.monotonic() - t0  # the rate covers the lanes only
        oversize_frames(tcp, 10, rep)
    finally:
        if rep.messages < messages or not rep.elapsed_s:
            rep.elapsed_s = time.monotonic() - t0
        valid.stop.set()
        valid.join(15)
        for ln in lane_list:
            ln.close()
        for old, _, _ in stale:
            old.close(0)
    rep.daemon_alive = rep.daemon_alive and _alive(pid)
    if rep.daemon_alive:
        rep.rss_end = _rss(pid)
        rep.rss_max = max(rep.rss_max, rep.rss_end)
        rep.rss_peak = peak_rss(pid)
    if not rep.rss_warm:
        rep.rss_warm = rep.rss_start
    return rep


def fuzz_config(tmp: Path) -> Path:
    """The digits model with a 1 MiB message limit (see FUZZ_LIMITS)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from conftest import digits_config

    return digits_config(tmp, variants=("cnn-fp32",), server=FUZZ_LIMITS)


def env_seed(default: int = 1234) -> int:
    return int(os.environ.get("EDGED_FUZZ_SEED", default))
