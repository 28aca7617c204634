#!/usr/bin/env python3
"""ONNX Runtime's CPU memory arena on vs off, through the daemon, interleaved.

    PYTHONPATH=. python scripts/bench/bench_arena.py --clients 1,8 --rounds 3 --duration 4

Starts two daemons serving config.toml's person model (ORT fp32, two threads), one with
``cpu_mem_arena = true`` (ORT's default, edged's since the fifth build) and one with it
off, and runs ``edged bench`` against each in turn, round after round, per client count
(so a change in the machine's speed hits both): throughput, p50, p99 and, from
/proc (``--threads``), the daemon's user and kernel CPU per reply, then the medians of the
per-round ratios on/off and each daemon's RSS at the end (the arena keeps the largest
batch's activations). Needs a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from edged.testing.configs import shipped_person_block  # noqa: E402
from edged.testing.harness import Daemon, free_port, machine_info  # noqa: E402


def config(tmp: Path, arena: bool) -> Path:
    block = shipped_person_block(ROOT).replace(
        "[models.variants.options]\n",
        f"[models.variants.options]\ncpu_mem_arena = {str(arena).lower()}\n")
    p = tmp / f"arena-{'on' if arena else 'off'}.toml"
    p.write_text(f'[server]\nendpoints = ["tcp://127.0.0.1:{free_port()}"]\n'
                 f'[metrics]\nlisten = "off"\n{block}')
    return p


def bench(d: Daemon, clients: int, duration: float, out: Path) -> dict[str, Any]:
    subprocess.run([sys.executable, "-m", "edged", "bench", "--endpoint", d.tcp,
                    "--control", d.control, "--model", "person", "--input", "random",
                    "--clients", str(clients), "--duration", str(duration), "--threads",
                    "--json", str(out)], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    r = json.loads(out.read_text())
    rnd = r["rounds"][0]["daemon"]
    proc = r["threads"]["columns"]["daemon"]["process"]
    return {"throughput": rnd["throughput"], "p50_ms": rnd["p50_ms"], "p99_ms": rnd["p99_ms"],
            "user_ms": proc["user_ms_per_reply"], "sys_ms": proc["sys_ms_per_reply"]}


def rss_mb(d: Daemon) -> float:
    for line in Path(f"/proc/{d.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", default="1,8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=4.0)
    args = ap.parse_args()
    counts = [int(c) for c in args.clients.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-arena-") as tmp_s:
        tmp = Path(tmp_s)
        daemons = {"on": Daemon(config(tmp, True), tmp / "on"),
                   "off": Daemon(config(tmp, False), tmp / "off")}
        rows: dict[int, dict[str, list[dict[str, Any]]]] = {
            n: {"on": [], "off": []} for n in counts}
        try:
            for k in range(args.rounds):
                for n in counts:
                    for name in (("on", "off") if k % 2 == 0 else ("off", "on")):
                        r = bench(daemons[name], n, args.duration, tmp / "r.json")
                        rows[n][name].append(r)
                        print(f"round {k + 1}, {n} client(s), arena {name}: "
                              f"{r['throughput']:.1f}/s p50 {r['p50_ms']:.1f} ms p99 "
                              f"{r['p99_ms']:.1f} ms; daemon CPU per reply user "
                              f"{r['user_ms']:.2f} ms, kernel {r['sys_ms']:.2f} ms", flush=True)
            rss = {name: rss_mb(d) for name, d in daemons.items()}
        finally:
            for d in daemons.values():
                d.stop()
    print(f"machine: {machine_info()}")
    for n in counts:
        on, off = rows[n]["on"], rows[n]["off"]
        ratio = {key: median(a[key] / b[key] for a, b in zip(on, off, strict=True))
                 for key in ("throughput", "p50_ms", "p99_ms")}
        print(f"{n} client(s), arena on / off (median of {args.rounds} rounds): throughput "
              f"{ratio['throughput']:.3f}, p50 {ratio['p50_ms']:.3f}, p99 {ratio['p99_ms']:.3f}; "
              f"kernel CPU per reply {median(r['sys_ms'] for r in on):.2f} vs "
              f"{median(r['sys_ms'] for r in off):.2f} ms")
    print(f"RSS at the end: arena on {rss['on']:.1f} MB, off {rss['off']:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
