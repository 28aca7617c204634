#!/usr/bin/env python3
"""The measurement matrix of the serving defaults, for one run on a quiet machine: every row is an
``edged bench`` run whose ratios decide a default, and the result is a markdown table to
paste into docs/benchmarks.md.

    .venv/bin/python scripts/models/make_bench_models.py   # once (torch): .cache/bench-models/
    .venv/bin/python scripts/bench/bench_matrix.py --out bench-matrix.md      # ~15-20 min
    .venv/bin/python scripts/bench/bench_matrix.py --quick --fp32 models/digits/cnn-fp32.onnx \\
        --int8 models/digits/cnn-int8.onnx                               # smoke run, ~3 min

Rows (MobileNetV2 fp32 unless said; each row starts its own daemon from a generated
config: one ORT variant, ``max_batch_size = 8``, metrics off; the clients, the floors and
raw ORT run on the same cores as the daemon):

- ``edged bench --floor``: batch-1 p50 with one client and throughput with 8 client
  processes, against raw ORT and the one-thread and batching floors, for each candidate
  daemon setting (today's default, ``allow_spinning = true``, ``batch_window`` 0.25 and
  0.5, spinning with a window, ``inline_max_ms = 20`` with and without spinning, and on
  all cores ORT with `threads = 1`, a core left to the loop and the clients), on all
  cores and on one (``taskset -c 0``, here by
  setting this process's affinity, which the daemon and the clients inherit);
- the INT8 rung, same rows, against raw INT8;
- shared-memory frames (``--transport shm``) at 1 and 8 clients, against the same
  (socket) floors, with and without spinning;
- the 1280x720 BGR camera path (a raw uint8 frame the daemon preprocesses) against
  in-process cv2 + ORT (``--raw-pipeline``);
- the ``--floor`` rows again with a CPU-busy camera app alongside: examples/streamer.py
  decoding a generated MJPG video and streaming it to the same daemon, restarted whenever
  the file ends; its achieved frame rate is in the row (spinning that wins the benchmark
  by taking the app's CPU is no win on a device).

Load average is recorded before every row; a row started above 0.3 is marked.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from edged.testing import configs as harness_config  # noqa: E402
from edged.testing.configs import model_table, variant  # noqa: E402
from edged.testing.harness import Daemon, pinned  # noqa: E402

CACHE = ROOT / ".cache" / "bench-models"
QUIET = 0.3


@dataclass
class Setting:
    """One daemon configuration to measure."""

    name: str
    spinning: bool | None = None  # None: the thread plan's choice
    window: float = 0.0
    inline_ms: float = 0.0
    threads: int = 0  # ORT intra-op threads; 0: the default (one per physical core)

    def model_keys(self) -> dict[str, Any]:
        """The ``[[models]]`` keys this setting sets (``None``: the daemon's default)."""
        return {"batch_window": self.window or None, "inline_max_ms": self.inline_ms or None}

    def options(self) -> dict[str, Any]:
        """The variant's ``[models.variants.options]``."""
        return {"allow_spinning": self.spinning, "threads": self.threads or None}


DEFAULT = Setting("default")
SPIN = Setting("allow_spinning = true", spinning=True)
INLINE = Setting("inline_max_ms = 20", inline_ms=20)
CANDIDATES = [DEFAULT, SPIN, Setting("batch_window = 0.25", window=0.25),
              Setting("batch_window = 0.5", window=0.5),
              Setting("spinning + batch_window = 0.5", spinning=True, window=0.5),
              INLINE, Setting("spinning + inline_max_ms = 20", spinning=True, inline_ms=20),
              Setting("ORT threads = 1 (a core left to the loop and clients)", threads=1)]
ONE_CORE = [DEFAULT, SPIN, Setting("batch_window = 0.5", window=0.5), INLINE]


@dataclass
class Row:
    what: str
    model: str
    setting: str
    cores: int
    load: float
    result: dict[str, Any] = field(default_factory=dict)
    note: str = ""


def preprocess_table(model: Path) -> dict[str, Any]:
    """[models.preprocess] for the model's image input (ImageNet for 3 channels)."""
    import onnxruntime as ort

    shape = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]
                                 ).get_inputs()[0].shape
    c, h, w = shape[1], shape[2], shape[3]
    if c == 1:
        return {"color": "gray", "width": w, "height": h}
    return {"color": "rgb", "width": w, "height": h, "mean": [0.485, 0.456, 0.406],
            "std": [0.229, 0.224, 0.225]}


def write_config(path: Path, model: Path, s: Setting, camera: bool) -> Path:
    m = model_table("m", [variant("v", model, options=s.options())], required=True,
                    max_batch_size=8, max_queue=256, **s.model_keys(),
                    preprocess=preprocess_table(model) if camera else None)
    return harness_config.write_config(path, models=[m])


def bench(d: Daemon, args: list[str], out: Path) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "edged", "bench", "--endpoint", d.ipc, "--model", "m",
           *args, "--json", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stdout}\n{p.stderr[-2000:]}")
    print(p.stdout, flush=True)
    return json.loads(out.read_text())


class BusyApp:
    """examples/streamer.py decoding a video and streaming it to the daemon, restarted
    whenever the file ends, until stopped; counts the frames the daemon answered (the
    app's frame rate, start-ups included)."""

    def __init__(self, endpoint: str, video: Path) -> None:
        self.endpoint, self.video = endpoint, video
        self.stop = threading.Event()
        self.ok = 0
        self.elapsed = 0.0
        self.proc: subprocess.Popen[str] | None = None
        self.t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            t0 = time.monotonic()
            self.proc = subprocess.Popen(
                [sys.executable, str(ROOT / "examples" / "streamer.py"), "--endpoint",
                 self.endpoint, "--model", "m", "--source", str(self.video), "--duration",
                 "3600", "--in-flight", "2"], stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)})
            if self.stop.is_set():  # stopped while this one started
                self.proc.terminate()
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                if line.rstrip().endswith("ms in the daemon)"):  # an answered frame
                    self.ok += 1
            self.proc.wait()
            self.elapsed += time.monotonic() - t0

    @property
    def fps(self) -> float | None:
        return self.ok / self.elapsed if self.elapsed else None

    def __enter__(self) -> BusyApp:
        self.t.start()
        time.sleep(3)  # the app is streaming before the benchmark starts
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.proc is not None:
            self.proc.terminate()
        self.t.join(30)


def make_video(path: Path, frames: int = 600) -> Path:
    """A 1280x720 MJPG file: a moving gradient with a square (decoding it is real work)."""
    import cv2
    import numpy as np

    w = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 30, (1280, 720))
    x = np.linspace(0, 255, 1280, dtype=np.uint8)[None, :, None]
    for i in range(frames):
        f = np.broadcast_to(x, (720, 1280, 3)).copy()
        f[200:400, (i * 8) % 1000:(i * 8) % 1000 + 200] = (0, 0, 255)
        w.write(f)
    w.release()
    return path


def run_matrix(a: argparse.Namespace) -> list[Row]:
    tmp = Path(tempfile.mkdtemp(prefix="edged-matrix-"))
    all_cores = os.sched_getaffinity(0)
    common = ["--rounds", str(a.rounds), "--duration", str(a.duration)]
    frame = tmp / "frame720.npy"
    import numpy as np

    np.save(frame, np.random.default_rng(0).integers(0, 256, (720, 1280, 3), np.uint8))
    video = make_video(tmp / "video.avi")
    rows: list[Row] = []
    n = 0

    def row(what: str, model: Path, s: Setting, cores: set[int], bench_args: list[str],
            camera: bool = False, busy: bool = False) -> None:
        nonlocal n
        n += 1
        if a.only and a.only not in what:
            return
        with pinned(cores):  # the daemon, the floors and the clients inherit them
            load = os.getloadavg()[0]
            print(f"== row {n}: {what}, {model.name}, {s.name}, {len(cores)} core(s), "
                  f"load {load:.2f}", flush=True)
            work = tmp / f"row{n}"
            cfg = write_config(work.with_suffix(".toml"), model, s, camera or busy)
            d = Daemon(cfg, work, args=("--log-level", "warning"))
            try:
                r = Row(what, model.name, s.name, len(cores), load)
                if busy:
                    with BusyApp(d.ipc, video) as app:
                        r.result = bench(d, bench_args + common, work / "bench.json")
                    r.note = (f"streamer {app.fps:.1f} fps" if app.fps
                              else "streamer: no figure")
                else:
                    r.result = bench(d, bench_args + common, work / "bench.json")
                rows.append(r)
            finally:
                d.stop()

    two, one = all_cores, {min(all_cores)}
    floor = ["--floor", "--raw", str(a.fp32), "--clients", str(a.clients)]
    for s in CANDIDATES:
        row("floor", a.fp32, s, two, floor)
    for s in ONE_CORE:
        row("floor", a.fp32, s, one, floor)
    for s in (DEFAULT, SPIN):
        row("floor INT8", a.int8, s, two,
            ["--floor", "--raw", str(a.int8), "--clients", str(a.clients)])
    for s in (DEFAULT, SPIN):
        row("floor, daemon over shm", a.fp32, s, two, [*floor, "--transport", "shm"])
    for s in (DEFAULT, INLINE):
        row("camera 1280x720 BGR vs cv2+ORT", a.fp32, s, two,
            ["--input", "npy", "--file", str(frame), "--raw-pipeline",
             str(write_config(tmp / "pipeline.toml", a.fp32, s, True))], camera=True)
    for s in (DEFAULT, SPIN):
        row("floor, streamer alongside", a.fp32, s, two, floor, busy=True)
    return rows


def _f(x: Any, nd: int = 2) -> str:
    return "" if x is None or x != x else f"{x:.{nd}f}"


def markdown(rows: list[Row], a: argparse.Namespace) -> str:
    from edged.testing.harness import machine_info

    m = machine_info()
    out = [f"Matrix: `scripts/bench/bench_matrix.py --rounds {a.rounds} --duration {a.duration} "
           f"--clients {a.clients}`; {m['cpu']}, {m['logical_cpus']} logical CPUs, "
           f"onnxruntime {m['onnxruntime']}, git {m['git']}; ratios are medians of "
           "per-round ratios; rows started above load "
           f"{QUIET} are marked *(busy)*.", "",
           "| # | row | model | daemon setting | cores | load | raw b1 p50 ms | daemon b1 p50 ms"
           " | floor b1 p50 ms | **p50 daemon/floor** | p50 daemon/raw | daemon img/s | "
           "floor img/s | raw best img/s | **thr daemon/floor** | thr daemon/raw | note |",
           "|" + "---|" * 17]
    for i, r in enumerate(rows, 1):
        res, rat = r.result, r.result.get("ratios", {})
        rounds = res.get("rounds", [])

        def med(key: str, sub: str, rounds: list[dict[str, Any]] = rounds) -> float | None:
            vals = [rd[key][sub] if sub in rd.get(key, {}) else None for rd in rounds]
            vals = [v for v in vals if v is not None]
            return statistics.median(vals) if vals else None

        load = f"{r.load:.2f}" + (" *(busy)*" if r.load > QUIET else "")
        if "floor" in r.what:
            raw_b1 = [rd["raw"]["batch1"]["p50_ms"] for rd in rounds]
            raw_best = [rd["raw"]["best_throughput"] for rd in rounds]
            cells = [_f(statistics.median(raw_b1)) if raw_b1 else "",
                     _f(med("daemon_b1", "p50_ms")), _f(med("floor_b1", "p50_ms")),
                     _f(rat.get("p50 daemon / one-thread floor"), 3),
                     _f(rat.get("p50 daemon / raw"), 3),
                     _f(med("daemon_n", "throughput"), 1), _f(med("floor_n", "throughput"), 1),
                     _f(statistics.median(raw_best), 1) if raw_best else "",
                     _f(rat.get("throughput daemon / batching floor"), 3),
                     _f(rat.get("throughput daemon / raw best"), 3)]
        else:  # the camera path: daemon vs the in-process pipeline
            raw_b1 = [rd["raw"]["batch1"]["p50_ms"] for rd in rounds]
            cells = [_f(statistics.median(raw_b1)) if raw_b1 else "",
                     _f(med("daemon", "p50_ms")), "", "",
                     _f(rat.get("p50 daemon/raw"), 3), _f(med("daemon", "throughput"), 1),
                     "", "", "", _f(rat.get("throughput daemon/raw-best"), 3)]
        out.append(f"| {i} | {r.what} | {r.model} | {r.setting} | {r.cores} | {load} | "
                   + " | ".join(cells) + f" | {r.note} |")
    out += ["", "How to read it: a default changes only where a candidate's ratio beats "
            "today's default on 2 cores *and* on 1, and the streamer row shows the app "
            "keeping its frame rate; `floor` is the one-thread floor for p50 and the "
            "batching floor for throughput (edged/bench/floor.py)."]
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fp32", type=Path, default=CACHE / "mobilenetv2-fp32.onnx")
    ap.add_argument("--int8", type=Path, default=CACHE / "mobilenetv2-int8.onnx")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=2.5, help="seconds per phase")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--quick", action="store_true", help="1 round of 1 s: a smoke run")
    ap.add_argument("--only", help="run only the rows whose name contains this (e.g. INT8, "
                    "shm, camera, streamer)")
    ap.add_argument("--out", type=Path, default=Path("bench-matrix.md"))
    ap.add_argument("--json", type=Path, help="also write every row's full result here")
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.duration = 1, 1.0
    for f in (a.fp32, a.int8):
        if not f.exists():
            print(f"bench_matrix: {f} is missing; run scripts/models/make_bench_models.py first "
                  "(needs torch), or pass --fp32/--int8", file=sys.stderr)
            return 2
    a.fp32, a.int8 = a.fp32.resolve(), a.int8.resolve()
    if os.getloadavg()[0] > QUIET:
        print(f"bench_matrix: WARNING: load average {os.getloadavg()[0]:.2f} > {QUIET}; "
              "the figures are for a quiet machine", file=sys.stderr)
    t0 = time.monotonic()
    rows = run_matrix(a)
    md = markdown(rows, a)
    a.out.write_text(md)
    if a.json:
        a.json.write_text(json.dumps([r.__dict__ for r in rows], indent=2, default=str))
    print(md)
    print(f"wrote {a.out} ({(time.monotonic() - t0) / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
