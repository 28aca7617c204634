"""``edged bench --peer triton|mlserver|kserve``: edged against a real KServe v2 server on the
same model, the same clients and the same machine.

Why: "as fast as Triton" is a claim about servers nobody here wrote, so it is measured
against them, not against edged's own floors. One run starts both servers on the ONNX
file given with ``--onnx``:

- **edged**: a daemon started by the harness (``edged.testing.harness.Daemon``) on a
  generated config: one model of one ONNX Runtime variant on that file, ``max_batch_size``
  = ``--max-batch-size``, its KServe gRPC endpoint on loopback, every other setting the
  daemon's default;
- **the peer**: ``edged.testing.peers.Peer`` (Triton with dynamic batching and the same
  ``max_batch_size``; MLServer and KServe as they come, without server-side batching),
  ONNX Runtime there with ``--peer-threads`` intra-op threads (0: ORT's default).

Both are driven by the same client processes (``edged.bench.kserve_client``:
``tritonclient.grpc``, one request in flight each unless ``--in-flight``), one client and
then ``--clients`` of them. Each server is frozen (SIGSTOP, its whole process tree) while
the other is measured, so an idle server's threads take no CPU from the one measured;
rounds alternate which server goes first, so drift cancels. Printed: the machine line,
throughput, p50 and p99 per server and phase, and the ratios edged/peer as medians of the
per-round ratios (below 1 for latency and above 1 for throughput favour edged).

With ``--floor`` a third server takes its turn in each round: the gRPC floor
(``edged.bench.grpc_floor``, the simplest Python gRPC server around one ONNX Runtime
session), and the ratios edged/floor and peer/floor are printed too: what edged's serving
costs beyond any Python gRPC server, and how far the peer is from one.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from edged.bench.floor import cores
from edged.bench.grpc_floor import GrpcFloor
from edged.bench.loadgen import drive, request
from edged.bench.threads import with_cpu
from edged.config.kserve import GRPC_SERVERS
from edged.testing.configs import config_text, model_table, variant
from edged.testing.harness import Daemon, free_port, machine_info, say_machine
from edged.testing.peer_venvs import KINDS, PeerUnavailable
from edged.testing.peers import Peer

#: the servers of a run, in the order of an even round (odd rounds go backwards)
SERVERS = ("edged", "peer")
WITH_FLOOR = ("edged", "peer", "floor")
METRICS = (("throughput", "throughput"), ("p50", "p50_ms"), ("p99", "p99_ms"),
           ("cpu/request", "cpu_ms_per_request"))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--peer", choices=KINDS,
                   help="start this real KServe v2 server and an edged daemon on the ONNX "
                        "file --onnx and compare them through the same tritonclient gRPC "
                        "clients at 1 and --clients client processes")
    p.add_argument("--onnx", type=Path, metavar="MODEL_FILE",
                   help="with --peer: the ONNX file both servers serve")
    p.add_argument("--max-batch-size", type=int, default=8,
                   help="with --peer: max_batch_size of both servers (default 8)")
    p.add_argument("--grpc-server", choices=tuple(GRPC_SERVERS), default="threads",
                   help="with --peer: edged's [server.kserve] grpc_server (default threads)")
    p.add_argument("--peer-threads", type=int, default=0,
                   help="with --peer: ONNX Runtime intra-op threads in the peer (default 0: "
                        "ORT's default, the usable cores)")


def check_args(args: argparse.Namespace) -> str | None:
    """What is wrong with a ``--peer`` command line (None: nothing)."""
    if args.onnx is None:
        return "--peer needs --onnx MODEL_FILE (the model both servers serve)"
    if not args.onnx.is_file():
        return f"--onnx {args.onnx}: no such file"
    if args.max_batch_size < 1:
        return f"--max-batch-size must be >= 1; got {args.max_batch_size}"
    if args.peer_threads < 0:
        return f"--peer-threads must be >= 0; got {args.peer_threads}"
    if args.clients < 1 or args.in_flight < 1 or args.rounds < 1 or args.duration <= 0:
        return "--clients, --in-flight and --rounds must be >= 1 and --duration > 0"
    if args.input == "image":
        return "--peer sends raw tensors: use --input random or --input npy"
    for flag, given in (("--raw", args.raw), ("--raw-pipeline", args.raw_pipeline),
                        ("--threads", args.threads),
                        ("--kserve", args.kserve)):
        if given:
            return f"--peer starts both servers itself and does not take {flag}"
    if args.protocol != "native" or args.transport != "socket":
        return "--peer drives both servers through tritonclient's gRPC client; drop " \
               "--protocol and --transport"
    return None


def run_peer(args: argparse.Namespace) -> int:
    why = check_args(args)
    if why is not None:
        print(f"edged bench: {why}", file=sys.stderr)
        return 2
    info = machine_info()
    say_machine(info, cores())
    name = args.model or "model"
    with tempfile.TemporaryDirectory(prefix="edged-bench-peer-") as tmp:
        work = Path(tmp)
        try:
            peer = Peer(args.peer, args.onnx, work / args.peer, name=name,
                        max_batch_size=args.max_batch_size, threads=args.peer_threads)
        except (PeerUnavailable, ValueError) as e:
            print(f"edged bench: --peer {args.peer}: {e}", file=sys.stderr)
            return 2
        daemon: Daemon | None = None
        floor: GrpcFloor | None = None
        try:  # whatever happens (Ctrl-C included), no server outlives the run
            print(f"{args.peer}: {', '.join(f'{k} {v}' for k, v in peer.versions.items())}; "
                  f"ready in {peer.start():.1f} s (gRPC {peer.grpc}, log {peer.log_path})")
            daemon, address = start_daemon(work / "edged", args.onnx, name,
                                           args.max_batch_size, args.grpc_server)
            if args.floor:
                floor = GrpcFloor(args.onnx, name, args.max_batch_size)
                print(f"gRPC floor: ready (gRPC {floor.address})", file=sys.stderr)
            result = compare(args, daemon, address, peer, info, floor)
        except PeerUnavailable as e:
            print(f"edged bench: --peer {args.peer}: {e}", file=sys.stderr)
            return 2
        except RuntimeError as e:  # the daemon did not start, or a server died
            print(f"edged bench: --peer: {str(e).splitlines()[0]}", file=sys.stderr)
            return 1
        finally:
            if daemon is not None:
                os.kill(daemon.pid, signal.SIGCONT)
                daemon.stop()
            if floor is not None:
                floor.close()
            peer.stop()
    report(result, args)
    return 0


def start_daemon(workdir: Path, onnx: Path, name: str, max_batch_size: int,
                 grpc_server: str = "threads") -> tuple[Daemon, str]:
    """edged serving ``onnx`` as ``name`` with its KServe gRPC endpoint on loopback."""
    workdir.mkdir(parents=True, exist_ok=True)
    address = f"127.0.0.1:{free_port()}"
    text = config_text(models=[model_table(name, [variant("onnx", onnx.resolve())],
                                           max_batch_size=max_batch_size, required=True)],
                       server=f'[server.kserve]\ngrpc = "{address}"\n'
                              f'grpc_server = "{grpc_server}"\n')
    config = workdir / "edged.toml"
    config.write_text(text)
    d = Daemon(config, workdir)
    print(f"edged: ready in {d.ready_s:.1f} s (gRPC {address}, log {d.log_path})",
          file=sys.stderr)
    return d, address


class _Frozen:
    """Every server but the one measured frozen."""

    def __init__(self, daemon: Daemon, peer: Peer, floor: GrpcFloor | None) -> None:
        self.daemon, self.peer, self.floor = daemon, peer, floor

    def only(self, server: str) -> None:
        for name in (WITH_FLOOR if self.floor is not None else SERVERS):
            if name != server:
                self._signal(name, freeze=True)
        self._signal(server, freeze=False)
        time.sleep(0.2)  # the thawed one's threads wake and settle before the clients start
        alive = [("the edged daemon", self.daemon.proc.poll() is None),
                 (f"the {self.peer.kind} server", self.peer.running)]
        if self.floor is not None:
            alive.append(("the gRPC floor", self.floor.running))
        for what, up in alive:
            if not up:
                raise RuntimeError(f"{what} exited during the run")

    def _signal(self, server: str, freeze: bool) -> None:
        if server == "peer":
            self.peer.freeze() if freeze else self.peer.thaw()
            return
        pid = self.daemon.pid if server == "edged" else self.floor.pid  # type: ignore[union-attr]
        os.kill(pid, signal.SIGSTOP if freeze else signal.SIGCONT)


def compare(args: argparse.Namespace, daemon: Daemon, address: str, peer: Peer,
            info: dict[str, Any], floor: GrpcFloor | None = None) -> dict[str, Any]:
    """The rounds: each server at one client then ``--clients``, the others frozen."""
    with daemon.client(timeout_s=10) as c:
        model = {m["name"]: m for m in c.models().header["models"]}[args.model or "model"]
    ns = argparse.Namespace(**{**vars(args), "model": model["name"]})
    header, frames = request(model, ns)
    frozen = _Frozen(daemon, peer, floor)
    servers = SERVERS if floor is None else WITH_FLOOR
    targets = {"edged": address, "peer": peer.grpc}
    pids = {"edged": daemon.pid, "peer": peer.pid}  # whose process tree's CPU is counted
    if floor is not None:
        targets["floor"] = floor.address
        pids["floor"] = floor.pid
    phases = [(1, "1 client"), (args.clients, f"{args.clients} clients")]
    warm = min(2.0, args.duration)
    for server in servers:  # unmeasured: connections, ORT's first runs, the batch sizes
        frozen.only(server)
        drive(_namespace(args, targets[server], args.clients, warm), header, frames,
              f"warm-up {server}")
    rounds = []
    for k in range(args.rounds):
        rnd: dict[str, Any] = {}
        for server in (servers if k % 2 == 0 else servers[::-1]):
            frozen.only(server)
            rnd[server] = {}
            for n, what in phases:
                label = f"round {k + 1} {_name(server, peer.kind)}, {what}"
                ns = _namespace(args, targets[server], n, args.duration)
                rnd[server][str(n)] = with_cpu(pids[server], functools.partial(
                    drive, ns, header, frames, label))
        rounds.append(rnd)
        show_round(rnd, peer.kind, args.clients)
    frozen.only("edged")
    return {"machine": info, "peer": peer.kind, "peer_versions": peer.versions,
            "model": str(args.onnx),
            "max_batch_size": args.max_batch_size, "clients": [1, args.clients],
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()
                     if k not in ("func", "watch")},
            "rounds": rounds, "ratios": ratios(rounds, args.clients, floor is not None),
            "load_avg_end": [round(x, 2) for x in os.getloadavg()]}


def _namespace(args: argparse.Namespace, address: str, clients: int,
               duration: float) -> argparse.Namespace:
    return argparse.Namespace(protocol="kserve-grpc", kserve=address, clients=clients,
                              in_flight=args.in_flight, duration=duration,
                              transport="socket")


def ratios(rounds: list[dict[str, Any]], clients: int,
           floor: bool = False) -> dict[str, float]:
    """edged/peer (and with the floor, edged/floor and peer/floor) per round, for each
    measure and phase; the median over rounds."""
    pairs = [("edged", "peer")] + ([("edged", "floor"), ("peer", "floor")] if floor else [])
    out = {}
    for a, b in pairs:
        for n in sorted({1, clients}):
            for label, key in METRICS:
                per_round = [_div(r[a][str(n)][key], r[b][str(n)][key]) for r in rounds]
                per_round = [v for v in per_round if v == v]  # nan: a phase with no reply
                what = "1 client" if n == 1 else f"{n} clients"
                out[f"{label} {a}/{b}, {what}"] = (statistics.median(per_round) if per_round
                                                   else float("nan"))
    return out


def _div(a: float, b: float) -> float:
    return a / b if b and a == a and b == b else float("nan")


def _name(server: str, kind: str) -> str:
    return {"peer": kind, "floor": "gRPC floor"}.get(server, server)


def show_round(rnd: dict[str, Any], kind: str, clients: int) -> None:
    for server in rnd:
        name = _name(server, kind)
        for n in sorted({1, clients}):
            d = rnd[server][str(n)]
            print(f"{name:<10} {n:>2} client(s): {d['throughput']:8.1f}/s  p50 "
                  f"{d['p50_ms']:7.2f} ms  p99 {d['p99_ms']:7.2f} ms  CPU "
                  f"{d.get('cpu_ms_per_request', float('nan')):6.3f} ms/request  "
                  f"statuses {d['statuses']}")


def report(result: dict[str, Any], args: argparse.Namespace) -> None:
    print(f"median over {args.rounds} round(s) of edged/{result['peer']} (load average at the "
          f"end {' '.join(map(str, result['load_avg_end']))}):")
    for key, v in result["ratios"].items():
        print(f"  {key:<40} {v:.3f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str) + "\n")
        print(f"wrote {args.json}")
