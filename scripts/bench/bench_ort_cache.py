#!/usr/bin/env python3
"""Start-up time of an ONNX Runtime variant with and without the optimized-model cache.

Why a script: the cache (edged/backends/support/ort_cache.py) exists to save start-up time,
so the claim needs a figure. Every load runs in a fresh process (ORT keeps nothing
between processes) and times ``open_backend`` only, i.e. what a daemon start or a
governor swap pays for this variant: session creation with graph optimization, or
from the cached optimized graph with optimization off.

The model: ``--model PATH``, else MobileNetV2 (224x224, 1000 classes, random
weights, BatchNorm folded) written here with onnx.helper, the same architecture as
``scripts/models/make_bench_models.py`` but without needing torch.

Usage::

    PYTHONPATH=$PWD .venv/bin/python scripts/bench/bench_ort_cache.py [--model M.onnx] [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

LOAD = r"""
import json, sys, time
from pathlib import Path
from edged.backends import onnxruntime as b
from edged.config.runtimes import OnnxRuntimeOptions
model, cache, level, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
opts = OnnxRuntimeOptions(threads=threads, graph_optimization_level=level,
                 optimized_model_path=Path(cache) if cache != "-" else None)
t0 = time.perf_counter()
be = b.open_backend(Path(model), opts, 1)
t1 = time.perf_counter()
be.warmup(1)
t2 = time.perf_counter()
print(json.dumps({"open_s": t1 - t0, "first_run_s": t2 - t1}))
"""


def mobilenet_v2(path: Path, seed: int = 0) -> Path:
    """MobileNetV2 1.0 as ONNX (Conv+bias, Clip 0..6), random weights."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    six = numpy_helper.from_array(np.array(6.0, np.float32), "six")
    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")
    inits += [six, zero]
    count = [0]

    def conv(x: str, cin: int, cout: int, k: int, stride: int, groups: int, act: bool) -> str:
        i = count[0] = count[0] + 1
        w = rng.standard_normal((cout, cin // groups, k, k)).astype(np.float32)
        w *= np.sqrt(2.0 / (cin // groups * k * k)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        inits.append(numpy_helper.from_array(np.zeros(cout, np.float32), f"b{i}"))
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"],
                                      kernel_shape=[k, k], strides=[stride, stride],
                                      pads=[k // 2] * 4, group=groups))
        if not act:
            return f"c{i}"
        nodes.append(helper.make_node("Clip", [f"c{i}", "zero", "six"], [f"r{i}"]))
        return f"r{i}"

    x, cin = conv("input", 3, 32, 3, 2, 1, True), 32
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
        for j in range(n):
            stride, hidden = (s if j == 0 else 1), cin * t
            y = conv(x, cin, hidden, 1, 1, 1, True) if t != 1 else x
            y = conv(y, hidden, hidden, 3, stride, hidden, True)
            y = conv(y, hidden, c, 1, 1, 1, False)
            if stride == 1 and cin == c:
                nodes.append(helper.make_node("Add", [x, y], [f"{y}_res"]))
                y = f"{y}_res"
            x, cin = y, c
    x = conv(x, cin, 1280, 1, 1, 1, True)
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"]))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"]))
    fc = (rng.standard_normal((1000, 1280)) * 0.01).astype(np.float32)
    inits += [numpy_helper.from_array(fc, "fc_w"),
              numpy_helper.from_array(np.zeros(1000, np.float32), "fc_b")]
    nodes.append(helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1))
    g = helper.make_graph(
        nodes, "mobilenetv2",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 1000])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return path


def load_once(model: Path, cache: Path | None, level: str, threads: int) -> dict[str, float]:
    r = subprocess.run([sys.executable, "-c", LOAD, str(model), str(cache or "-"), level,
                        str(threads)], capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, help="ONNX model (default: MobileNetV2, written here)")
    ap.add_argument("--runs", type=int, default=7, help="fresh-process loads per figure")
    ap.add_argument("--level", default="all", help="graph_optimization_level (default all)")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="edged-ortcache-") as d:
        model = a.model or mobilenet_v2(Path(d) / "mobilenetv2-fp32.onnx")
        cache = Path(d) / "cache" / f"{model.stem}.opt.onnx"
        cache.parent.mkdir()
        rows: dict[str, list[dict[str, float]]] = {"no cache": [], "cache rebuilt": [],
                                                    "cache loaded": []}
        for _ in range(a.runs):  # interleaved, so load on the machine hits all three alike
            rows["no cache"].append(load_once(model, None, a.level, a.threads))
            cache.unlink(missing_ok=True)
            rows["cache rebuilt"].append(load_once(model, cache, a.level, a.threads))
            rows["cache loaded"].append(load_once(model, cache, a.level, a.threads))
        print(f"model {model.name} ({model.stat().st_size / 1e6:.1f} MB), level {a.level}, "
              f"{a.threads} thread(s), {a.runs} fresh-process loads each (median, min):")
        print("| load | open_backend ms (median) | min | first run ms (median) |")
        print("|---|---:|---:|---:|")
        for name, vals in rows.items():
            o = np.array([v["open_s"] for v in vals]) * 1000
            f = np.array([v["first_run_s"] for v in vals]) * 1000
            print(f"| {name} | {np.median(o):.1f} | {o.min():.1f} | {np.median(f):.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
