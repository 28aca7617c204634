#!/usr/bin/env python3
"""Where one request's time goes, per protocol and thread: the hot path's profile.

    PYTHONPATH=. python scripts/bench/profile_hot_path.py [--seconds 5] [--clients 1,8]
        [--protocols native,kserve-grpc,kserve-http,frigate] [--perf] [--json out.json]

For each protocol and client count, a fresh daemon runs under ``edged.testing.callcount
--profile`` (a ``cProfile`` per serving thread: the event loop, the model's worker, gRPC's
handler threads, the decode and KServe pools) while client processes drive it (the same
clients as ``edged bench``: ``edged.bench.loadgen``; Frigate's through
``edged.testing.frigate_plugin``, which speaks as Frigate's own plugin does). The model is
the shipped digits CNN (0.3-0.9 ms of compute) for native and KServe, the shipped person
detector for Frigate (a detector is what Frigate asks for). After the run, every
function's own time is put in a stage of the request path and divided by the requests
answered: the table says how many microseconds each stage costs a request, on which
thread. With ``--perf`` (``perf`` installed), ``perf stat`` counts the daemon's task
clock, context switches and CPU migrations over the same phase.

A profiler makes Python calls dearer (about 2x for call-heavy code), so read the stages'
shares and the thread each runs on, not their absolute microseconds; the deterministic
count of calls per request is ``tests/test_hot_path_calls.py``'s. docs/benchmarks.md keeps
this output from before and after the hot path's redesign.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from edged.bench.loadgen import drive, request  # noqa: E402
from edged.testing.callcount import snapshot_delta, take_snapshot  # noqa: E402
from edged.testing.configs import (  # noqa: E402
    config_text,
    model_table,
    shipped_person_block,
    variant,
)
from edged.testing.harness import Daemon, free_port, machine_info, say_machine  # noqa: E402

DIGITS = ROOT / "models/digits/cnn-fp32.onnx"
PERSON = ROOT / "models/person/ssdlite-fp32.onnx"
PROTOCOLS = ("native", "kserve-grpc", "kserve-http", "frigate")

#: the stages of a request, by where a function lives (first match wins)
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("compute", ("edged/backends/", "onnxruntime", "openvino")),
    ("metrics", ("edged/metrics.py", "prometheus_client")),
    ("receive + parse", ("protocols/sockets.py", "native/request.py", "native/tensors.py",
                         "frigate/wire.py", "kserve/tensors.py", "json/decoder", "json/__init__",
                         "grpc/", "aiohttp", "google/protobuf", "multidict", "yarl",
                         "kserve/grpc_server.py", "kserve/grpc_loop_server.py",
                         "kserve/http_server.py", "zmq/")),
    ("admission", ("protocols/admission.py", "model/registry.py", "protocols/serving.py",
                   "kserve/offload.py", "config/kserve.py")),
    ("prepare", ("model/contract.py", "model/heads.py", "model/detect_head.py",
                 "edged/preprocess/", "model/request.py", "model/streams.py", "numpy/")),
    ("batching", ("edged/batching/", "model/model.py", "model/batch_record.py",
                  "model/usage.py", "verify/verifier.py", "model/live_variant.py")),
    ("reply", ("native/reply.py", "native/room.py", "frigate/room.py", "kserve/core.py",
               "kserve/grpc_wire.py",
               "json/encoder", "native/detections.py", "edged/detect/")),
    ("event loop", ("asyncio/", "selectors.py")),
    ("thread hand-offs", ("concurrent/futures", "threading.py", "queue.py")),
)


def stage_of(filename: str) -> str:
    for stage, marks in STAGES:
        if any(m in filename for m in marks):
            return stage
    return "other"


def thread_row(name: str) -> str:
    if name == "MainThread":
        return "event loop thread"
    for prefix, row in (("edged-grpc", "gRPC handler threads"), ("edged-kserve", "KServe pool"),
                        ("edged-pre", "decode pool")):
        if name.startswith(prefix):
            return row
    return "model worker"


def stages_per_request(delta: dict[str, dict[tuple[str, int, str], float]],
                       requests: int) -> dict[str, dict[str, float]]:
    """µs per request by thread row and stage, from each thread's own time per function
    over the measured phase (``edged.testing.callcount.snapshot_delta``)."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for thread, funcs in delta.items():
        row = thread_row(thread)
        for (filename, _line, name), tottime in funcs.items():
            if _waiting(name):
                continue  # waiting for work is not a request's cost
            if filename == "~":  # a builtin: its own time goes where its name says
                filename = name
            out[row][stage_of(filename)] += tottime
    return {row: {k: 1e6 * v / max(requests, 1) for k, v in stages.items() if v > 0}
            for row, stages in out.items()}


def _waiting(name: str) -> bool:
    """A builtin that blocks until there is work: epoll (the loop), a lock or a queue's
    get (a pool's idle worker), a gRPC completion queue."""
    return ("epoll" in name and "poll" in name) or ("acquire" in name and "lock" in name) \
        or ("_cygrpc" in name and "poll" in name) or name == "<built-in method _queue.get>" \
        or ("SimpleQueue" in name and "get" in name)


def config(tmp: Path, protocol: str) -> tuple[Path, dict[str, str]]:
    """A config serving the digits CNN (and, for Frigate, the person detector on an endpoint
    of its own), with KServe gRPC and HTTP on loopback."""
    grpc, http = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    frigate = f"tcp://127.0.0.1:{free_port()}"
    server = f'[server.kserve]\ngrpc = "{grpc}"\nhttp = "{http}"\n'
    models = [model_table("digits", [variant("fp32", DIGITS)], max_batch_size=8)]
    if protocol == "frigate":
        server += f'[[server.frigate]]\nendpoint = "{frigate}"\nmodel = "person"\n'
        models.append(shipped_person_block(ROOT))
    path = tmp / "edged.toml"
    path.write_text(config_text(models=models, server=server))
    return path, {"grpc": grpc, "http": http, "frigate": frigate}


def frigate_client(endpoint: str, seconds: float, done: Any) -> None:
    from edged.testing.frigate_plugin import FrigateDetector

    det = FrigateDetector(endpoint, PERSON, model_type="ssd")
    frame = np.random.default_rng(0).integers(0, 255, (1, 320, 320, 3), np.uint8)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        det.detect_raw(frame)
        with done.get_lock():
            done.value += 1
    det.close()


def drive_frigate(endpoint: str, clients: int, seconds: float) -> int:
    ctx = mp.get_context("spawn")
    done = ctx.Value("l", 0)
    procs = [ctx.Process(target=frigate_client, args=(endpoint, seconds, done))
             for _ in range(clients)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(seconds + 60)
    return int(done.value)


def phase(protocol: str, clients: int, seconds: float, use_perf: bool) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="edged-profile-"))
    cfg, where = config(tmp, protocol)
    prof = tmp / "prof"
    d = Daemon(cfg, tmp / "d", launcher=("-m", "edged.testing.callcount", "--profile",
                                         str(prof)))
    perf = None
    try:
        with d.client() as c:
            model = {m["name"]: m for m in c.models().header["models"]}["digits"]
        ns = argparse.Namespace(model="digits", input="random", file=None, clients=clients,
                                in_flight=1, duration=seconds, transport="socket",
                                protocol=protocol, endpoint=d.tcp,
                                kserve=where["http" if protocol == "kserve-http" else "grpc"])
        header, frames = request(model, ns)
        warm = argparse.Namespace(**{**vars(ns), "duration": 1.0})
        if protocol == "frigate":
            drive_frigate(where["frigate"], clients, 1.0)
        else:
            drive(warm, header, frames, "warm-up")
        before = take_snapshot(prof)
        if use_perf and shutil.which("perf"):
            perf = subprocess.Popen(["perf", "stat", "-x,", "-e",
                                     "task-clock,context-switches,cpu-migrations",
                                     "-p", str(d.pid)], stderr=subprocess.PIPE, text=True)
        if protocol == "frigate":
            answered = drive_frigate(where["frigate"], clients, seconds)
            result: dict[str, Any] = {"ok": answered, "throughput": answered / seconds}
        else:
            result = drive(ns, header, frames, f"{protocol}, {clients} client(s)")
        after = take_snapshot(prof)
    finally:
        if perf is not None:
            perf.send_signal(signal.SIGINT)
            result["perf"] = perf.communicate(timeout=30)[1]
        d.stop()
    result["stages_us"] = stages_per_request(snapshot_delta(before, after), result["ok"])
    shutil.rmtree(tmp, ignore_errors=True)
    return result


def show(protocol: str, clients: int, r: dict[str, Any]) -> list[str]:
    stages = [s for s, _ in STAGES] + ["other"]
    lines = [f"\n{protocol}, {clients} client(s): {r['throughput']:.0f} requests/s"
             + (f", p50 {r['p50_ms']:.2f} ms" if "p50_ms" in r else ""),
             "| thread | " + " | ".join(stages) + " | total µs/request |",
             "|---" * (len(stages) + 2) + "|"]
    for row, per in sorted(r["stages_us"].items()):
        total = sum(per.values())
        lines.append(f"| {row} | " + " | ".join(f"{per.get(s, 0):.0f}" for s in stages)
                     + f" | **{total:.0f}** |")
    if r.get("perf"):
        lines.append("perf stat: " + "; ".join(
            ",".join(line.split(",")[:3]) for line in r["perf"].strip().splitlines()))
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--clients", default="1,8")
    ap.add_argument("--protocols", default=",".join(PROTOCOLS))
    ap.add_argument("--perf", action="store_true", help="also perf stat the daemon")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    info = machine_info()
    say_machine(info, len(os.sched_getaffinity(0)))
    results: dict[str, Any] = {"machine": info, "runs": {}}
    for protocol in args.protocols.split(","):
        for clients in map(int, args.clients.split(",")):
            r = phase(protocol, clients, args.seconds, args.perf)
            results["runs"][f"{protocol} {clients}"] = r
            print("\n".join(show(protocol, clients, r)), flush=True)
    results["load_avg_end"] = os.getloadavg()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
