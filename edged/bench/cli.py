"""``edged bench``: drive a running daemon and, with ``--raw``, compare it with the same
model run in process by ONNX Runtime (default session options, as a user would);
``edged bench soak`` starts a daemon of its own and holds it under mixed load (``soak``);
``edged bench footprint`` starts one to time its start and measure its idle CPU and
memory (``footprint``); ``edged bench --peer triton|mlserver|kserve --onnx MODEL.onnx``
starts a daemon and a real KServe v2 server on that file and compares them (``peer``).

Why in the package: an operator measures *their* device with *their* model without
the repository's scripts; the figures are the ones the docs report (throughput, p50,
p90, p99 and daemon/raw ratios), computed by the harness the tests use.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from edged.bench import footprint, peer
from edged.bench.daemon_process import daemon_pid
from edged.bench.floor import Floors, check_single_input, cores
from edged.bench.loadgen import drive, request
from edged.bench.raw import raw_ort, raw_pipeline
from edged.bench.soak import add_parser as add_soak
from edged.bench.threads import Watch, report, with_cpu, worker_names
from edged.testing.harness import machine_info, say_machine

#: what ``edged bench --help`` says (the module docstring is for developers)
DESCRIPTION = """\
Load a running daemon and report throughput and latency (p50, p90, p99); with --raw, the
same model run in process by ONNX Runtime beside it, and the daemon/raw ratios. With --peer
triton|mlserver|kserve --onnx MODEL.onnx: start a daemon and that real KServe v2 server on
the same file and compare them through the same clients (the server is installed into its
own environment under ~/.cache/edged-peers the first time, from PyPI).

  edged bench soak       start a daemon and hold it under mixed load for a long time
  edged bench footprint  start a daemon: time to healthy, idle CPU, memory
"""


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "bench", help="load a running daemon and report throughput and latency",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--endpoint", default=None,
                   help="the daemon's inference endpoint (default: $EDGED_ENDPOINT, else found "
                        "as every edged command finds its daemon, said when guessed)")
    p.add_argument("--model", help="the model to load (required unless a subcommand is "
                   "given; with --peer: the name both servers serve it as, default 'model')")
    p.add_argument("--clients", type=int, default=None,
                   help="client processes (default 1; with --floor or --peer: 8, for the "
                        "throughput phase)")
    p.add_argument("--in-flight", type=int, default=1,
                   help="requests each client keeps in flight (default 1)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per round")
    p.add_argument("--input", choices=("random", "image", "npy"), default="random",
                   help="what each request sends: random tensors (default), the --file image "
                        "or the --file .npy")
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
                        "batching) for the same model and clients, and "
                        "print the daemon's ratios to raw and to each floor, interleaved: "
                        "batch-1 p50 with one client, throughput with --clients processes; "
                        "with --peer: also the gRPC floor (the simplest Python gRPC server "
                        "around one ONNX Runtime session) as a third server")
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
    p.add_argument("--threads", action="store_true",
                   help="daemon on this host (Linux): also report CPU ms per reply by "
                        "thread of the daemon (with --floor: and of each floor server) and "
                        "the clients' CPU per reply, for every measured phase, from /proc")
    p.add_argument("--control", metavar="ENDPOINT",
                   help="with --threads: the daemon's control socket, where its PID is read "
                        "(default: control.sock beside an ipc:// --endpoint, else as "
                        "'edged status' finds it)")
    p.add_argument("--json", type=Path, help="write the full result here")
    peer.add_arguments(p)
    p.set_defaults(func=run)
    # Subcommands that start a daemon of their own instead of loading a running one.
    sub = p.add_subparsers(dest="bench_cmd", metavar="{soak,footprint}", required=False)
    add_soak(sub)
    footprint.add_parser(sub)


def run(args: argparse.Namespace) -> int:
    from edged.client import Client

    if args.peer is not None:
        if args.clients is None:
            args.clients = 8
        return peer.run_peer(args)
    if args.model is None:
        print("edged bench: --model is required (or `edged bench soak` or `edged bench "
              "footprint`, which start a daemon of their own)", file=sys.stderr)
        return 2
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
    if args.endpoint is None:
        from edged.client.discover import Ambiguous, NotFound, find_endpoint

        try:
            found = find_endpoint(control=args.control)
        except (Ambiguous, NotFound) as e:
            print(f"edged bench: {e}".replace("--control ipc://PATH", "--endpoint ENDPOINT"),
                  file=sys.stderr)
            return 2
        args.endpoint = found.address
        if found.guessed:
            print(f"edged bench: talking to {found.address} ({found.how}; --endpoint picks "
                  "another)", file=sys.stderr)
    if args.protocol != "native" and (args.kserve is None or args.transport != "socket"
                                      or args.input == "image"):
        print(f"edged bench: --protocol {args.protocol} needs --kserve HOST:PORT and raw "
              "tensors (--input random or npy) over the socket transport", file=sys.stderr)
        return 2
    from edged.client.discover import probe

    probe(args.endpoint)  # nothing listens there: said at once (Unreachable), not in 10 s
    with Client(args.endpoint, timeout_s=10.0) as c:
        r = c.models()
    models = {m["name"]: m for m in r.header.get("models", [])}
    if args.model not in models:
        print(f"edged bench: {args.endpoint} does not serve {args.model!r} "
              f"(it serves {', '.join(models) or 'nothing'})", file=sys.stderr)
        return 2
    header, frames = request(models[args.model], args)
    args.watch = None  # with --threads: the daemon's Watch
    #: the daemon's process, for CPU per request (None: not on this host, or not found)
    args.daemon_pid = _local_pid(args.endpoint, args.control)
    if args.threads:
        try:
            pid, note = daemon_pid(args.endpoint, args.control)
        except (RuntimeError, OSError) as e:
            print(f"edged bench: --threads: {e}", file=sys.stderr)
            return 2
        if note is not None:
            print(f"edged bench: --threads: WARNING: {note}; reading process {pid} as you "
                  "said (--control)", file=sys.stderr)
        args.watch = Watch(pid, worker_names(list(models)))
    if args.floor:
        return run_floor(args, header, frames)
    result: dict[str, Any] = {"machine": machine_info(), "args": _jsonable(vars(args)),
                              "rounds": []}
    for k in range(args.rounds):
        rnd: dict[str, Any] = {"daemon": watched(args.watch, args, header, frames,
                                                 f"round {k + 1}", args.daemon_pid)}
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
    if args.threads:
        result["threads"] = report(result["rounds"], {"daemon": "daemon"})
        print("\n".join(result["threads"]["table"]))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str) + "\n")
        print(f"wrote {args.json}")
    return 0


def run_floor(args: argparse.Namespace, header: dict[str, Any], frames: list[Any]) -> int:
    """Daemon, raw ORT and the two floors (``edged.bench.floor``) in one run, interleaved.

    Each round: batch-1 p50 with one client (raw in process, the daemon, the one-thread
    floor), then throughput with ``--clients`` processes (the daemon, the batching floor,
    raw's best batch). Ratios are medians over rounds."""

    why = check_single_input(args.raw, header)
    if why is not None:
        print(f"edged bench: --floor: {why}", file=sys.stderr)
        return 2
    info = machine_info()
    say_machine(info, cores())
    result: dict[str, Any] = {"machine": info, "args": _jsonable(vars(args)), "rounds": []}
    one = argparse.Namespace(**{**vars(args), "clients": 1, "in_flight": 1})
    with Floors(args.raw, header, args.endpoint) as floors:
        watches: dict[str, Watch | None] = {"daemon_b1": args.watch, "daemon_n": args.watch}
        pids = {"daemon_b1": args.daemon_pid, "daemon_n": args.daemon_pid,
                "floor_b1": floors.one_thread_pid, "floor_n": floors.batching_pid}
        if args.threads:
            watches.update(floor_b1=Watch(floors.one_thread_pid),
                           floor_n=Watch(floors.batching_pid))
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
                            if ns is None else watched(watches.get(key), ns, header, frames,
                                                       f"{tag} {what}", pids[key]))
            result["rounds"].append(rnd)
            show_floor(rnd, args.clients)
    result["ratios"] = floor_ratios(result["rounds"])
    result["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    print(f"median over {args.rounds} round(s), load average at the end "
          f"{' '.join(map(str, result['load_avg_end']))}:")
    for key, v in result["ratios"].items():
        print(f"  {key:<44} {v:.3f}")
    if args.threads:
        result["threads"] = report(result["rounds"], {
            "daemon_b1": "daemon, 1 client", "floor_b1": "one-thread floor",
            "daemon_n": f"daemon, {args.clients} clients", "floor_n": "batching floor"})
        print("\n".join(result["threads"]["table"]))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str) + "\n")
        print(f"wrote {args.json}")
    return 0


def watched(watch: Watch | None, ns: argparse.Namespace, header: dict[str, Any],
            frames: list[Any], label: str, pid: int | None = None) -> dict[str, Any]:
    """``drive`` the clients; the server's process-tree CPU per request when its ``pid``
    is known (``cpu_ms_per_request``); with a Watch, its threads' CPU as ``cpu``."""
    if watch is not None:
        watch.start()
    out = with_cpu(pid, lambda: drive(ns, header, frames, label))
    if watch is not None:
        try:
            out["cpu"] = watch.stop()
        except RuntimeError as e:  # the server exited: its column is left out of the table
            print(f"edged bench: --threads: {label}: {e}", file=sys.stderr)
    return out


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
    nan = float("nan")
    print(f"CPU ms per request: daemon {d1.get('cpu_ms_per_request', nan):.3f} (1 client), "
          f"{dn.get('cpu_ms_per_request', nan):.3f} ({clients}); floors "
          f"{f1.get('cpu_ms_per_request', nan):.3f}, {fn.get('cpu_ms_per_request', nan):.3f}")


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
    cpu = d.get("cpu_ms_per_request")
    print(f"daemon: {d['throughput']:.1f} req/s  p50 {d['p50_ms']:.2f} ms  p90 "
          f"{d['p90_ms']:.2f} ms  p99 {d['p99_ms']:.2f} ms  "
          + (f"CPU {cpu:.3f} ms/request  " if cpu is not None else "")
          + f"({d['clients']} client(s) x "
          f"{d['in_flight']} in flight; statuses {d['statuses']}; variants {d['variants']})")
    for key, label in (("raw", "raw ORT"), ("raw_spin_off", "raw ORT, spinning off")):
        if key in rnd:
            r = rnd[key]
            print(f"{label}: batch-1 p50 {r['batch1']['p50_ms']:.2f} ms  best "
                  f"{r['best_throughput']:.1f}/s")


def _local_pid(endpoint: str, control: str | None) -> int | None:
    """The daemon's pid when it runs on this host and can be found, else None (CPU per
    request is then left out, silently: it is a figure beside the others, not a must)."""
    try:
        pid, note = daemon_pid(endpoint, control)
    except Exception:  # no control socket, several daemons, another host: leave it out
        return None
    return pid if note is None else None


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return {k: str(v) if isinstance(v, Path) else v for k, v in d.items()
            if k not in ("func", "watch")}
