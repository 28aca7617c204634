#!/usr/bin/env python3
"""Governor swaps under load: a temperature ramp drives the variant ladder while
4 client processes stream requests; how fast and how cleanly does the daemon swap?

Set-up: a temp sysfs root with one thermal zone (``cpu-thermal``, written atomically with
rename so the governor never reads a half-written file), ``edged serve`` in a subprocess on
the shipped digits ladder (cnn-fp32 -> cnn-int8 -> small-fp32, thread settings as in the
shipped ``config.toml``), ``[governor] interval_s = --interval`` (default 1.0, the shipped
default) and levels mirroring ``levels = "auto"`` without a trip point:

* ``warm``: enter 70 C, exit 65 C, 1 ladder step;
* ``hot``: enter 80 C, exit 75 C, 2 ladder steps, ``max_batch_size = --hot-max-batch``
  (default 1, as the auto ``hot`` level);
* ``rung2``: enter 150 C (never reached by the ramp), 2 ladder steps and no batch cap:
  only pinned, to measure the last rung's raw throughput.

4 client processes (``edged bench``'s load generator, ``edged.bench.loadgen``: each its
own ZeroMQ context, ipc endpoint) send one 1x1x28x28 float32 digit at a time back to
back, the first 64 validation digits in turn, recording send/recv time, status, variant,
the reply's timing and whether the answer is the digit's label. The temperature ramps
linearly from --low to --high and back (--rate C/s, a write every --step-s) --cycles
times. Then each level is pinned with ``ctl level`` for --pin-s seconds to measure
throughput per rung.

Reported:

* per threshold crossing: time from the file write that crossed it to the first reply
  computed on the new variant (seconds and monitor intervals), split into
  write -> swap start (governor sampling + decision), the daemon's ``swap_ms`` (load +
  warm-up + golden check of the new variant beside the old), and swap end -> first reply;
* non-OK replies (and client timeouts) over the whole run;
* latency p50/p99 in a window around each swap ([swap start - W, swap end + W], W =
  --window-s) against steady state on the same rung (ramp-phase replies on that variant
  outside every swap window); the ratio takes, for each variant seen in the window, its
  window p99 over its steady p99, and reports the worst;
* throughput (req/s), latency and mean batch with each level pinned.

Usage::

    .venv/bin/python scripts/bench/bench_governor.py                # full run (~7 min)
    .venv/bin/python scripts/bench/bench_governor.py --quick        # ~1 min smoke run
    .venv/bin/python scripts/bench/bench_governor.py --json out.json

Numbers on a shared machine include everybody else's load: the load average is
recorded at the start and end.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing as mp
import os
import re
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from edged.bench.loadgen import drive  # noqa: E402
from edged.client import build_infer  # noqa: E402
from edged.testing import configs as harness_config  # noqa: E402
from edged.testing.configs import model_table, table, tables  # noqa: E402
from edged.testing.harness import Daemon, machine_info, wait_until  # noqa: E402

MODELS = ROOT / "models" / "digits"
LADDER = ("cnn-fp32", "cnn-int8", "small-fp32")
THREADS = {"cnn-fp32": 2, "cnn-int8": 2, "small-fp32": 1}  # as in config.toml

# The goals these runs are held to (docs/benchmarks.md, "Governor swaps").
GOAL_INTERVALS = 2.0  # threshold crossing -> swap, in monitor intervals
GOAL_FAILED = 0
GOAL_P99_RATIO = 2.0  # swap-window p99 / steady p99


@dataclass(frozen=True)
class Level:
    name: str
    enter_c: float | None
    exit_c: float | None
    ladder_steps: int


LEVELS = (
    Level("normal", None, None, 0),
    Level("warm", 70.0, 65.0, 1),
    Level("hot", 80.0, 75.0, 2),
)


def governor_toml(root: Path, interval: float, dwell: float, hot_max_batch: int) -> str:
    """[governor] and its levels: ``warm`` and ``hot`` as ``LEVELS``, ``rung2`` never
    reached by the ramp (pinned only)."""
    levels = [{"name": "warm", "enter_c": 70.0, "exit_c": 65.0, "ladder_steps": 1},
              {"name": "hot", "enter_c": 80.0, "exit_c": 75.0, "ladder_steps": 2,
               "max_batch_size": hot_max_batch if hot_max_batch > 0 else None},
              {"name": "rung2", "enter_c": 150.0, "exit_c": 145.0, "ladder_steps": 2}]
    return (table("governor", {"enabled": True, "sysfs_root": root, "interval_s": interval,
                               "dwell_s": dwell}) + tables("governor.levels", levels))


def write_config(path: Path, root: Path, interval: float, dwell: float,
                 hot_max_batch: int) -> Path:
    digits = model_table(
        "digits", [harness_config.variant(n, MODELS / f"{n}.onnx", options={"threads": THREADS[n]})
                   for n in LADDER],
        required=True, max_batch_size=8, max_queue=256, max_delay_ms=0.0,
        preprocess={"color": "gray", "width": 28, "height": 28,
                    "scale": 0.00392156862745098, "layout": "NCHW", "dtype": "float32"})
    return harness_config.write_config(
        path, server='drain_timeout_s = 5.0\nlog_level = "info"\n', models=[digits],
        governor=governor_toml(root, interval, dwell, hot_max_batch))


# == sysfs =================================================================================

def zone_dir(root: Path) -> Path:
    return root / "sys/class/thermal/thermal_zone0"


def make_zone(root: Path, millic: int) -> None:
    d = zone_dir(root)
    d.mkdir(parents=True, exist_ok=True)
    (d / "type").write_text("cpu-thermal\n")
    (d / "mode").write_text("enabled\n")
    set_temp(root, millic)


def set_temp(root: Path, millic: int) -> float:
    """Write the zone's temp atomically (rename); returns the wall time after the write."""
    d = zone_dir(root)
    tmp = d / ".temp.new"
    tmp.write_text(f"{millic}\n")
    os.replace(tmp, d / "temp")
    return time.time()


# == clients ===============================================================================

def start_clients(d: Daemon, n: int, stop: Any, into: dict[str, Any]) -> threading.Thread:
    """``n`` processes of ``edged bench``'s load generator (``edged.bench.loadgen``), one
    request in flight each, the first 64 validation digits in turn, until ``stop``; the
    result (with every reply's trace) lands in ``into``."""
    val = np.load(MODELS / "validation.npz")
    xs = (val["x"][:64].astype(np.float32) / 255.0)[:, None]
    header, first = build_infer("digits", xs[:1])
    cycle = [build_infer("digits", xs[j:j + 1])[1] for j in range(len(xs))]
    ns = argparse.Namespace(endpoint=d.ipc, clients=n, in_flight=1, duration=float("inf"))

    def run() -> None:
        into.update(drive(ns, header, first, "clients", stop=stop, trace=True, cycle=cycle))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


@dataclass
class Replies:
    send: np.ndarray
    recv: np.ndarray
    ok: np.ndarray
    variant: np.ndarray  # 0 = none, 1.. = LADDER index + 1
    correct: np.ndarray
    batch: np.ndarray
    compute_us: np.ndarray
    queue_us: np.ndarray
    errors: list[Any] = field(default_factory=list)  # (send time, status, error text)

    @property
    def latency_ms(self) -> np.ndarray:
        return (self.recv - self.send) * 1000.0


def load_replies(traces: list[dict[str, list[Any]]]) -> Replies:
    """Every client's replies in the order they arrived; correct = the label's class."""
    ys = np.load(MODELS / "validation.npz")["y"][:64]
    cat = {k: np.concatenate([np.asarray(t[k]) for t in traces]) for k in traces[0]}
    order = np.argsort(cat["recv"], kind="stable")
    c = {k: v[order] for k, v in cat.items()}
    codes = {v: n for n, v in enumerate(("", *LADDER))}
    ok = c["status"] == "OK"
    item = c["item"].astype(np.int64)
    correct = ok & (item >= 0) & (c["top"] == ys[np.clip(item, 0, len(ys) - 1)])
    errors = [(float(t), str(st), str(e)) for t, st, e, o in
              zip(c["send"], c["status"], c["error"], ok, strict=True) if not o]
    return Replies(send=c["send"].astype(float), recv=c["recv"].astype(float), ok=ok,
                   variant=np.array([codes.get(str(v), -1) if o else 0
                                     for v, o in zip(c["variant"], ok, strict=True)], np.int8),
                   correct=correct, batch=c["batch"].astype(np.int32),
                   compute_us=c["compute_us"].astype(np.int64),
                   queue_us=c["queue_us"].astype(np.int64), errors=errors)


# == status poller =========================================================================

class Poller:
    """Polls ``ctl status``: level changes (time first seen) and every distinct swap."""

    def __init__(self, d: Daemon, period: float) -> None:
        self.d = d
        self.period = period
        self.levels: list[tuple[float, str]] = []
        self.swaps: dict[float, dict[str, Any]] = {}
        self.active = ""
        self.errors = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.time()
            try:
                s = self.d.ctl({"op": "status"}, timeout=5.0)
            except Exception:
                self.errors += 1
                time.sleep(self.period)
                continue
            lvl = str((s.get("governor") or {}).get("level"))
            if not self.levels or self.levels[-1][1] != lvl:
                self.levels.append((t, lvl))
            m = s["models"][0]
            self.active = str(m.get("active_variant"))
            ls = m.get("last_swap")
            if ls and ls.get("ok") and ls.get("at") not in self.swaps:
                self.swaps[float(ls["at"])] = dict(ls)
            time.sleep(self.period)

    def stop(self) -> None:
        self._stop.set()
        self._t.join(10)

    def swap_list(self) -> list[dict[str, Any]]:
        return [self.swaps[k] for k in sorted(self.swaps)]


# == analysis ==============================================================================

def pct(a: np.ndarray, q: float) -> float:
    return float(np.percentile(a, q)) if len(a) else float("nan")


@dataclass
class Crossing:
    t_write: float
    temp_c: float
    kind: str  # "up" or "down"
    threshold: str  # e.g. "warm enter 70"
    target: str


def crossings(writes: list[tuple[float, float]]) -> list[Crossing]:
    """Threshold crossings in the written sequence, with the variant each should lead to.

    Rising through a level's ``enter_c`` targets that level's rung; falling through its
    ``exit_c`` targets the rung of the level below (the governor relaxes one step)."""
    out: list[Crossing] = []
    for (_, prev), (t, cur) in itertools.pairwise(writes):
        for i, lv in enumerate(LEVELS):
            if lv.enter_c is None or lv.exit_c is None:
                continue
            if prev < lv.enter_c <= cur:
                out.append(Crossing(t, cur, "up", f"{lv.name} enter {lv.enter_c:g} C",
                                    LADDER[lv.ladder_steps]))
            if cur < lv.exit_c <= prev:
                out.append(Crossing(t, cur, "down", f"{lv.name} exit {lv.exit_c:g} C",
                                    LADDER[LEVELS[i - 1].ladder_steps]))
    return out


def analyse(r: Replies, writes: list[tuple[float, float]], swaps: list[dict[str, Any]],
            levels_seen: list[tuple[float, str]], ramp: tuple[float, float],
            pinned: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    lat = r.latency_ms
    okm = r.ok
    w = args.window_s
    windows = [(s["at"] - s["ms"] / 1000.0 - w, s["at"] + w) for s in swaps]
    in_any = np.zeros(len(r.recv), bool)
    for a, b in windows:
        in_any |= (r.recv >= a) & (r.recv <= b)
    in_ramp = (r.recv >= ramp[0]) & (r.recv <= ramp[1])
    steady: dict[str, dict[str, float]] = {}
    for vi, v in enumerate(LADDER, start=1):
        m = in_ramp & ~in_any & okm & (r.variant == vi)
        steady[v] = {"n": int(m.sum()), "p50_ms": pct(lat[m], 50), "p99_ms": pct(lat[m], 99)}

    rows: list[dict[str, Any]] = []
    for c in crossings(writes):
        after = (r.recv > c.t_write) & okm & (r.variant == LADDER.index(c.target) + 1)
        t_first = float(r.recv[after][0]) if after.any() else float("nan")
        sw = next((s for s in swaps if s["to"] == c.target and s["at"] > c.t_write), None)
        row: dict[str, Any] = {
            "crossing": c.threshold, "kind": c.kind, "t_write": c.t_write, "temp_c": c.temp_c,
            "target": c.target, "to_first_reply_s": t_first - c.t_write,
            "intervals": (t_first - c.t_write) / args.interval,
        }
        if c.kind == "down":
            # Relaxing waits for dwell_s on the level being left (by design).
            name = c.threshold.split()[0]
            entered = [t for t, lv in levels_seen if lv == name and t < c.t_write]
            row["dwell_until"] = (entered[-1] + args.dwell) if entered else None
            row["dwell_bound"] = bool(entered and entered[-1] + args.dwell > c.t_write)
        if sw is not None:
            start = sw["at"] - sw["ms"] / 1000.0
            a, b = start - w, sw["at"] + w
            m = (r.recv >= a) & (r.recv <= b)
            mo = m & okm
            ratio = 0.0
            per: dict[str, float] = {}
            for vi, v in enumerate(LADDER, start=1):
                mv = mo & (r.variant == vi)
                if mv.sum() >= 20 and steady[v]["n"]:
                    per[v] = pct(lat[mv], 99) / steady[v]["p99_ms"]
                    ratio = max(ratio, per[v])
            row.update({
                "from": sw["from"], "swap_ms": sw["ms"], "drained": sw.get("drained"),
                "write_to_swap_start_s": start - c.t_write,
                "swap_end_to_first_reply_s": t_first - sw["at"],
                "window_n": int(mo.sum()), "window_failed": int((m & ~okm).sum()),
                "window_p50_ms": pct(lat[mo], 50), "window_p99_ms": pct(lat[mo], 99),
                "window_max_ms": float(lat[mo].max()) if mo.any() else float("nan"),
                "steady_p99_from_ms": steady[sw["from"]]["p99_ms"],
                "steady_p99_to_ms": steady[sw["to"]]["p99_ms"],
                "p99_ratio_same_rung": ratio, "p99_ratio_per_variant": per,
                "p99_ratio_vs_from_rung": pct(lat[mo], 99) / steady[sw["from"]]["p99_ms"],
            })
        rows.append(row)

    # Placebo windows: same length, centred between swaps (no swap within W + 1 s), judged
    # the same way. Their p99 ratios are the noise floor a swap window is compared with.
    placebo: list[float] = []
    ramp_swaps = [s for s in swaps if ramp[0] <= s["at"] <= ramp[1]]
    for s0, s1 in itertools.pairwise(ramp_swaps):
        mid = (s0["at"] + s1["at"]) / 2.0
        if min(mid - s0["at"], s1["at"] - mid) < 2 * w + 1.0:
            continue
        m = (r.recv >= mid - w) & (r.recv <= mid + w) & okm
        worst = 0.0
        for vi, v in enumerate(LADDER, start=1):
            mv = m & (r.variant == vi)
            if mv.sum() >= 20 and steady[v]["n"]:
                worst = max(worst, pct(lat[mv], 99) / steady[v]["p99_ms"])
        if worst:
            placebo.append(worst)

    failed = int((~okm).sum())
    statuses: dict[str, int] = {}
    for e in r.errors:
        statuses[e[1]] = statuses.get(e[1], 0) + 1
    wrong = {v: int((okm & (r.variant == vi) & ~r.correct).sum())
             for vi, v in enumerate(LADDER, start=1)}
    return {"crossings": rows, "steady": steady, "swaps": swaps, "pinned": pinned,
            "placebo_p99_ratios": placebo,
            "replies": len(r.recv), "failed": failed, "failed_by_status": statuses,
            "first_errors": r.errors[:10], "misclassified_by_variant": wrong,
            "levels_seen": levels_seen}


# == phases ================================================================================

def ramp_cycles(root: Path, poller: Poller, args: argparse.Namespace,
                writes: list[tuple[float, float]]) -> None:
    def seg(a: float, b: float) -> None:
        n = max(1, round(abs(b - a) / (args.rate * args.step_s)))
        for i in range(1, n + 1):
            temp = a + (b - a) * i / n
            millic = round(temp * 1000)
            t = set_temp(root, millic)
            writes.append((t, millic / 1000.0))
            time.sleep(args.step_s)

    for c in range(args.cycles):
        print(f"  cycle {c + 1}/{args.cycles}: {args.low:g} -> {args.high:g} -> {args.low:g} C",
              file=sys.stderr)
        seg(args.low, args.high)
        time.sleep(args.hold_s)
        seg(args.high, args.low)
        wait_until(lambda: poller.active == LADDER[0], 60.0, "back on cnn-fp32")
        time.sleep(args.hold_s)


def pin_phase(d: Daemon, poller: Poller, args: argparse.Namespace,
              marks: list[dict[str, Any]]) -> None:
    plan = [("normal", "cnn-fp32", ""), ("warm", "cnn-int8", ""),
            ("hot", "small-fp32", f"batch<={args.hot_max_batch}" if args.hot_max_batch else ""),
            ("rung2", "small-fp32", "no batch cap")]
    # Rounds alternate the order so that a slow drift in background load hits every level.
    rounds = [plan if k % 2 == 0 else plan[::-1] for k in range(args.pin_rounds)]
    for level, variant, note in [x for rnd in rounds for x in rnd]:
        r = d.ctl({"op": "level", "level": level})
        if r.get("status") != "OK":
            raise RuntimeError(f"ctl level {level}: {r}")
        wait_until(lambda v=variant: poller.active == v, 60.0, f"{variant} pinned at {level}")
        time.sleep(args.settle_s)
        t0 = time.time()
        time.sleep(args.pin_s)
        marks.append({"level": level, "variant": variant, "note": note, "t0": t0,
                      "t1": time.time()})
        print(f"  pinned {level} ({variant}) for {args.pin_s:g} s", file=sys.stderr)
    d.ctl({"op": "level", "level": "auto"})


def pinned_stats(r: Replies, marks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per level: req/s is the median over rounds (each round's value kept)."""
    per = pinned_rounds(r, marks)
    out = []
    for level in dict.fromkeys(p["level"] for p in per):
        rs = [p for p in per if p["level"] == level]
        row = dict(rs[0])
        row["rounds_req_s"] = [p["req_s"] for p in rs]
        for k in ("req_s", "p50_ms", "p99_ms", "mean_batch", "compute_us_p50"):
            row[k] = float(np.median([p[k] for p in rs]))
        row["failed"] = sum(p["failed"] for p in rs)
        out.append(row)
    return out


def pinned_rounds(r: Replies, marks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    lat = r.latency_ms
    for mk in marks:
        m = (r.recv >= mk["t0"]) & (r.recv < mk["t1"])
        mo = m & r.ok
        vi = LADDER.index(mk["variant"]) + 1
        out.append({**mk, "req_s": float(mo.sum()) / (mk["t1"] - mk["t0"]),
                    "failed": int((m & ~r.ok).sum()),
                    "on_variant": float((r.variant[mo] == vi).mean()) if mo.any() else 0.0,
                    "p50_ms": pct(lat[mo], 50), "p99_ms": pct(lat[mo], 99),
                    "mean_batch": float(r.batch[mo].mean()) if mo.any() else float("nan"),
                    "compute_us_p50": pct(r.compute_us[mo], 50)})
    return out


def log_swaps(text: str) -> list[dict[str, Any]]:
    pat = re.compile(r"^(\S+) .*variant swap model=\S+ from=(\S+) to=(\S+) .*drained=(\S+) "
                     r"swap_ms=(\d+)", re.M)
    return [{"ts": m[1], "from": m[2], "to": m[3], "drained": m[4], "swap_ms": int(m[5])}
            for m in pat.finditer(text)]


# == report ================================================================================

def f(x: Any, nd: int = 2) -> str:
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return "–"
    return f"{x:.{nd}f}" if isinstance(x, float) else str(x)


def markdown(res: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [
        f"Machine: {res['machine']}; load average {res['load_start']} at start, "
        f"{res['load_end']} at end.",
        f"Governor `interval_s = {args.interval:g}`, `dwell_s = {args.dwell:g}`; ramp "
        f"{args.low:g} -> {args.high:g} -> {args.low:g} C at {args.rate:g} C/s "
        f"(a write every {args.step_s:g} s), {args.cycles} cycle(s); {args.clients} client "
        f"processes, one request in flight each; swap window = swap ± {args.window_s:g} s.",
        "",
        "| crossing | swap | write → first reply on new variant | intervals | "
        "write → swap start | swap_ms | swap end → first reply | window n | "
        "window p50 / p99 ms | steady p99 same rung ms | p99 ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in res["crossings"]:
        per = c.get("p99_ratio_per_variant") or {}
        steady = " / ".join(f"{v}: {res['steady'][v]['p99_ms']:.1f}" for v in per) or "–"
        tag = " (dwell)" if c.get("dwell_bound") else ""
        lines.append(
            f"| {c['crossing']} ({c['temp_c']:.2f} C){tag} | {c.get('from', '?')} → "
            f"{c['target']} | {f(c['to_first_reply_s'])} s | {f(c['intervals'])} | "
            f"{f(c.get('write_to_swap_start_s'))} s | {f(c.get('swap_ms'), 0)} | "
            f"{f(c.get('swap_end_to_first_reply_s'), 3)} s | {c.get('window_n', '–')} | "
            f"{f(c.get('window_p50_ms'), 1)} / {f(c.get('window_p99_ms'), 1)} | {steady} | "
            f"{f(c.get('p99_ratio_same_rung'))} |")
    s = res["summary"]
    lines += [
        "",
        "| steady rung (ramp phase, outside swap windows) | replies | p50 ms | p99 ms |",
        "|---|---|---|---|",
    ]
    for v, st in res["steady"].items():
        lines.append(f"| {v} | {st['n']} | {f(st['p50_ms'])} | {f(st['p99_ms'])} |")
    lines += [
        "",
        "| pinned level | variant | req/s (median) | req/s per round | p50 ms | p99 ms | "
        "mean batch | compute p50 µs | failed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in res["pinned"]:
        note = f" ({p['note']})" if p["note"] else ""
        rounds = ", ".join(f"{x:.0f}" for x in p["rounds_req_s"])
        lines.append(f"| {p['level']}{note} | {p['variant']} | {p['req_s']:.0f} | {rounds} | "
                     f"{f(p['p50_ms'])} | {f(p['p99_ms'])} | {f(p['mean_batch'])} | "
                     f"{f(p['compute_us_p50'], 0)} | {p['failed']} |")
    lines += [
        "",
        "| goal | target | measured | met |",
        "|---|---|---|---|",
        f"| crossing → swap (escalation) | ≤ {GOAL_INTERVALS:g} intervals | "
        f"max {f(s['up_intervals_max'])}, median {f(s['up_intervals_median'])} | "
        f"{'yes' if s['up_met'] else 'no'} |",
        f"| crossing → swap (relaxing, dwell expired) | ≤ {GOAL_INTERVALS:g} intervals | "
        f"max {f(s['down_intervals_max'])}, median {f(s['down_intervals_median'])} | "
        f"{'yes' if s['down_met'] else 'no'} |",
        f"| failed replies (whole run) | {GOAL_FAILED} | {res['failed']} of {res['replies']} | "
        f"{'yes' if res['failed'] <= GOAL_FAILED else 'no'} |",
        f"| swap-window p99 / steady p99 (same rung) | ≤ {GOAL_P99_RATIO:g}× | "
        f"max {f(s['ratio_max'])}, median {f(s['ratio_median'])} | "
        f"{'yes' if s['ratio_met'] else 'no'} |",
        f"| (noise floor: same ratio in {len(res['placebo_p99_ratios'])} windows without a "
        f"swap) | | max {f(s['placebo_max'])}, median {f(s['placebo_median'])} | |",
    ]
    return "\n".join(lines)


def summarise(res: dict[str, Any]) -> dict[str, Any]:
    rows = res["crossings"]
    up = [c["intervals"] for c in rows if c["kind"] == "up"]
    down = [c["intervals"] for c in rows if c["kind"] == "down" and not c.get("dwell_bound")]
    ratios = [c["p99_ratio_same_rung"] for c in rows if c.get("p99_ratio_same_rung")]

    def mx(a: list[float]) -> float:
        return float(np.nanmax(a)) if a else float("nan")

    def md(a: list[float]) -> float:
        return float(np.nanmedian(a)) if a else float("nan")

    return {
        "up_intervals_max": mx(up), "up_intervals_median": md(up),
        "up_met": bool(up) and mx(up) <= GOAL_INTERVALS,
        "down_intervals_max": mx(down), "down_intervals_median": md(down),
        "down_met": bool(down) and mx(down) <= GOAL_INTERVALS,
        "ratio_max": mx(ratios), "ratio_median": md(ratios),
        "ratio_met": bool(ratios) and mx(ratios) <= GOAL_P99_RATIO,
        "placebo_max": mx(res["placebo_p99_ratios"]),
        "placebo_median": md(res["placebo_p99_ratios"]),
    }


def machine() -> str:
    m = machine_info(ROOT)
    return (f"{m['cpu']}, {m['logical_cpus']} CPUs, Linux {m['kernel']}, Python "
            f"{m['python']}, onnxruntime {m['onnxruntime']}")


def load_avg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# == main ==================================================================================

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--interval", type=float, default=1.0, help="governor interval_s")
    ap.add_argument("--dwell", type=float, default=5.0, help="governor dwell_s")
    ap.add_argument("--hot-max-batch", type=int, default=1,
                    help="max_batch_size on the hot level (0 = none); auto levels use 1")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--low", type=float, default=60.0)
    ap.add_argument("--high", type=float, default=86.0)
    ap.add_argument("--rate", type=float, default=1.0, help="ramp rate, C/s")
    ap.add_argument("--step-s", type=float, default=0.25, help="seconds between writes")
    ap.add_argument("--hold-s", type=float, default=3.0, help="hold at the ends of a ramp")
    ap.add_argument("--window-s", type=float, default=1.0, help="swap window margin")
    ap.add_argument("--pin-s", type=float, default=8.0, help="seconds per pinned level")
    ap.add_argument("--pin-rounds", type=int, default=3, help="rounds over the pinned levels")
    ap.add_argument("--settle-s", type=float, default=1.0)
    ap.add_argument("--warmup-s", type=float, default=3.0)
    ap.add_argument("--poll-s", type=float, default=0.1, help="status poll period")
    ap.add_argument("--quick", action="store_true", help="1 fast cycle, short pins (~1 min)")
    ap.add_argument("--json", type=Path, help="write all results here")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (log, replies)")
    args = ap.parse_args(argv)
    if args.quick:
        args.cycles, args.rate, args.dwell, args.hold_s = 1, 4.0, 1.0, 1.5
        args.pin_s, args.warmup_s, args.pin_rounds = 4.0, 1.5, 1

    work = Path(tempfile.mkdtemp(prefix="edged-bench-gov-"))
    root = work / "sysroot"
    make_zone(root, round(args.low * 1000))
    cfg = write_config(work / "edged.toml", root, args.interval, args.dwell, args.hot_max_batch)
    res: dict[str, Any] = {"machine": machine(), "load_start": load_avg(),
                           "args": {k: (str(v) if isinstance(v, Path) else v)
                                    for k, v in vars(args).items()}}
    print(f"edged bench_governor: workdir {work}", file=sys.stderr)
    d = Daemon(cfg, work, wait=False)
    stop = mp.get_context("spawn").Event()
    load: dict[str, Any] = {}
    clients: threading.Thread | None = None
    poller: Poller | None = None
    writes: list[tuple[float, float]] = []
    marks: list[dict[str, Any]] = []
    try:
        d.wait_ready()
        poller = Poller(d, args.poll_s)
        wait_until(lambda: poller is not None and poller.active == LADDER[0], 30, "cnn-fp32")
        clients = start_clients(d, args.clients, stop, load)
        time.sleep(1.0 + args.warmup_s)  # pacing: spawn + imports, then a warm-up
        ramp0 = time.time()
        writes.append((ramp0, args.low))
        ramp_cycles(root, poller, args, writes)
        ramp1 = time.time()
        pin_phase(d, poller, args, marks)
    finally:
        stop.set()
        if clients is not None:
            clients.join(90)
        if poller is not None:
            poller.stop()
        rc = d.stop()
    res["daemon_rc"] = rc
    res["load_end"] = load_avg()
    if "traces" not in load:
        raise RuntimeError(f"the load clients gave no result (see above); workdir {work}")
    replies = load_replies(load["traces"])
    res.update(analyse(replies, writes, poller.swap_list(), poller.levels, (ramp0, ramp1),
                       pinned_stats(replies, marks), args))
    res["summary"] = summarise(res)
    res["log_swaps"] = log_swaps(d.log())
    res["status_poll_errors"] = poller.errors
    res["workdir"] = str(work)
    md = markdown(res, args)
    print(md)
    if len(res["log_swaps"]) != len(res["swaps"]):
        print(f"note: {len(res['log_swaps'])} swaps in the daemon log, "
              f"{len(res['swaps'])} seen by the status poller", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(res, indent=1, default=str))
    if not args.keep:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
