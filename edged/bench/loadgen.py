"""The one load generator: client processes that drive a running daemon (socket or
shared-memory frames, or KServe through tritonclient) and report what they measured.

Why one: ``edged bench``, the benchmark scripts, the soak and ``device-check`` compare
the daemon with the same clients, so their figures can be read against each other.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from typing import Any

import numpy as np

from edged.testing.harness import percentiles_ms


def request(model: dict[str, Any], args: argparse.Namespace) -> tuple[dict[str, Any], list[Any]]:
    """One request's header and frames, built once and sent many times."""
    from edged.client import build_infer

    if args.input == "image":
        return build_infer(args.model, args.file)
    if args.input == "npy":
        return build_infer(args.model, np.load(args.file, allow_pickle=False))
    rng = np.random.default_rng(0)
    feeds = {}
    for s in model["inputs"]:
        shape = [1 if i == 0 or d == -1 else d for i, d in enumerate(s["shape"])]
        a = rng.random(shape)
        feeds[s["name"]] = (a * 255).astype(s["dtype"]) if s["dtype"] == "uint8" \
            else a.astype(s["dtype"])
    return build_infer(args.model, feeds)


def drive(args: argparse.Namespace, header: dict[str, Any], frames: list[Any],
          label: str, *, stop: Any = None, trace: bool = False,
          cycle: list[list[Any]] | None = None) -> dict[str, Any]:
    """N client processes, K in flight each, for ``duration``; progress once a second.

    For a benchmark that reads every reply (``bench_governor``): ``stop``, an ``Event``
    of the ``spawn`` context, ends the run early; ``cycle`` sends these frame lists in
    turn instead of ``frames`` (same header); ``trace`` adds each client's replies as
    columns (see ``_Trace``) under ``"traces"``. Native socket clients only."""
    ctx = mp.get_context("spawn")
    done = ctx.Value("l", 0)
    out = ctx.Queue()
    blobs = [bytes(f) for f in frames]
    transport = getattr(args, "transport", "socket")
    protocol = getattr(args, "protocol", "native")
    if (trace or cycle or stop is not None) and (protocol, transport) != ("native", "socket"):
        raise ValueError("stop, trace and cycle are for native socket clients")
    if protocol == "native":
        target: Any = _client
        targs: tuple[Any, ...] = (args.endpoint, header, blobs, args.in_flight, args.duration,
                                  done, out, transport, stop, trace,
                                  [[bytes(f) for f in fs] for fs in cycle or []])
    else:
        from edged.bench.kserve_client import run_client

        target, targs = run_client, (protocol, args.kserve, header, blobs, args.in_flight,
                                     args.duration, done, out)
    procs = [ctx.Process(target=target, args=targs) for _ in range(args.clients)]
    for p in procs:
        p.start()
    t0 = time.monotonic()
    while any(p.is_alive() for p in procs) and out.qsize() < len(procs):
        time.sleep(1.0)
        el = time.monotonic() - t0
        print(f"\r{label}: {el:4.0f}/{args.duration:.0f} s  {done.value} replies  "
              f"{done.value / max(el, 1e-9):.0f}/s", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    parts = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(10)
    lat = np.concatenate([np.asarray(p["latencies"]) for p in parts]) if parts else np.zeros(0)
    statuses: dict[str, int] = {}
    variants: dict[str, int] = {}  # which variant answered (remote:<name> when offloaded)
    for p in parts:
        for k, v in p["statuses"].items():
            statuses[k] = statuses.get(k, 0) + v
        for k, v in p.get("variants", {}).items():
            variants[k] = variants.get(k, 0) + v
    elapsed = max(p["elapsed"] for p in parts)
    ok = statuses.get("OK", 0)
    return {"protocol": protocol, "clients": args.clients, "in_flight": args.in_flight,
            "replies": int(lat.size),
            "ok": ok, "statuses": statuses, "variants": variants,
            "throughput": ok / elapsed if elapsed else 0.0,
            "client_cpu": _client_cpu(parts),
            **percentiles_ms(lat), **({"traces": [p["trace"] for p in parts]} if trace else {})}


class _Trace:
    """One client's replies as columns: wall-clock send and receive time, status,
    variant, the reply's ``timing`` (batch, queue_us, compute_us), which ``cycle`` item
    was sent, the argmax of the first output (a classifier's answer; -1 without
    outputs) and the error text; a request never answered is a ``TIMEOUT``."""

    COLUMNS = ("send", "recv", "status", "variant", "batch", "queue_us", "compute_us",
               "item", "top", "error")

    def __init__(self) -> None:
        self.cols: dict[str, list[Any]] = {c: [] for c in self.COLUMNS}
        self.sent: dict[int, tuple[float, int]] = {}

    def reply(self, rid: int, h: dict[str, Any], frames: list[bytes]) -> None:
        t_send, item = self.sent.pop(rid, (float("nan"), -1))
        t = h.get("timing") or {}
        outs = h.get("outputs") or []
        top = (int(np.argmax(np.frombuffer(frames[1], dtype=outs[0]["dtype"])))
               if outs and len(frames) > 1 else -1)
        for c, v in zip(self.COLUMNS, (t_send, time.time(), h.get("status", "?"),
                                       str(h.get("variant", "")), int(t.get("batch", 0)),
                                       int(t.get("queue_us", 0)), int(t.get("compute_us", 0)),
                                       item, top, str(h.get("error") or "")), strict=True):
            self.cols[c].append(v)

    def lost(self) -> dict[str, list[Any]]:
        for rid in list(self.sent):
            self.reply(rid, {"status": "TIMEOUT", "error": "no reply in 10 s"}, [])
        return self.cols


def _client_cpu(parts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The clients' own CPU over their sending (None unless every client reported it)."""
    if not parts or any("cpu" not in p for p in parts):
        return None
    return {"processes": len(parts), "user_s": sum(p["cpu"][0] for p in parts),
            "sys_s": sum(p["cpu"][1] for p in parts)}


def _client(endpoint: str, header: dict[str, Any], frames: list[bytes], in_flight: int,
            duration: float, done: Any, out: Any, transport: str = "socket",
            stop: Any = None, trace: bool = False, cycle: list[list[bytes]] | None = None
            ) -> None:
    import zmq

    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(endpoint)
    shm = _ShmSender(s, header, frames, in_flight) if transport == "shm" else None
    sent: dict[int, float] = {}
    lat: list[float] = []
    statuses: dict[str, int] = {}
    variants: dict[str, int] = {}
    tr = _Trace() if trace else None
    n = 0
    t0, cpu0 = time.monotonic(), os.times()
    end = t0 + duration

    def send() -> None:
        nonlocal n
        n += 1
        sent[n] = time.perf_counter()
        if shm is not None:
            s.send_multipart(shm.message(n), copy=False)
            return
        h = json.dumps({"v": 1, **header, "id": n}).encode()
        item = n % len(cycle) if cycle else 0
        if tr is not None:
            tr.sent[n] = (time.time(), item)
        s.send_multipart([h, *(cycle[item] if cycle else frames)], copy=False)

    for _ in range(in_flight):
        send()
    while sent:
        if not s.poll(10_000):
            break
        reply = s.recv_multipart()
        now = time.perf_counter()
        h = json.loads(reply[0])
        # A floor server's reply has no id: it answers in order, so the oldest in flight.
        rid = h.get("id", next(iter(sent)))
        start = sent.pop(rid, None)
        if shm is not None:
            shm.done(rid)
        if start is not None:
            lat.append(now - start)
        statuses[h.get("status", "?")] = statuses.get(h.get("status", "?"), 0) + 1
        if "variant" in h:
            variants[h["variant"]] = variants.get(h["variant"], 0) + 1
        if tr is not None:
            tr.reply(rid, h, reply)
        with done.get_lock():
            done.value += 1
        if time.monotonic() < end and not (stop is not None and stop.is_set()):
            send()
    cpu = os.times()  # this process's CPU while it sent (edged bench --threads)
    out.put({"latencies": lat, "statuses": statuses, "variants": variants,
             "elapsed": time.monotonic() - t0,
             "cpu": (cpu.user - cpu0.user, cpu.system - cpu0.system),
             **({"trace": tr.lost()} if tr is not None else {})})
    s.close(0)
    ctx.term()


class _ShmSender:
    """A bench client's ring: each request copies its tensors into a free slot (what a
    camera app writing its frame there pays) and names the slot in its header."""

    def __init__(self, sock: Any, header: dict[str, Any], frames: list[bytes],
                 in_flight: int) -> None:
        from edged.protocols.native.shm_rings import SlotRing, align
        from edged.protocols.native.tensors import DTYPES

        sock.send_multipart([json.dumps({
            "v": 1, "op": "shm", "id": "ring", "slots": in_flight * len(frames),
            "slot_bytes": align(max(len(f) for f in frames)), "pid": os.getpid()}).encode()])
        r = json.loads(sock.recv_multipart()[0])
        if r.get("status") != "OK":
            raise SystemExit(f"edged bench: no shared-memory ring: {r.get('error')}")
        self.ring = SlotRing(r["segment"], r["slots"], r["slot_bytes"])
        self.header = header
        self.arrays = [np.frombuffer(f, DTYPES[m["dtype"]]).reshape(m["shape"])
                       for m, f in zip(header["inputs"], frames, strict=True)]
        self.taken: dict[int, list[dict[str, Any]]] = {}

    def message(self, n: int) -> list[bytes]:
        metas = []
        for m, a in zip(self.header["inputs"], self.arrays, strict=True):
            placed = self.ring.put(a)
            if placed is None:
                raise SystemExit("edged bench: every shared-memory slot is in flight")
            metas.append({**placed, **({"name": m["name"]} if "name" in m else {})})
        self.taken[n] = metas
        return [json.dumps({"v": 1, **self.header, "id": n, "inputs": metas}).encode()]

    def done(self, n: Any) -> None:
        for m in self.taken.pop(n, []):
            self.ring.release(m)
