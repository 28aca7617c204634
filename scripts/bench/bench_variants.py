#!/usr/bin/env python3
"""Side-by-side speed of ORT fp32, ORT INT8, TVM untuned and TVM tuned, in one run.

Why one run: the figures are only comparable when measured on the same machine at
the same time (other load, frequency scaling); ratios against ORT fp32 are what
the claim "INT8 and compilation give about 2x over fp32" is about.

Models: ``.cache/bench-models/<arch>-fp32.onnx`` and ``<arch>-int8.onnx`` written by
``scripts/models/make_bench_models.py`` (MobileNetV2 and ResNet-18 with random weights,
input ``[N,3,224,224]``); ``<arch>.onnx`` / ``<arch>-int8.onnx`` are accepted too.
Missing INT8 models are made here (static QDQ on random calibration data: speed
only). Every variant goes through the daemon's own backend loaders.

Usage::

    .venv/bin/python scripts/bench/bench_variants.py [--models DIR] [--arch mobilenetv2]
        [--tune-trials 64] [--batch 8] [--threads 2] [--runs 30] [--work DIR]

TVM tuned: one static library per batch size (1 and --batch), tuned with the given
trial budget each, database kept in ``--work/<arch>-db`` and reused next time.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def find_models(models: Path, arch: str) -> tuple[Path | None, Path | None]:
    fp32 = next((p for p in (models / f"{arch}-fp32.onnx", models / f"{arch}.onnx")
                 if p.exists()), None)
    int8 = models / f"{arch}-int8.onnx"
    return fp32, int8 if int8.exists() else None


def make_int8(fp32: Path, out: Path) -> Path:
    import numpy as np

    from edged.compile.ort_steps import to_int8_static

    x = np.random.default_rng(0).random((8, 3, 224, 224), dtype=np.float32)
    return to_int8_static(fp32, out, "input", x, batch=1, progress=False)


def build_tvm(fp32: Path, work: Path, arch: str, batch: int, trials: int,
              threads: int) -> dict[str, Path]:
    """Untuned (symbolic batch) and, with trials, tuned per-batch-size libraries."""
    from edged.backends.support.sidecar import sha256_file, write_sidecar
    from edged.compile import tvm_build, tvm_tune
    from edged.compile.modelinfo import io_specs, tool_versions

    choice = tvm_build.resolve_target("llvm", None, threads)
    ins, outs = io_specs(fp32)
    base = {"source": {"path": str(fp32), "sha256": sha256_file(fp32)}, "backend": "tvm",
            "precision": "fp32", "target": choice.spec, "inputs": ins, "outputs": outs,
            "tools": tool_versions("tvm")}
    made: dict[str, Path] = {}
    untuned = work / f"{arch}-tvm.so"
    if not untuned.exists():
        t0 = time.monotonic()
        tvm_build.build_dynamic(fp32, untuned, choice)
        print(f"  built {untuned.name} in {time.monotonic() - t0:.0f} s", flush=True)
    write_sidecar(untuned, {**base, "batch_sizes": None})
    made["TVM untuned"] = untuned
    if trials > 0:
        settings = tvm_tune.TuneSettings(
            trials=trials, cost_model="xgb" if _has("xgboost") else "random")
        files = {}
        sizes = sorted({1, batch})
        for b in sizes:
            lib = work / f"{arch}-tvm-tuned.b{b}.so"
            t0 = time.monotonic()
            _, summary = tvm_build.build_static(fp32, lib, choice, b, work / f"{arch}-db",
                                                settings)
            print(f"  tuned b={b}: {summary} in {time.monotonic() - t0:.0f} s", flush=True)
            files[str(b)] = {"path": lib.name, "sha256": sha256_file(lib)}
        tuned = work / f"{arch}-tvm-tuned.so"
        write_sidecar(tuned, {**base, "batch_sizes": sizes, "files": files,
                              "tuning": {"trials_per_batch_size": trials,
                                         "cost_model": settings.cost_model}})
        made[f"TVM tuned ({trials} trials)"] = tuned
    return made


def _has(mod: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(mod) is not None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=Path, default=ROOT / ".cache" / "bench-models")
    ap.add_argument("--arch", action="append", choices=("mobilenetv2", "resnet18"))
    ap.add_argument("--work", type=Path, default=ROOT / ".cache" / "bench-variants")
    ap.add_argument("--tune-trials", type=int, default=0, help="per batch size; 0 = no tuning")
    ap.add_argument("--batch", type=int, default=8, help="batch for throughput")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--runs", type=int, default=30)
    a = ap.parse_args(argv)
    os.environ.setdefault("TVM_NUM_THREADS", str(a.threads))
    from edged.compile.bench import measure
    from edged.compile.checks import open_for_timing

    a.work.mkdir(parents=True, exist_ok=True)
    rows: list[tuple[str, str, float, float]] = []
    for arch in a.arch or ["mobilenetv2", "resnet18"]:
        fp32, int8 = find_models(a.models, arch)
        if fp32 is None:
            print(f"{arch}: no model in {a.models}; run scripts/models/make_bench_models.py first",
                  file=sys.stderr)
            continue
        print(f"{arch}: building variants", flush=True)
        if int8 is None:
            int8 = make_int8(fp32, a.work / f"{arch}-int8.onnx")
        variants: dict[str, tuple[str, Path]] = {
            "ORT fp32": ("onnxruntime", fp32), "ORT INT8 (QDQ)": ("onnxruntime", int8)}
        for label, p in build_tvm(fp32, a.work, arch, a.batch, a.tune_trials,
                                  a.threads).items():
            variants[label] = ("tvm", p)
        for label, (backend, path) in variants.items():
            be = open_for_timing(backend, path, a.threads, a.batch)
            s = measure(be, a.batch, a.runs, budget_s=10.0, threads=a.threads)
            be.close()
            print(f"  {label}: {s.summary()}", flush=True)
            rows.append((arch, label, s.latency_ms_p50, s.throughput_per_s))
    if not rows:
        return 1
    print(f"\nthreads={a.threads}, throughput at batch {a.batch}, speed-up vs ORT fp32 "
          "of the same model\n")
    print(f"| model | variant | b=1 p50 (ms) | speed-up | b={a.batch} (img/s) | speed-up |")
    print("|---|---|---:|---:|---:|---:|")
    base = {arch: (lat, thr) for arch, label, lat, thr in rows if label == "ORT fp32"}
    for arch, label, lat, thr in rows:
        bl, bt = base.get(arch, (lat, thr))
        print(f"| {arch} | {label} | {lat:.2f} | {bl / lat:.2f}x | {thr:.1f} | {thr / bt:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
