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
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import tomllib
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
from edged.testing.harness import Daemon, machine_info, say_machine  # noqa: E402


def rung_configs(ladder: Path) -> tuple[dict[str, Any], list[dict[str, Any]], Path]:
    """The ladder's model table, its rungs (heaviest first) and the source model."""
    doc = tomllib.loads((ladder / "edged.toml").read_text())
    model = doc["models"][0]
    rungs = [v for v in model["variants"]]
    source = ladder / rungs[0]["path"]
    return model, rungs, source


def one_rung_config(path: Path, model: dict[str, Any], rung: dict[str, Any],
                    ladder: Path, max_batch: int) -> Path:
    art = (ladder / rung["path"]).resolve()
    v = variant(rung["name"], art, backend=rung["backend"], options=rung.get("options"))
    extra = {k: model[k] for k in ("preprocess",) if k in model}
    table = model_table(model["name"], [v], max_batch_size=max_batch, max_queue=512,
                        preprocess=extra.get("preprocess"))
    return write_config(path, models=[table])


def in_process(cfg_path: Path, max_batch: int, seconds: float) -> float:
    cfg = load_config(cfg_path)
    v = cfg.models[0].variants[0]
    backend, _ = open_artifact(v.backend, v.path, v.options, max_batch)
    try:
        return measure(backend, max_batch, runs=400, budget_s=seconds).throughput_per_s
    finally:
        backend.close()


def served(cfg_path: Path, work: Path, clients: int, seconds: float,
           transport: str = "socket") -> dict[str, Any]:
    d = Daemon(cfg_path, work)
    try:
        with d.client() as c:
            meta = next(m for m in c.models().header["models"])
        args = argparse.Namespace(model=meta["name"], input="random", file=None,
                                  endpoint=d.ipc, clients=clients, in_flight=1,
                                  duration=seconds, transport=transport, protocol="native")
        header, frames = request(meta, args)
        drive(args, header, frames, "warm-up")
        return drive(args, header, frames, f"served {meta['name']}")
    finally:
        d.stop()


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
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
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
    rows: dict[str, dict[str, list[float]]] = {
        r["name"]: {"in_process": [], "served": [], "p99_ms": []} for r in rungs}
    raw: list[float] = []
    with tempfile.TemporaryDirectory(prefix="edged-rungs-") as tmp:
        for rnd in range(a.rounds):
            r0 = raw_ort(source, a.seconds, [], {})
            raw.append(r0["best_throughput"])
            for r in rungs:
                cfg = one_rung_config(Path(tmp) / f"{r['name']}.toml", model, r, a.ladder,
                                      a.max_batch)
                rows[r["name"]]["in_process"].append(in_process(cfg, a.max_batch, a.seconds))
                s = served(cfg, Path(tmp) / f"d-{r['name']}-{rnd}", a.clients, a.seconds,
                           a.transport)
                rows[r["name"]]["served"].append(s["throughput"])
                rows[r["name"]]["p99_ms"].append(s["p99_ms"])
            print(f"round {rnd + 1}: raw ORT fp32 {raw[-1]:.1f}/s; " + "; ".join(
                f"{n} in process {v['in_process'][-1]:.1f}/s served {v['served'][-1]:.1f}/s"
                for n, v in rows.items()), flush=True)
    report = {"machine": info, "args": {k: str(v) for k, v in vars(a).items()},
              "raw_ort_fp32": raw, "rungs": {}}
    print(f"\n{'rung':<28}{'in process/s':>14}{'served/s':>10}{'served/in':>11}"
          f"{'served/raw fp32':>17}")
    for n, v in rows.items():
        ratio_in = statistics.median(s / i for s, i in zip(v["served"], v["in_process"],
                                                           strict=True))
        ratio_raw = statistics.median(s / r for s, r in zip(v["served"], raw, strict=True))
        report["rungs"][n] = {**v, "served_over_in_process": ratio_in,
                              "served_over_raw_fp32": ratio_raw}
        print(f"{n:<28}{statistics.median(v['in_process']):>14.1f}"
              f"{statistics.median(v['served']):>10.1f}{ratio_in:>11.2f}{ratio_raw:>17.2f}")
    print(f"raw ORT fp32 best (median of rounds): {statistics.median(raw):.1f}/s")
    if a.json:
        a.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
