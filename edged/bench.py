"""``edged bench``: drive a running daemon and, with ``--raw``, compare it with the same
model run in process by ONNX Runtime (default session options, as a user would).

Why in the package: an operator measures *their* device with *their* model without
the repository's scripts; the figures are the ones the docs report (throughput, p50,
p90, p99 and daemon/raw ratios), computed by the harness the tests use.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from edged.harness import machine_info, percentiles_ms


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "bench", help="load a running daemon and report throughput and latency",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--endpoint", default="tcp://127.0.0.1:5555")
    p.add_argument("--model", required=True)
    p.add_argument("--clients", type=int, default=None,
                   help="client processes (default 1; with --floor: 8, for the throughput "
                        "phase)")
    p.add_argument("--in-flight", type=int, default=1,
                   help="requests each client keeps in flight (default 1)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per round")
    p.add_argument("--input", choices=("random", "image", "npy"), default="random")
    p.add_argument("--file", type=Path, help="the image (.jpg/.png) or .npy for --input")
    p.add_argument("--raw", type=Path, metavar="MODEL_FILE",
                   help="also run this ONNX file in process and print daemon/raw ratios")
    p.add_argument("--raw-spin-off", action="store_true",
                   help="with --raw: also time a raw session with spinning off (the "
                        "daemon's setting on small devices), to separate serving overhead "
                        "from ORT's spinning under CPU contention")
    p.add_argument("--raw-pipeline", type=Path, metavar="CONFIG",
                   help="with --input image: the in-process reference is the whole pipeline "
                        "of --model as CONFIG describes it (decode, preprocess, ORT with "
                        "default session options, a detector's decode+NMS), edged's own code")
    p.add_argument("--floor", action="store_true",
                   help="with --raw: also start the two floor servers (one-thread and "
                        "batching, edged.bench_floor) for the same model and clients, and "
                        "print the daemon's ratios to raw and to each floor, interleaved: "
                        "batch-1 p50 with one client, throughput with --clients processes")
    p.add_argument("--rounds", type=int, default=1,
                   help="interleaved daemon/raw rounds; ratios are the median (default 1)")
    p.add_argument("--transport", choices=("socket", "shm"), default="socket",
                   help="tensors as socket frames (default) or through a shared-memory ring "
                        "(same host only; docs/protocol.md)")
    p.add_argument("--protocol", choices=("native", "kserve-grpc", "kserve-http"),
                   default="native", help="what the clients speak: edged's ZeroMQ protocol "
                   "or KServe v2 through tritonclient (needs the kserve extra and --kserve)")
    p.add_argument("--kserve", metavar="HOST:PORT",
                   help="the daemon's [server.kserve] grpc or http address (--protocol kserve-*)")
    p.add_argument("--json", type=Path, help="write the full result here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from edged.client import Client

    if args.input != "random" and args.file is None:
        print(f"edged bench: --input {args.input} needs --file", file=sys.stderr)
        return 2
    if args.transport == "shm" and args.input == "image":
        print("edged bench: --transport shm carries raw tensors; send an image as a uint8 "
              "frame with --input npy", file=sys.stderr)
        return 2
    if args.floor and args.raw is None:
        print("edged bench: --floor needs --raw MODEL_FILE (the floors serve that file)",
              file=sys.stderr)
        return 2
    if args.clients is None:
        args.clients = 8 if args.floor else 1
    if args.protocol != "native" and (args.kserve is None or args.transport != "socket"
                                      or args.input == "image"):
        print(f"edged bench: --protocol {args.protocol} needs --kserve HOST:PORT and raw "
              "tensors (--input random or npy) over the socket transport", file=sys.stderr)
        return 2
    with Client(args.endpoint, timeout_s=10.0) as c:
        r = c.models()
    models = {m["name"]: m for m in r.header.get("models", [])}
    if args.model not in models:
        print(f"edged bench: {args.endpoint} does not serve {args.model!r} "
              f"(it serves {', '.join(models) or 'nothing'})", file=sys.stderr)
        return 2
    header, frames = request(models[args.model], args)
    if args.floor:
        return run_floor(args, header, frames)
    result: dict[str, Any] = {"machine": machine_info(), "args": _jsonable(vars(args)),
                              "rounds": []}
    for k in range(args.rounds):
        rnd: dict[str, Any] = {"daemon": drive(args, header, frames, f"round {k + 1}")}
        if args.raw_pipeline is not None:
            rnd["raw"] = raw_pipeline(args.raw_pipeline, args.model, header, frames,
                                      args.duration)
        elif args.raw is not None:
            rnd["raw"] = raw_ort(args.raw, args.duration, frames, header)
            if args.raw_spin_off:
                rnd["raw_spin_off"] = raw_ort(args.raw, args.duration, frames, header,
                                              spinning=False)
        result["rounds"].append(rnd)
        show(rnd)
    if args.raw is not None or args.raw_pipeline is not None:
        result["ratios"] = ratios(result["rounds"])
        print("median over rounds: " + ", ".join(f"{k} {v:.2f}" for k, v in
                                                 result["ratios"].items()))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str) + "\n")
        print(f"wrote {args.json}")
    return 0


#: the 1-minute load average above which --floor warns that figures are not to be quoted
QUIET_LOAD = 0.3


def run_floor(args: argparse.Namespace, header: dict[str, Any], frames: list[Any]) -> int:
    """Daemon, raw ORT and the two floors (``edged.bench_floor``) in one run, interleaved.

    Each round: batch-1 p50 with one client (raw in process, the daemon, the one-thread
    floor), then throughput with ``--clients`` processes (the daemon, the batching floor,
    raw's best batch). Ratios are medians over rounds."""
    from edged.bench_floor import Floors, check_single_input, cores

    why = check_single_input(args.raw, header)
    if why is not None:
        print(f"edged bench: --floor: {why}", file=sys.stderr)
        return 2
    info = machine_info()
    load = info["load_avg"][0]
    print(f"machine: {info['cpu']}, {cores()} usable core(s), load average "
          f"{' '.join(map(str, info['load_avg']))}")
    if load > QUIET_LOAD:
        print(f"WARNING: load average {load} > {QUIET_LOAD}: the machine is not quiet; "
              "these figures are not ones to quote or to decide a default from")
    result: dict[str, Any] = {"machine": info, "args": _jsonable(vars(args)), "rounds": []}
    one = argparse.Namespace(**{**vars(args), "clients": 1, "in_flight": 1})
    with Floors(args.raw, header, args.endpoint) as floors:
        sock = {"transport": "socket"}
        for k in range(args.rounds):
            rnd: dict[str, Any] = {}
            tag = f"round {k + 1}"
            fl1 = argparse.Namespace(**{**vars(one), **sock, "endpoint": floors.one_thread})
            fln = argparse.Namespace(**{**vars(args), **sock, "endpoint": floors.batching})
            phases = [("raw", None, ""), ("daemon_b1", one, "daemon, 1 client"),
                      ("floor_b1", fl1, "one-thread floor, 1 client"),
                      ("daemon_n", args, f"daemon, {args.clients} clients"),
                      ("floor_n", fln, f"batching floor, {args.clients} clients")]
            if k % 2:  # every other round the floors go first, so drift cancels out
                phases = [phases[0], phases[2], phases[1], phases[4], phases[3]]
            for key, ns, what in phases:
                rnd[key] = (raw_ort(args.raw, args.duration, frames, header, threads=cores())
                            if ns is None else drive(ns, header, frames, f"{tag} {what}"))
            result["rounds"].append(rnd)
            show_floor(rnd, args.clients)
    result["ratios"] = floor_ratios(result["rounds"])
    result["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    print(f"median over {args.rounds} round(s), load average at the end "
          f"{' '.join(map(str, result['load_avg_end']))}:")
    for key, v in result["ratios"].items():
        print(f"  {key:<44} {v:.3f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str) + "\n")
        print(f"wrote {args.json}")
    return 0


def floor_ratios(rounds: list[dict[str, Any]]) -> dict[str, float]:
    """The ratios --floor reports (median of the per-round ratios)."""
    def med(f: Any) -> float:
        vals = [f(r) for r in rounds]
        vals = [v for v in vals if v == v]  # nan: a phase that got no reply
        return statistics.median(vals) if vals else float("nan")

    def div(a: float, b: float) -> float:
        return a / b if b else float("nan")

    return {
        "p50 daemon / one-thread floor": med(lambda r: div(r["daemon_b1"]["p50_ms"],
                                                          r["floor_b1"]["p50_ms"])),
        "p50 daemon / raw": med(lambda r: div(r["daemon_b1"]["p50_ms"],
                                              r["raw"]["batch1"]["p50_ms"])),
        "p50 one-thread floor / raw": med(lambda r: div(r["floor_b1"]["p50_ms"],
                                                        r["raw"]["batch1"]["p50_ms"])),
        "throughput daemon / batching floor": med(lambda r: div(r["daemon_n"]["throughput"],
                                                                r["floor_n"]["throughput"])),
        "throughput daemon / raw best": med(lambda r: div(r["daemon_n"]["throughput"],
                                                          r["raw"]["best_throughput"])),
        "throughput batching floor / raw best": med(lambda r: div(
            r["floor_n"]["throughput"], r["raw"]["best_throughput"])),
    }


def show_floor(rnd: dict[str, Any], clients: int) -> None:
    r, d1, f1, dn, fn = (rnd[k] for k in ("raw", "daemon_b1", "floor_b1", "daemon_n",
                                           "floor_n"))
    print(f"batch-1 p50: raw {r['batch1']['p50_ms']:.3f} ms  daemon {d1['p50_ms']:.3f} ms  "
          f"one-thread floor {f1['p50_ms']:.3f} ms")
    print(f"{clients} clients: daemon {dn['throughput']:.1f}/s (p99 {dn['p99_ms']:.2f} ms)  "
          f"batching floor {fn['throughput']:.1f}/s (p99 {fn['p99_ms']:.2f} ms)  raw best "
          f"{r['best_throughput']:.1f}/s; daemon statuses {dn['statuses']}")


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
          label: str) -> dict[str, Any]:
    """N client processes, K in flight each, for ``duration``; progress once a second."""
    ctx = mp.get_context("spawn")
    done = ctx.Value("l", 0)
    out = ctx.Queue()
    blobs = [bytes(f) for f in frames]
    transport = getattr(args, "transport", "socket")
    protocol = getattr(args, "protocol", "native")
    if protocol == "native":
        target: Any = _client
        targs: tuple[Any, ...] = (args.endpoint, header, blobs, args.in_flight, args.duration,
                                  done, out, transport)
    else:
        from edged.kserve.bench_client import run_client

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
            **percentiles_ms(lat)}


def _client(endpoint: str, header: dict[str, Any], frames: list[bytes], in_flight: int,
            duration: float, done: Any, out: Any, transport: str = "socket") -> None:
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
    n = 0
    t0 = time.monotonic()
    end = t0 + duration

    def send() -> None:
        nonlocal n
        n += 1
        sent[n] = time.perf_counter()
        if shm is not None:
            s.send_multipart(shm.message(n), copy=False)
            return
        h = json.dumps({"v": 1, **header, "id": n}).encode()
        s.send_multipart([h, *frames], copy=False)

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
        with done.get_lock():
            done.value += 1
        if time.monotonic() < end:
            send()
    out.put({"latencies": lat, "statuses": statuses, "variants": variants,
             "elapsed": time.monotonic() - t0})
    s.close(0)
    ctx.term()


class _ShmSender:
    """A bench client's ring: each request copies its tensors into a free slot (what a
    camera app writing its frame there pays) and names the slot in its header."""

    def __init__(self, sock: Any, header: dict[str, Any], frames: list[bytes],
                 in_flight: int) -> None:
        from edged.protocol.tensors import DTYPES
        from edged.shm import SlotRing, align

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


def raw_ort(model: Path, duration: float, frames: list[Any],
            header: dict[str, Any], spinning: bool | None = None,
            threads: int = 0) -> dict[str, Any]:
    """The same model in process, ORT default session options: batch-1 latency and
    throughput at the best batch of 1/2/4/8 (what calling ORT yourself gives).
    ``spinning=False``: the same with the intra-op pool's spinning off; ``threads``: the
    intra-op pool's size (0: ORT's default)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    if spinning is not None:
        so.add_session_config_entry("session.intra_op.allow_spinning",
                                    "1" if spinning else "0")
    sess = ort.InferenceSession(str(model), sess_options=so,
                                providers=["CPUExecutionProvider"])
    specs = sess.get_inputs()
    rng = np.random.default_rng(0)
    type_map = {"tensor(float)": np.float32, "tensor(uint8)": np.uint8,
                "tensor(float16)": np.float16, "tensor(int64)": np.int64}

    def feeds(b: int) -> dict[str, np.ndarray]:
        f = {}
        for s in specs:
            shape = [b if i == 0 else (d if isinstance(d, int) else 1)
                     for i, d in enumerate(s.shape)]
            f[s.name] = (rng.random(shape) * (255 if s.type == "tensor(uint8)" else 1)).astype(
                type_map.get(s.type, np.float32))
        return f

    one = feeds(1)
    lat: list[float] = []
    end = time.monotonic() + duration / 2
    sess.run(None, one)
    while time.monotonic() < end:
        t = time.perf_counter()
        sess.run(None, one)
        lat.append(time.perf_counter() - t)
    best = 0.0
    per = duration / 2 / 4
    for b in (1, 2, 4, 8):
        try:
            f = feeds(b)
            sess.run(None, f)
        except Exception:  # a fixed-batch model: only its own size runs
            continue
        n, t0 = 0, time.monotonic()
        while time.monotonic() - t0 < per:
            sess.run(None, f)
            n += b
        best = max(best, n / (time.monotonic() - t0))
    return {"batch1": percentiles_ms(lat), "best_throughput": best}


def raw_pipeline(config: Path, model: str, header: dict[str, Any], frames: list[Any],
                 duration: float) -> dict[str, Any]:
    """One image (encoded, or a raw uint8 frame) through the model's whole pipeline in
    process, one at a time: what an application calling ORT itself does, with edged's
    own decode, preprocess and post-processing code so that only serving differs."""
    import onnxruntime as ort

    from edged.backends.onnxruntime import _spec
    from edged.config import load_config
    from edged.preprocess import Preprocessor, decode_image

    mc = load_config(config).model(model)
    if mc is None or mc.preprocess is None:
        raise SystemExit(f"edged bench: {config} has no model {model!r} with preprocessing")
    v = mc.variants[0]
    sess = ort.InferenceSession(str(v.path), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    pre = Preprocessor(mc.preprocess)
    data = bytes(frames[0])
    meta = header["inputs"][0]
    raw_frame = (np.frombuffer(data, np.uint8).reshape(meta["shape"])
                 if meta.get("encoding", "raw") == "raw" else None)

    def image() -> np.ndarray:
        if raw_frame is not None:
            return raw_frame
        return decode_image(data, 1 << 25, "jpeg" if data[:2] == b"\xff\xd8" else "png")

    step: Any
    if mc.postprocess is not None:
        from types import SimpleNamespace

        from edged.detect.head import DetectJob, build_postprocessor, detect_batch, fit_frame

        specs = SimpleNamespace(inputs=[_spec(a) for a in sess.get_inputs()],
                                outputs=[_spec(a) for a in sess.get_outputs()])
        post = build_postprocessor(mc.postprocess, mc.preprocess, specs,  # type: ignore[arg-type]
                                   v.path, mc.preprocess.input)
        names = [o.name for o in sess.get_outputs()]
        opts = post.parse_options({})

        def step() -> None:
            x, tf = fit_frame(post, pre, image(), "bgr" if raw_frame is None else None,
                              post.input_size)
            outs = dict(zip(names, sess.run(names, {name: x}), strict=True))
            detect_batch(post, outs, [DetectJob(opts, tf, post.input_size, None, None, False)])
    else:
        def step() -> None:
            sess.run(None, {name: pre.from_frame(image(), "bgr" if raw_frame is None else None)})

    step()
    lat: list[float] = []
    end = time.monotonic() + duration
    while time.monotonic() < end:
        t = time.perf_counter()
        step()
        lat.append(time.perf_counter() - t)
    return {"batch1": percentiles_ms(lat), "best_throughput": len(lat) / sum(lat)}


def ratios(rounds: list[dict[str, Any]]) -> dict[str, float]:
    lat = [r["daemon"]["p50_ms"] / r["raw"]["batch1"]["p50_ms"] for r in rounds]
    thr = [r["daemon"]["throughput"] / r["raw"]["best_throughput"] for r in rounds
           if r["raw"]["best_throughput"]]
    out = {"p50 daemon/raw": statistics.median(lat)}
    if thr:
        out["throughput daemon/raw-best"] = statistics.median(thr)
    if all("raw_spin_off" in r for r in rounds):
        out["p50 daemon/raw-spin-off"] = statistics.median(
            r["daemon"]["p50_ms"] / r["raw_spin_off"]["batch1"]["p50_ms"] for r in rounds)
        out["throughput daemon/raw-spin-off-best"] = statistics.median(
            r["daemon"]["throughput"] / r["raw_spin_off"]["best_throughput"] for r in rounds)
    return out


def show(rnd: dict[str, Any]) -> None:
    d = rnd["daemon"]
    print(f"daemon: {d['throughput']:.1f} req/s  p50 {d['p50_ms']:.2f} ms  p90 "
          f"{d['p90_ms']:.2f} ms  p99 {d['p99_ms']:.2f} ms  ({d['clients']} client(s) x "
          f"{d['in_flight']} in flight; statuses {d['statuses']}; variants {d['variants']})")
    for key, label in (("raw", "raw ORT"), ("raw_spin_off", "raw ORT, spinning off")):
        if key in rnd:
            r = rnd[key]
            print(f"{label}: batch-1 p50 {r['batch1']['p50_ms']:.2f} ms  best "
                  f"{r['best_throughput']:.1f}/s")


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return {k: str(v) if isinstance(v, Path) else v for k, v in d.items() if k != "func"}
