"""A bounded live fuzz of a running daemon (tests/test_live_fuzz.py, scripts/ops/fuzz).

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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from edged.testing.configs import model_table, variant, write_config
from edged.testing.fuzz.messages import (
    FUZZ_LIMITS,
    MAX_MESSAGE_BYTES,
    MODELS,
    Generator,
    Msg,
    dumps,
    valid_header,
)

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
        s.send_multipart([dumps(valid_header(f"big-{i}")), bytes(2 * MAX_MESSAGE_BYTES + 1)])
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
    """The shipped digits model (fp32, one thread) with a 1 MiB message limit."""
    digits = model_table("digits", [variant("cnn-fp32", MODELS / "cnn-fp32.onnx",
                                            options={"threads": 1})],
                         required=True, max_batch_size=8, max_queue=512,
                         preprocess={"color": "gray", "width": 28, "height": 28,
                                     "layout": "NCHW"})
    return write_config(tmp / "edged.toml", server="drain_timeout_s = 5.0\n" + FUZZ_LIMITS,
                        models=[digits])


def env_seed(default: int = 1234) -> int:
    return int(os.environ.get("EDGED_FUZZ_SEED", default))
