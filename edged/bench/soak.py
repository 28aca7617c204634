"""``edged bench soak``: a real daemon under steady mixed load for a long while.

Starts ``edged serve`` (``--config``, default ``config.toml``) on private endpoints,
measures what it sustains of the soak's own open-loop mix (``soak_probe``: a pipelined
burst bounds it, then the same client processes step the open-loop rate up until the
daemon refuses or its latency climbs), then runs open-loop load at ``--load`` (default
80 %) of that capacity for ``--duration`` seconds from those client processes, so that
``--load 0.8`` on a quiet machine refuses (almost) nothing and its latencies are those of
an unsaturated daemon. The mix (``soak_mix``): mostly valid inferences of the digits
model (checked against a reference ONNX Runtime run), plus invalid requests, requests
that expire (a tiny ``timeout_ms``) and superseded stream frames (bursts on one
``stream``).

Reports (``soak_report``): requests served, replies by status, refused % (valid
requests answered RESOURCE_EXHAUSTED), lost replies (sent - received; must be 0), wrong
answers, the probe's steps, p50/p99 of valid requests per window, daemon RSS at start /
after warm-up / end and its growth. Exit status 1 if anything was lost or wrong, the
daemon died, or RSS grew more than ``--max-rss-growth`` percent after warm-up.

    edged bench soak                       # 10 minutes on ./config.toml
    edged bench soak --duration 30 --json out.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from edged.bench.soak_mix import DIGITS, KINDS, MixClient
from edged.bench.soak_probe import PROBE_FRACTIONS, measure_capacity
from edged.bench.soak_report import print_report, summarise
from edged.testing.harness import Daemon, machine_info

#: what ``edged bench soak --help`` says (the module docstring is for developers)
DESCRIPTION = """\
Start a daemon on --config (private endpoints; a running edged is not touched) and hold it
under a mix of valid, invalid, expiring and superseded requests at --load of its measured
capacity for --duration seconds. Prints replies by status, lost replies, wrong answers,
p50/p99 per window and the daemon's memory; exits 1 if a reply was lost or wrong, the
daemon died or its memory grew more than --max-rss-growth percent.
"""


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "soak", help="start a daemon and hold it at a share of its measured capacity",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="config.toml", help="the daemon's configuration")
    p.add_argument("--model", default="digits",
                   help="the digits classifier's name in --config (default digits)")
    p.add_argument("--digits", type=Path, default=DIGITS, metavar="DIR",
                   help="the digits model's directory (validation.npz, cnn-fp32.onnx): the "
                        "requests' images and the reference their answers are checked against")
    p.add_argument("--duration", type=float, default=600.0, help="seconds of steady load")
    p.add_argument("--clients", type=int, default=4, help="client processes")
    p.add_argument("--load", type=float, default=0.8, help="fraction of measured capacity")
    p.add_argument("--capacity-seconds", type=float, default=3.0,
                   help="seconds of the pipelined burst that bounds the probe's steps")
    p.add_argument("--probe-step-seconds", type=float, default=2.0,
                   help="seconds per open-loop probe step (up to "
                        f"{len(PROBE_FRACTIONS)} steps)")
    p.add_argument("--warmup", type=float, default=30.0,
                   help="seconds of load before the 'after warm-up' RSS sample")
    p.add_argument("--window", type=float, default=30.0, help="latency window, seconds")
    p.add_argument("--transport", choices=("tcp", "ipc"), default="tcp",
                   help="how the clients reach the daemon (default tcp)")
    p.add_argument("--valid", type=float, default=0.85, help="share of valid requests")
    p.add_argument("--invalid", type=float, default=0.05,
                   help="share of requests the daemon must refuse (default 0.05)")
    p.add_argument("--expired", type=float, default=0.05,
                   help="share of requests whose deadline passes before they run (default 0.05)")
    p.add_argument("--stream", type=float, default=0.05,
                   help="share of stream frames a newer one replaces (default 0.05)")
    p.add_argument("--max-rss-growth", type=float, default=20.0,
                   help="percent growth after warm-up that fails the run")
    p.add_argument("--seed", type=int, default=1, help="random seed of the mix (default 1)")
    p.add_argument("--json", type=Path, help="also write the report to this file")
    p.add_argument("--verbose", "-v", action="store_true", help="print each window as it ends")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    report = run(args)
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


def log(msg: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def start_daemon(config: Path, work: Path, ready_timeout: float = 90.0) -> Daemon:
    d = Daemon(config, work, wait=False, args=("--log-level", "warning"))
    try:
        d.wait_ready(ready_timeout)
    except RuntimeError:
        d.proc.kill()
        raise
    return d


def rss_bytes(pid: int) -> int:
    import psutil

    return int(psutil.Process(pid).memory_info().rss)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Probe, then hold the load; the report (``soak_report.summarise``) with the probe."""
    from edged.config.file import load_config

    config = Path(args.config).resolve()
    load_config(config)  # a bad config is said here (file, line, key), not by the daemon
    work = Path(tempfile.mkdtemp(prefix="edged-soak-"))
    mix = {"valid": args.valid, "invalid": args.invalid, "expired": args.expired,
           "stream": args.stream}
    try:
        d = start_daemon(config, work)
    except RuntimeError:
        shutil.rmtree(work, ignore_errors=True)
        raise
    endpoint = d.ipc if args.transport == "ipc" else d.tcp
    report: dict[str, Any] = {"config": str(config), "endpoint": args.transport,
                              "clients": args.clients, "mix": mix, "machine": machine_info()}
    try:
        rss_start = rss_bytes(d.pid)
        t0 = time.monotonic()
        rate = _probe(args, endpoint, mix, report)
        held = _hold(args, d, endpoint, mix, rate, rss_start)
    finally:
        code = d.stop(30.0)
    report.update(summarise(
        held["results"], args.window, args.max_rss_growth, held["load_s"],
        (rss_start, held["rss_warm"], held["rss_end"]), held["rss_samples"], held["alive"],
        code, report["capacity_probe"]["lost"]))
    report["elapsed_s"] = round(time.monotonic() - t0, 1)
    tracebacks = d.log().count("Traceback")
    report["daemon_log_tracebacks"] = tracebacks
    if tracebacks or not report["ok"]:
        report["daemon_log_tail"] = d.log_tail(40)
    shutil.rmtree(work, ignore_errors=True)
    return report


def _probe(args: argparse.Namespace, endpoint: str, mix: dict[str, float],
           report: dict[str, Any]) -> float:
    """Measure the capacity, log the probe's steps; the steady load's rate (req/s)."""
    probe = measure_capacity(endpoint, args.model, args.clients, args.capacity_seconds,
                             args.probe_step_seconds, mix, args.seed, args.digits)
    capacity = probe["capacity_rps"]
    if not capacity:
        capacity = PROBE_FRACTIONS[0] * probe["upper_bound_rps"]
        log("WARNING: no open-loop probe step was sustained (busy machine?); the soak "
            f"runs at --load of the lightest step, {capacity:.0f} req/s")
    rate = capacity * args.load
    report.update(capacity_rps=round(capacity, 1), target_rps=round(rate, 1),
                  capacity_probe=probe)
    for st in probe["steps"]:
        log(f"probe {st['rate_rps']:8.1f} req/s open loop: refused {st['refused_pct']} %, "
            f"p50 {st['p50_ms']} ms, p99 {st['p99_ms']} ms"
            + ("" if st["sustained"] else "  (not sustained)"))
    if probe["capacity_is_lower_bound"]:
        log("every probe step was sustained: the capacity is at least the last step's")
    log(f"capacity {capacity:.0f} req/s of the mix (open loop, {args.clients} clients; "
        f"pipelined upper bound {probe['upper_bound_rps']:.0f}); steady load {rate:.0f} "
        f"req/s for {args.duration:.0f} s")
    return rate


def _hold(args: argparse.Namespace, d: Daemon, endpoint: str, mix: dict[str, float],
          rate: float, rss_start: int) -> dict[str, Any]:
    """``rate`` req/s of the mix from the client processes for ``--duration``, sampling
    the daemon's RSS meanwhile; the clients' results and the RSS figures."""
    spawn = mp.get_context("spawn")
    q: Any = spawn.Queue()
    procs = [spawn.Process(target=load_worker,
                           args=(k, endpoint, args.model, rate / args.clients, args.duration,
                                 args.window, mix, args.seed + k, q, args.digits))
             for k in range(args.clients)]
    for p in procs:
        p.start()
    for _ in procs:
        q.get(timeout=120)  # ("ready", k): clients loaded their samples
    load_start = time.monotonic()
    warm_at = load_start + min(args.warmup, args.duration / 3)
    rss_warm = None
    rss_samples: list[tuple[float, int]] = []
    results: list[dict[str, Any]] = []
    next_sample = load_start
    while len(results) < len(procs):
        now = time.monotonic()
        if d.proc.poll() is not None:
            raise RuntimeError(f"daemon died (exit {d.proc.returncode}):\n{d.log_tail()}")
        if now >= next_sample:
            r = rss_bytes(d.pid)
            rss_samples.append((round(now - load_start, 1), r))
            if rss_warm is None and now >= warm_at:
                rss_warm = r
            next_sample = now + min(5.0, args.window / 2)
            if args.verbose:
                log(f"t={now - load_start:5.0f}s rss={r / 2**20:.1f} MiB")
        try:
            kind, payload = q.get(timeout=0.5)
        except Exception:
            if now > load_start + args.duration + 120:
                raise RuntimeError("client processes did not report back") from None
            continue
        if kind == "done":
            results.append(payload)
    for p in procs:
        p.join(30)
    load_s = time.monotonic() - load_start
    alive = d.proc.poll() is None
    if rss_warm is None:
        rss_warm = rss_samples[-1][1] if rss_samples else rss_start
    return {"results": results, "load_s": load_s, "alive": alive, "rss_warm": rss_warm,
            "rss_end": rss_bytes(d.pid) if alive else 0, "rss_samples": rss_samples}


def load_worker(k: int, endpoint: str, model: str, rate: float, duration: float,
                window_s: float, mix: dict[str, float], seed: int, out: Any,
                digits: Path = DIGITS, drain_s: float = 15.0) -> None:
    """Open-loop sender at ``rate`` req/s; reports counts, statuses and latencies."""
    n_windows = int(duration // window_s) + 1
    c = MixClient(k, endpoint, model, mix, seed, n_windows, digits)
    out.put(("ready", k))
    t_start = time.monotonic()
    behind = c.run_open_loop(rate, t_start + duration, lambda t: min(
        int((t - t_start) // window_s), n_windows - 1))
    c.drain(drain_s)
    sent = {kind: sum(w[kind] for w in c.sent) for kind in KINDS}
    statuses: dict[str, dict[str, int]] = {kind: {} for kind in KINDS}
    for w in c.statuses:
        for kind, sts in w.items():
            for st, n in sts.items():
                statuses[kind][st] = statuses[kind].get(st, 0) + n
    out.put(("done", {
        "k": k, "sent": sent, "statuses": statuses, "lost": len(c.pending),
        "lost_ids": list(c.pending)[:10], "wrong": c.wrong, "duplicates": c.duplicates,
        "unknown_ids": c.unknown_ids, "unexpected": c.unexpected,
        "latency_s": c.lat, "behind_resets": behind,
    }))
    c.close()
