#!/usr/bin/env python3
"""A compiled ladder's rungs served through the daemon against the same artifacts in process.

    .venv/bin/edged compile .cache/bench-models/mobilenetv2-fp32.onnx --out OUT \\
        --steps int8,openvino --val VAL.npz
    PYTHONPATH=. .venv/bin/python scripts/bench/bench_rungs.py OUT --clients 8 --rounds 3

Why: a rung is only worth its place if the daemon serves it at (nearly) the speed the
runtime gives in process, and the ladder's point is that its best rung serves several
times what plain ONNX Runtime fp32 does. For each rung of ``OUT/edged.toml``, in rounds
alternating the three: **in process**, the artifact opened by edged's own backend
(``edged.model.artifact``) and timed at the max batch back to back (what ``edged
compile`` records); **served**, a daemon serving only that rung to ``--clients`` client
processes (``edged bench``'s load generator, random inputs); and **raw ORT fp32**, the
source model in ONNX Runtime with default session options at its best batch
(``edged.bench.raw``). Printed per rung: both throughputs, served / in process, and
served / raw ORT fp32 (medians of per-round ratios), with the machine line.

Why two more columns: 8 closed-loop clients (one request in flight each) never hand the
daemon 8 rows at once while it computes, so served batches are smaller than the max
batch the in-process figure is timed at. ``batch`` is the mean rows per batch the daemon
formed (from each reply's ``timing.batch``) and ``served/in@batch`` compares with the
artifact in process at the same mix of batch sizes (each size's rows at that size's
in-process rate): what is left there is the daemon's own cost. With
``--split-cores`` the daemon and the in-process runs get the first half of the cores and
the clients the rest, so the clients' CPU is not counted against the daemon (on 2 cores:
one each); ``--batch-window`` serves the rung with that ``batch_window``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from edged.bench.loadgen import drive, request  # noqa: E402
from edged.bench.raw import raw_ort  # noqa: E402
from edged.compile.bench import measure  # noqa: E402
from edged.config.file import load_config  # noqa: E402
from edged.model.artifact import open_artifact  # noqa: E402
from edged.testing.configs import model_table, variant, write_config  # noqa: E402
from edged.testing.harness import Daemon, machine_info, pinned, say_machine  # noqa: E402


def rung_configs(ladder: Path) -> tuple[dict[str, Any], list[dict[str, Any]], Path]:
    """The ladder's model table, its rungs (heaviest first) and the source model."""
    doc = tomllib.loads((ladder / "edged.toml").read_text())
    model = doc["models"][0]
    rungs = [v for v in model["variants"]]
    source = ladder / rungs[0]["path"]
    return model, rungs, source


def one_rung_config(path: Path, model: dict[str, Any], rung: dict[str, Any],
                    ladder: Path, max_batch: int, batch_window: float = 0.0) -> Path:
    art = (ladder / rung["path"]).resolve()
    v = variant(rung["name"], art, backend=rung["backend"], options=rung.get("options"))
    extra = {k: model[k] for k in ("preprocess",) if k in model}
    table = model_table(model["name"], [v], max_batch_size=max_batch, max_queue=512,
                        batch_window=batch_window or None, preprocess=extra.get("preprocess"))
    return write_config(path, models=[table])


def _in_process_child(cfg_path: Path, batches: list[int], seconds: float, out: Any) -> None:
    cfg = load_config(cfg_path)
    v = cfg.models[0].variants[0]
    backend, _ = open_artifact(v.backend, v.path, v.options, max(batches))
    try:
        out.put({b: measure(backend, b, runs=400, budget_s=seconds).throughput_per_s
                 for b in batches})
    finally:
        backend.close()


def in_process(cfg_path: Path, batches: list[int], seconds: float,
               cores: set[int] | None = None) -> dict[int, float]:
    """Rows/s at each of ``batches``, back to back, in a fresh process on ``cores``: its
    thread plan (threads, streams) is the one a daemon on those cores would have."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    with pinned(cores):
        proc = ctx.Process(target=_in_process_child, args=(cfg_path, batches, seconds, out))
        proc.start()
    try:
        return out.get(timeout=60 + 4 * seconds * len(batches))
    finally:
        proc.join(10)


def served(cfg_path: Path, work: Path, clients: int, seconds: float,
           transport: str = "socket", daemon_cores: set[int] | None = None,
           client_cores: set[int] | None = None) -> dict[str, Any]:
    """``clients`` processes against a daemon serving the rung; adds ``batch_rows``, how
    many replies came from batches of each size (each reply's ``timing.batch``)."""
    with pinned(daemon_cores):
        d = Daemon(cfg_path, work)
    try:
        with d.client() as c:
            meta = next(m for m in c.models().header["models"])
        args = argparse.Namespace(model=meta["name"], input="random", file=None,
                                  endpoint=d.ipc, clients=clients, in_flight=1,
                                  duration=seconds, transport=transport, protocol="native")
        header, frames = request(meta, args)
        traced = transport == "socket"  # the load generator traces socket clients only
        with pinned(client_cores):
            drive(args, header, frames, "warm-up")
            res = drive(args, header, frames, f"served {meta['name']}", trace=traced)
        sizes = Counter(b for t in res.pop("traces", []) for b, st in
                        zip(t["batch"], t["status"], strict=True) if st == "OK" and b > 0)
        return {**res, "batch_rows": dict(sizes)}
    finally:
        d.stop()


def same_batches(batch_rows: dict[int, int], in_proc: dict[int, float]) -> float:
    """Rows/s in process at the served mix of batch sizes: each size's rows at that size's
    in-process rate (a harmonic mean weighted by rows)."""
    rows = {b: n for b, n in batch_rows.items() if b in in_proc}
    return sum(rows.values()) / sum(n / in_proc[b] for b, n in rows.items())


def main_sizes(batch_rows: dict[int, int], share: float = 0.02) -> list[int]:
    """The batch sizes that carried at least ``share`` of the served rows."""
    total = sum(batch_rows.values())
    return sorted(b for b, n in batch_rows.items() if n >= share * total)


def split_cores(on: bool) -> tuple[set[int] | None, set[int] | None]:
    """(daemon's cores, clients' cores): the first half and the rest, or both None."""
    if not on:
        return None, None
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise SystemExit("bench_rungs: --split-cores needs at least 2 usable cores")
    half = len(cores) // 2
    return set(cores[:half]), set(cores[half:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ladder", type=Path, help="an `edged compile --out` folder")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10.0, help="per measurement")
    ap.add_argument("--rung", action="append", help="only these rungs (by name)")
    ap.add_argument("--transport", choices=("socket", "shm"), default="socket",
                    help="how the clients hand over inputs: in the message, or in shared "
                         "memory (the client's copy is then one memcpy)")
    ap.add_argument("--batch-window", type=float, action="append",
                    help="serve each rung with this batch_window (docs/configuration.md; "
                         "0: off, the default); given twice, the two alternate in each round")
    ap.add_argument("--split-cores", action="store_true",
                    help="the daemon and the in-process runs on the first half of the "
                         "cores, the clients on the rest: the daemon's own cost, without "
                         "the clients' CPU on its cores")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    daemon_cores, client_cores = split_cores(a.split_cores)
    info = machine_info()
    say_machine(info)
    model, rungs, source = rung_configs(a.ladder)
    if a.rung:
        names = [r["name"] for r in rungs]
        rungs = [r for r in rungs if r["name"] in a.rung]
        if not rungs:
            print(f"bench_rungs: no rung named {', '.join(a.rung)}; the ladder's rungs: "
                  f"{', '.join(names)}", file=sys.stderr)
            return 2
    windows = a.batch_window or [0.0]

    def label(rung: dict[str, Any], w: float) -> str:
        return rung["name"] if len(windows) == 1 else f"{rung['name']} window={w:g}"

    keys = ("in_process", "served", "p99_ms", "mean_batch", "in_process_at_batch")
    rows: dict[str, dict[str, list[Any]]] = {label(r, w): {k: [] for k in keys}
                                             for r in rungs for w in windows}
    raw: list[float] = []
    with tempfile.TemporaryDirectory(prefix="edged-rungs-") as tmp:
        for rnd in range(a.rounds):
            with pinned(daemon_cores):
                r0 = raw_ort(source, a.seconds, [], {})
            raw.append(r0["best_throughput"])
            for r, w in ((r, w) for r in rungs for w in windows):
                v = rows[label(r, w)]
                cfg = one_rung_config(Path(tmp) / f"{r['name']}-{w:g}.toml", model, r,
                                      a.ladder, a.max_batch, w)
                s = served(cfg, Path(tmp) / f"d-{r['name']}-{w:g}-{rnd}", a.clients,
                           a.seconds, a.transport, daemon_cores, client_cores)
                sizes = main_sizes(s["batch_rows"])
                ip = in_process(cfg, sorted({a.max_batch, *sizes}), a.seconds / 2, daemon_cores)
                n_rows = sum(s["batch_rows"].values())
                mean = n_rows / sum(n / b for b, n in s["batch_rows"].items()) if n_rows else 0
                same = same_batches(s["batch_rows"], ip) if sizes else float("nan")
                for k, x in zip(keys, (ip[a.max_batch], s["throughput"], s["p99_ms"], mean,
                                       same), strict=True):
                    v[k].append(x)
                v.setdefault("batch_rows", []).append(s["batch_rows"])
            print(f"round {rnd + 1}: raw ORT fp32 {raw[-1]:.1f}/s; " + "; ".join(
                f"{n} in process {v['in_process'][-1]:.1f}/s served {v['served'][-1]:.1f}/s "
                f"(batches of {v['mean_batch'][-1]:.1f} on average; in process at the same "
                f"batch sizes {v['in_process_at_batch'][-1]:.1f}/s)" for n, v in rows.items()),
                flush=True)
    report = {"machine": info, "args": {k: str(v) for k, v in vars(a).items()},
              "raw_ort_fp32": raw, "rungs": {}}
    print(f"\n{'rung':<40}{'in process/s':>14}{'served/s':>10}{'served/in':>11}"
          f"{'batch':>7}{'served/in@batch':>17}{'served/raw fp32':>17}")

    def ratio(x: list[float], y: list[float]) -> float:
        return statistics.median(i / j for i, j in zip(x, y, strict=True))

    for n, v in rows.items():
        r_in, r_at = ratio(v["served"], v["in_process"]), ratio(v["served"],
                                                                 v["in_process_at_batch"])
        r_raw = ratio(v["served"], raw)
        report["rungs"][n] = {**v, "served_over_in_process": r_in,
                              "served_over_in_process_at_batch": r_at,
                              "served_over_raw_fp32": r_raw}
        print(f"{n:<40}{statistics.median(v['in_process']):>14.1f}"
              f"{statistics.median(v['served']):>10.1f}{r_in:>11.2f}"
              f"{statistics.median(v['mean_batch']):>7.1f}{r_at:>17.2f}{r_raw:>17.2f}")
    print(f"raw ORT fp32 best (median of rounds): {statistics.median(raw):.1f}/s")
    if a.json:
        a.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
