#!/usr/bin/env python3
"""A pipeline in one request against a client doing the same with edged's own client.

    PYTHONPATH=. .venv/bin/python scripts/bench/bench_pipeline.py              # full run
    PYTHONPATH=. .venv/bin/python scripts/bench/bench_pipeline.py --tiny       # smoke check
    PYTHONPATH=. .venv/bin/python scripts/bench/bench_pipeline.py --json out.json

What it measures (docs/benchmarks.md, "Pipelines"), on a 1280x720 BGR frame of 5 held-out
digits (``edged.testing.scenes``), with the daemon it starts on
``examples/pipelines/digits-reader.toml`` (or ``--endpoint`` to use a running one):

- **pipeline**: each stream sends the frame to ``digits-reader`` and waits for the boxes
  with their digits (one request);
- **client**: each stream does the same by hand with ``edged.client.Client``: one detect
  request to ``digits-det``, the crops cut and preprocessed in the client (the same
  selection, crop and preprocessing the pipeline applies), one batched request of the
  crops to the stage's model (``digits-crops``).

Streams are closed loops (a thread each, one frame in flight), 1 and 4 of them; rounds
alternate the two ways so drift hits both alike. Reported per way and stream count: frames
per second and p50/p90 latency per frame, and the pipeline's ratio to the client (the
issue's goal: >= 1.5x the throughput, p50 <= 0.7x). Then the saving from track reuse: a
30-frame clip of the 5 digits moving, sent once with a ``stream`` (a track's digit reused
for ``reinfer_interval`` frames) and once without; stage-2 inferences per frame are the
replies' own ``crops`` counts.

Run it on a quiet machine (it prints the load average and warns above 0.3); the figures
of a busy one are not ones to quote.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from edged.client import Client  # noqa: E402
from edged.config.file import load_config  # noqa: E402
from edged.model.pipeline.crops import cut, read_scores, select  # noqa: E402
from edged.preprocess.preprocessor import Preprocessor  # noqa: E402
from edged.testing.harness import (  # noqa: E402
    Daemon,
    machine_info,
    percentile_ms,
    say_machine,
)
from edged.testing.scenes import camera_frame, moving_digits  # noqa: E402

CONFIG = ROOT / "examples" / "pipelines" / "digits-reader.toml"
PIPELINE, DETECTOR, STAGE = "digits-reader", "digits-det", "digit"

#: one frame through one way: the client, the frame -> the digits read
Way = Callable[[Client, np.ndarray], list[int]]


def by_pipeline(c: Client, frame: np.ndarray) -> list[int]:
    d = c.infer(PIPELINE, frame).detections
    return d.column(f"{STAGE}_class").astype(int).tolist()


def by_hand(config: Path) -> Way:
    """The client's way, with the example's stage settings and the classifier's own
    preprocessing (what the pipeline does in the daemon)."""
    cfg = load_config(config)
    stage = cfg.pipelines[0].stages[0]
    classifier = stage.model
    mc = cfg.model(classifier)
    assert mc is not None and mc.preprocess is not None
    pre = Preprocessor(mc.preprocess)

    def run(c: Client, frame: np.ndarray) -> list[int]:
        rows = c.infer(DETECTOR, frame).detections.rows
        picked = select(rows, stage)
        if not picked.size:
            return []
        crops = [cut(frame, rows[r], stage, (pre.cfg.width, pre.cfg.height)) for r in picked]
        batch = np.concatenate([pre.from_frame(x, source_color="bgr") for x in crops])
        logits = c.infer(classifier, batch).outputs["logits"]
        return read_scores(logits, stage.activation)[0].tolist()

    return run


def closed_loops(endpoint: str, way: Way, frame: np.ndarray, streams: int,
                 seconds: float) -> tuple[int, float, list[float]]:
    """``streams`` threads, each one frame in flight for ``seconds``: frames, wall time,
    every frame's latency."""
    lat: list[list[float]] = [[] for _ in range(streams)]
    start = threading.Barrier(streams + 1)
    stop = threading.Event()
    errors: list[BaseException] = []

    def loop(k: int) -> None:
        try:
            with Client(endpoint, timeout_s=60) as c:
                way(c, frame)  # warm this connection
                start.wait()
                while not stop.is_set():
                    t = time.perf_counter()
                    way(c, frame)
                    lat[k].append(time.perf_counter() - t)
        except BaseException as e:  # reported after the round
            errors.append(e)
            start.abort()

    threads = [threading.Thread(target=loop, args=(k,), daemon=True) for k in range(streams)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(120)
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"a stream failed: {errors[0]!r}")
    flat = [x for xs in lat for x in xs]
    return len(flat), wall, flat


def reuse(endpoint: str, frames: int) -> dict[str, Any]:
    """Stage-2 inferences per frame on the clip, with and without a stream."""
    clip = moving_digits(frames)
    out: dict[str, Any] = {"frames": frames}
    with Client(endpoint, timeout_s=60) as c:
        for name, opts in (("without_stream", {}), ("with_stream", {"stream": "bench-clip"})):
            crops = boxes = carried = 0
            for f in clip:  # in order, one at a time: a camera
                d = c.infer(PIPELINE, f, **opts).detections
                s = d.stages[STAGE]
                crops, carried, boxes = crops + s["crops"], carried + s["carried"], boxes + len(d)
            out[name] = {"boxes_per_frame": boxes / frames, "stage2_per_frame": crops / frames,
                         "carried_per_frame": carried / frames}
    w, wo = out["with_stream"]["stage2_per_frame"], out["without_stream"]["stage2_per_frame"]
    out["saving"] = 1 - w / wo if wo else None
    return out


def run(a: argparse.Namespace, endpoint: str) -> dict[str, Any]:
    frame = camera_frame()
    ways: dict[str, Way] = {"client": by_hand(a.config), "pipeline": by_pipeline}
    with Client(endpoint, timeout_s=60) as c:  # fail early; both ways read the same digits
        got = {k: sorted(w(c, frame)) for k, w in ways.items()}
    print(f"frame 1280x720, digits read: {got}")
    rounds: dict[tuple[str, int], list[tuple[int, float, list[float]]]] = {}
    for r in range(a.rounds):
        for streams in a.streams:
            order = list(ways) if r % 2 == 0 else list(reversed(ways))
            for name in order:
                rounds.setdefault((name, streams), []).append(
                    closed_loops(endpoint, ways[name], frame, streams, a.seconds))
    table = []
    for (name, streams), rs in rounds.items():
        fps = statistics.median(n / w for n, w, _ in rs)
        lat = [x for _, _, xs in rs for x in xs]
        table.append({"way": name, "streams": streams, "frames": sum(n for n, _, _ in rs),
                      "fps": fps, "p50_ms": percentile_ms(lat, 50),
                      "p90_ms": percentile_ms(lat, 90)})
    for row in table:
        if row["way"] == "pipeline":
            base = next(x for x in table if x["way"] == "client"
                        and x["streams"] == row["streams"])
            row["fps_ratio"] = row["fps"] / base["fps"] if base["fps"] else None
            row["p50_ratio"] = row["p50_ms"] / base["p50_ms"] if base["p50_ms"] else None
    return {"frame": got, "rounds": a.rounds, "seconds": a.seconds, "table": table,
            "reuse": reuse(endpoint, a.clip_frames)}


def markdown(res: dict[str, Any]) -> str:
    lines = ["| way | streams | frames | frames/s | p50 ms | p90 ms | vs client |",
             "|---|---|---|---|---|---|---|"]
    for r in res["table"]:
        vs = (f"{r['fps_ratio']:.2f}x throughput, {r['p50_ratio']:.2f}x p50"
              if "fps_ratio" in r else "")
        lines.append(f"| {r['way']} | {r['streams']} | {r['frames']} | {r['fps']:.1f} | "
                     f"{r['p50_ms']:.1f} | {r['p90_ms']:.1f} | {vs} |")
    u = res["reuse"]
    lines += ["", f"Track reuse, {u['frames']}-frame clip of 5 moving digits: stage-2 "
              f"inferences per frame {u['without_stream']['stage2_per_frame']:.2f} without a "
              f"stream, {u['with_stream']['stage2_per_frame']:.2f} with one (carried "
              f"{u['with_stream']['carried_per_frame']:.2f} a frame)"
              + (f": {100 * u['saving']:.0f} % fewer" if u["saving"] is not None else "")]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--endpoint", help="a running daemon serving the example's models "
                    "(default: start one on --config)")
    ap.add_argument("--config", type=Path, default=CONFIG)
    ap.add_argument("--seconds", type=float, default=10.0, help="per way, stream count, round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--clip-frames", type=int, default=30)
    ap.add_argument("--tiny", action="store_true",
                    help="a smoke check: 1 round of 1 s, a 12-frame clip (figures meaningless)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    a = ap.parse_args(argv)
    if a.tiny:
        a.seconds, a.rounds, a.clip_frames = 1.0, 1, 12
    info = machine_info(ROOT)
    say_machine(info)
    result: dict[str, Any] = {"command": " ".join([Path(sys.executable).name, *sys.argv]),
                              "machine": info, "config": str(a.config)}
    if a.endpoint:
        result.update(run(a, a.endpoint))
    else:
        with tempfile.TemporaryDirectory(prefix="edged-bench-pipeline-") as tmp:
            d = Daemon(a.config, Path(tmp))
            try:
                result.update(run(a, d.tcp))
            finally:
                d.stop()
    result["loadavg_end"] = os.getloadavg()
    print(markdown(result))
    if a.json:
        a.json.write_text(json.dumps(result, indent=2, default=str) + "\n")
        print(f"results: {a.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
