#!/usr/bin/env python3
"""Detection post-processing time: decode + NMS + map to frame, per image.

Why: on Jetson-class devices post-processing costs as much as inference (Ultralytics
#23467), so edged's own decode must stay well under a millisecond. Cases:

- ``yolov8-640``: ``[1, 84, 8400]`` with a realistic score distribution: almost all
  class scores near zero, a few dozen objects each seen by a cluster of overlapping
  anchors with scores 0.3-0.9 (what NMS exists for);
- ``yolov8-640-flat``: the worst case, every anchor scoring just above ``conf`` (the
  top-k cap before NMS keeps it bounded);
- ``ssd-100``: TF Object Detection API layout, 100 boxes, NMS already in the graph.

The two headline cases are interleaved (one run of each per round) so load changes
hit both alike; the flat stress case runs afterwards on its own.
Usage: ``nice python scripts/bench/bench_postprocess.py [--runs 3000] [--objects 30]
[--only CASE]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from edged.config.postprocess import PostprocessConfig  # noqa: E402
from edged.config.schema import Table  # noqa: E402
from edged.detect.geometry import fit  # noqa: E402
from edged.detect.postprocess import Postprocessor  # noqa: E402

C, N, SIZE = 80, 8400, 640


class Spec:
    def __init__(self, name: str, shape: tuple[int, ...]) -> None:
        self.name, self.dtype, self.shape = name, np.dtype("float32"), shape


def postprocessor(specs: list[Spec], **kw: object) -> Postprocessor:
    t = Table({"kind": "detect", **kw}, "bench.postprocess", "bench.toml")
    cfg = PostprocessConfig.from_table(t)
    if cfg is None or t.problems:
        raise SystemExit("\n".join(t.problems))
    return Postprocessor(cfg, specs, (SIZE, SIZE))


def yolov8_output(rng: np.random.Generator, objects: int) -> np.ndarray:
    """Background scores like a trained head's sigmoid outputs; clusters around objects."""
    x = np.empty((4 + C, N), np.float32)
    x[4:] = rng.beta(0.3, 60, (C, N))  # mean ~0.005, a thin tail to ~0.1
    x[0:2] = rng.uniform(0, SIZE, (2, N))
    x[2:4] = rng.uniform(8, 200, (2, N))
    cols = rng.permutation(N)
    used = 0
    for _ in range(objects):
        k = int(rng.integers(8, 30))  # anchors that see this object
        c = cols[used:used + k]
        used += k
        cx, cy = rng.uniform(40, SIZE - 40, 2)
        w, h = rng.uniform(20, 250, 2)
        x[0, c] = cx + rng.normal(0, w * 0.04, k)
        x[1, c] = cy + rng.normal(0, h * 0.04, k)
        x[2, c] = w * rng.uniform(0.9, 1.1, k)
        x[3, c] = h * rng.uniform(0.9, 1.1, k)
        x[4 + int(rng.integers(C)), c] = rng.uniform(0.3, 0.9, k)
    return x[None]


def flat_output(rng: np.random.Generator) -> np.ndarray:
    x = yolov8_output(rng, 0)
    x[0, 4 + rng.integers(C, size=N), np.arange(N)] = rng.uniform(0.26, 0.3, N)
    return x


def ssd_outputs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    n = 100
    tl = rng.uniform(0, 0.8, (n, 2))
    boxes = np.concatenate((tl, tl + rng.uniform(0.05, 0.2, (n, 2))), axis=1)
    return {"num_detections": np.array([n], np.float32),
            "detection_boxes": boxes[None].astype(np.float32),
            "detection_scores": np.sort(rng.uniform(0, 1, n))[::-1][None].astype(np.float32),
            "detection_classes": rng.integers(1, 91, (1, n)).astype(np.float32)}


def build_cases(objects: int = 30) -> tuple[dict[str, Callable[[], list[np.ndarray]]],
                                            dict[str, int]]:
    """The timed cases (seeded: the same outputs every run) and what they hold: anchors
    above ``conf`` and detections per case (docs/detection.md quotes them; a test
    recomputes them here)."""
    rng = np.random.default_rng(0)
    frame = np.zeros((1080, 1920, 3), np.uint8)
    tf = fit(frame, "letterbox", SIZE, SIZE)[1]
    tf_ssd = fit(frame, "stretch", SIZE, SIZE)[1]
    yolo = postprocessor([Spec("output0", (1, 4 + C, N))], decoder="yolov8")
    ssd_specs = [Spec("num_detections", (1,)), Spec("detection_boxes", (1, 100, 4)),
                 Spec("detection_scores", (1, 100)), Spec("detection_classes", (1, 100))]
    ssd = postprocessor(ssd_specs, decoder="ssd", resize="stretch", label_offset=1)
    y_out, flat, s_out = {"output0": yolov8_output(rng, objects)}, \
        {"output0": flat_output(rng)}, ssd_outputs(rng)
    cases: dict[str, Callable[[], list[np.ndarray]]] = {
        "yolov8-640": lambda: yolo.run(y_out, [tf]),
        "yolov8-640-flat": lambda: yolo.run(flat, [tf]),
        "ssd-100": lambda: ssd.run(s_out, [tf_ssd]),
    }
    held = {"yolov8-640 above conf": int((y_out["output0"][0, 4:].max(0) > 0.25).sum()),
            "ssd-100 above conf": int((s_out["detection_scores"][0] > 0.25).sum())}
    held |= {f"{name} detections": len(run()[0]) for name, run in cases.items()}
    return cases, held


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3000)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--objects", type=int, default=30)
    ap.add_argument("--only", choices=("yolov8-640", "ssd-100", "yolov8-640-flat"),
                    help="time one case alone (no interleaving)")
    args = ap.parse_args()
    cases, held = build_cases(args.objects)
    print(f"{args.objects} objects; " + ", ".join(f"{k}: {v}" for k, v in held.items()))
    if args.only:
        report(measure({args.only: cases[args.only]}, args.warmup, args.runs))
        return
    # The headline cases alternate; the flat stress case runs on its own afterwards so
    # its 3 MB of scattered reads do not evict the others' data from the cache.
    report(measure({k: cases[k] for k in ("yolov8-640", "ssd-100")}, args.warmup, args.runs))
    report(measure({"yolov8-640-flat": cases["yolov8-640-flat"]}, args.warmup,
                   max(1, args.runs // 10)), header=False)


def measure(cases: dict[str, Callable[[], list[np.ndarray]]], warmup: int,
            runs: int) -> dict[str, np.ndarray]:
    times: dict[str, list[float]] = {k: [] for k in cases}
    for i in range(warmup + runs):
        for name, fn in cases.items():
            t0 = time.perf_counter_ns()
            fn()
            if i >= warmup:
                times[name].append((time.perf_counter_ns() - t0) / 1e6)
    return {k: np.array(v) for k, v in times.items()}


def report(times: dict[str, np.ndarray], header: bool = True) -> None:
    if header:
        print(f"{'case':<18}{'min ms':>9}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}  runs")
    for name, a in times.items():
        print(f"{name:<18}{a.min():>9.3f}{np.percentile(a, 50):>9.3f}"
              f"{np.percentile(a, 90):>9.3f}{np.percentile(a, 99):>9.3f}  {a.size}")

if __name__ == "__main__":
    main()
