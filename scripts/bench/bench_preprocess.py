#!/usr/bin/env python3
"""Time preprocessing of a camera's raw frame: edged's one-pass path against the
step-by-step one it replaced (convert the full frame, resize, normalise in numpy),
with OpenCV on 1 thread and on its default, in interleaved rounds.

Why separate from serving: this cost is paid on the daemon's decode pool per raw frame
(or JPEG, after decoding) and adds to a request's latency whatever the transport.

Usage::

    .venv/bin/python scripts/bench/bench_preprocess.py [--width 1280 --height 720] [--rounds 15]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import cv2
import numpy as np

from edged.preprocess.preprocessor import PreprocessConfig, Preprocessor
from edged.testing.harness import machine_info

IMAGENET = dict(scale=1 / 255, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))


def step_by_step(cfg: PreprocessConfig, img: np.ndarray) -> np.ndarray:
    """What Preprocessor.from_frame did before the one-pass path."""
    x = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
    x = cv2.resize(x, (cfg.width, cfg.height), interpolation=cv2.INTER_LINEAR)
    mean, std = np.array(cfg.mean, np.float32), np.array(cfg.std, np.float32)
    out = x.astype(np.float32)
    out *= (cfg.scale / std).astype(np.float32)
    out += (-mean / std).astype(np.float32)
    return np.ascontiguousarray(out.transpose(2, 0, 1))[None]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--height", type=int, default=720)
    ap.add_argument("--size", type=int, default=224, help="model input (square)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--per-round", type=int, default=20)
    args = ap.parse_args()
    cfg = PreprocessConfig(None, "rgb", "bgr", args.size, args.size, "linear",
                           IMAGENET["scale"], IMAGENET["mean"], IMAGENET["std"], "NCHW",
                           "float32")
    pre = Preprocessor(cfg)
    img = np.random.default_rng(0).integers(0, 256, (args.height, args.width, 3), np.uint8)
    ways = {"one-pass": pre.from_frame, "step-by-step": lambda f: step_by_step(cfg, f)}
    default_threads = cv2.getNumThreads()
    res: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for threads in (1, default_threads):
            cv2.setNumThreads(threads)
            for name, fn in ways.items():
                fn(img)
                t = time.perf_counter()
                for _ in range(args.per_round):
                    fn(img)
                res.setdefault(f"{name}, opencv {threads} thread(s)", []).append(
                    (time.perf_counter() - t) / args.per_round * 1e6)
    diff = float(np.abs(pre.from_frame(img) - step_by_step(cfg, img)).max())
    out = {"machine": machine_info(), "frame": [args.height, args.width, 3],
           "input": args.size, "max_abs_diff": diff,
           "us": {k: {"min": round(min(v)), "median": round(statistics.median(v))}
                  for k, v in res.items()}}
    for k, v in out["us"].items():
        print(f"{k:34s} min {v['min']:6d} us  median {v['median']:6d} us")
    print(f"max |one-pass - step-by-step| = {diff:.2e}")
    print(json.dumps({"load_avg": out["machine"]["load_avg"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
