#!/usr/bin/env python3
"""The person detector on every runtime and precision this CPU has, in process, interleaved.

    .venv/bin/python scripts/bench/bench_person_runtimes.py [--batch 1] [--rounds 5]

ONNX Runtime fp32 and INT8 (two threads, default options otherwise) and OpenVINO f32,
bf16 (native only on CPUs with AVX-512 BF16 or AMX), INT8 with the f32 and the bf16 hint
(LATENCY hint, two threads); one-second rounds of each in turns; the best round's median
per variant and its ratio to ORT fp32: what a new rung for the person detector would have
to beat (the ladder's rule: 1.15x). Needs the openvino extra and a quiet machine.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort
import openvino as ov

MODELS = Path(__file__).resolve().parents[2] / "models" / "person"
Run = Callable[[np.ndarray], object]


def ort_session(path: Path) -> Run:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    name = s.get_inputs()[0].name
    return lambda x: s.run(None, {name: x})


def ov_model(core: ov.Core, path: Path, precision: str) -> Run:
    compiled = core.compile_model(str(path), "CPU", {
        "INFERENCE_PRECISION_HINT": precision, "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_NUM_THREADS": 2})
    request = compiled.create_infer_request()
    return lambda x: request.infer([x])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    core = ov.Core()
    print("OpenVINO CPU capabilities:", core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    fp32, int8 = MODELS / "ssdlite-fp32.onnx", MODELS / "ssdlite-int8.onnx"
    runs: dict[str, Run] = {
        "ort-fp32": ort_session(fp32), "ort-int8": ort_session(int8),
        "ov-f32": ov_model(core, fp32, "f32"), "ov-bf16": ov_model(core, fp32, "bf16"),
        "ov-int8-f32": ov_model(core, int8, "f32"),
        "ov-int8-bf16": ov_model(core, int8, "bf16")}
    x = np.random.default_rng(0).integers(0, 255, (args.batch, 300, 300, 3), dtype=np.uint8)
    for run in runs.values():
        for _ in range(5):
            run(x)
    best: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(args.rounds):
        for key, run in runs.items():
            times = []
            end = time.perf_counter() + 1.0
            while time.perf_counter() < end:
                t0 = time.perf_counter()
                run(x)
                times.append(time.perf_counter() - t0)
            best[key].append(float(np.median(times)) * 1e3)
    base = min(best["ort-fp32"])
    for key, ms in best.items():
        print(f"{key:14s} batch {args.batch}: best round {min(ms):7.2f} ms "
              f"({args.batch * 1e3 / min(ms):6.1f} img/s), ort-fp32 / this {base / min(ms):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
