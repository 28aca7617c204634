"""``edged bench footprint``: what the daemon costs on this device with this config.

Three figures, each against the target docs/benchmarks.md gives:

* start -> healthy: from ``Popen`` to the first OK ``health`` reply (median of
  ``--startups``), beside the daemon's own ``ready ... startup_ms=`` log figure (from its
  process's start, estimated inside it);
* idle CPU of the daemon (all threads) over a quiet window, with the busiest threads;
* RSS of the daemon (1 s after each start is healthy, the median of the starts: it
  varies by ~15 MB from start to start) next to a bare process that only opens (and
  runs once, as the daemon warms up) an ONNX Runtime session of every model's first
  variant, with the config's thread count: what the simplest server around the same
  sessions holds.

Bytecode: with ``PYTHONDONTWRITEBYTECODE`` set and no ``__pycache__``, every start
compiles all of edged's modules from source (~0.1 s here), a cost an installed daemon
does not pay. By default (``--bytecode cached``) the package is compiled into its own
``__pycache__`` first (what pip does at install) and the daemon runs with
``PYTHONDONTWRITEBYTECODE`` unset; ``--bytecode source`` measures the other case, on a
copy of the package without bytecode. The case measured is printed and kept in the JSON.

Why in the package: an operator sizes *their* device with *their* config; the daemon
runs through the harness the tests use (``edged.testing.harness.Daemon``), on private
endpoints, so it cannot collide with a daemon already serving there.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from edged.bench.threads import TICK_MS, Times, snapshot
from edged.testing.harness import Daemon, machine_info, say_machine

# The targets docs/benchmarks.md holds the default config to.
TARGET_READY_S = 0.5
TARGET_IDLE_CPU_PCT = 0.3
TARGET_RSS_DELTA_MB = 25.0
#: after ready, before a start's RSS is read
RSS_SETTLE_S = 1.0

MB = 1024.0 * 1024.0
PACKAGE = Path(__file__).resolve().parents[1]  # the edged package the daemon imports


#: what ``edged bench footprint --help`` says (the module docstring is for developers)
DESCRIPTION = """\
Start a daemon on --config (private endpoints) --startups times: the time from start to
healthy (median), then its idle CPU and memory, beside bare ONNX Runtime sessions of the
same first variants.
"""


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "footprint", help="start -> healthy, idle CPU and RSS of a daemon on a config",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, default=Path("config.toml"),
                   help="the config to measure (default: config.toml); its endpoints, "
                        "metrics address and runtime dir are moved aside")
    p.add_argument("--startups", type=int, default=5,
                   help="starts to time; the median is reported (default 5)")
    p.add_argument("--idle-seconds", type=float, default=30.0,
                   help="the idle CPU window after the last start (default 30)")
    p.add_argument("--settle-seconds", type=float, default=2.0,
                   help="wait before the idle window: first governor samples, GC "
                        "(default 2)")
    p.add_argument("--bytecode", choices=("cached", "source"), default="cached",
                   help="cached: edged compiled into its __pycache__ first, as installed "
                        "(default); source: every start compiles edged from source")
    p.add_argument("--json", type=Path, help="write the full result here")
    p.set_defaults(func=run)


# == the bare process ======================================================================

@dataclass(frozen=True)
class FirstVariant:
    """A model's first variant: the one the daemon opens at start."""

    model: str
    variant: str
    backend: str
    path: Path
    threads: int
    size: tuple[int, int] | None  # the preprocess width, height (dynamic image inputs)


def first_variants(config: Path) -> list[FirstVariant]:
    """Every model's first variant, read by the daemon's own config loader."""
    from edged.config.file import load_config

    out = []
    for m in load_config(config).models:
        v = m.variants[0]
        pre = m.preprocess
        out.append(FirstVariant(m.name, v.name, v.backend, v.path,
                                int(getattr(v.options, "threads", 0)),
                                (pre.width, pre.height) if pre is not None else None))
    return out


_BARE = r"""
import json, sys, time
t0 = time.monotonic()
import numpy as np, psutil
import onnxruntime as ort
types = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(uint8)": np.uint8,
         "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(double)": np.float64}
sessions = []
p = psutil.Process()
for path, threads, size in json.loads(sys.argv[1]):
    so = ort.SessionOptions()
    so.intra_op_num_threads = int(threads)
    so.log_severity_level = 3
    s = ort.InferenceSession(path, sess_options=so, providers=["CPUExecutionProvider"])
    sessions.append(s)
    for a in s.get_inputs():  # one batch-1 run, dynamic image dims at the model's size
        dims = [1] + [d if isinstance(d, int) and d >= 0 else 1 for d in a.shape[1:]]
        if size and len(dims) == 4:
            hw = (1, 2) if dims[3] in (1, 3) or dims[1] not in (1, 3) else (2, 3)
            dims[hw[0]], dims[hw[1]] = size[1], size[0]
        s.run(None, {a.name: np.zeros(dims, types[a.type])})
print(json.dumps({"rss_warm": p.memory_info().rss, "uss_warm": p.memory_full_info().uss,
                  "seconds": time.monotonic() - t0}))
"""


def bare_sessions_rss(variants: Sequence[FirstVariant]) -> dict[str, float]:
    """RSS of a process that only imports ORT and opens each ONNX Runtime variant with
    ORT's defaults (the config's thread count), one batch-1 run each. It imports no
    edged module, so the difference to the daemon is what edged itself holds."""
    arg = json.dumps([[str(v.path), v.threads, list(v.size) if v.size else None]
                      for v in variants if v.backend == "onnxruntime"])
    out = subprocess.run([sys.executable, "-c", _BARE, arg], capture_output=True, text=True,
                         check=True)
    d = json.loads(out.stdout.strip().splitlines()[-1])
    return {"rss_warm_mb": d["rss_warm"] / MB, "uss_warm_mb": d["uss_warm"] / MB,
            "seconds": d["seconds"]}


def rss_mb(pid: int) -> dict[str, float]:
    p = psutil.Process(pid)
    return {"rss_mb": p.memory_info().rss / MB, "uss_mb": p.memory_full_info().uss / MB}


# == idle CPU ==============================================================================

def _cpu_s(t: Times) -> float:
    return (t.utime + t.stime) * TICK_MS / 1000.0


def idle_cpu(pids: dict[str, int], seconds: float) -> dict[str, dict[str, Any]]:
    """CPU % (of one core) each process used over the same quiet window, with top threads
    (``/proc`` read as ``edged bench --threads`` reads it)."""
    s0 = {k: snapshot(p, process_first=True) for k, p in pids.items()}
    t0 = time.monotonic()
    time.sleep(seconds)  # the measurement window itself: nothing to wait for
    el = time.monotonic() - t0
    res = {}
    for k, p in pids.items():
        s1 = snapshot(p, process_first=False)
        busy = []
        for tid, t in s1.threads.items():
            before = s0[k].threads.get(tid)
            d = _cpu_s(t) - (_cpu_s(before) if before else 0.0)
            if d > 0:
                busy.append((t.comm, tid, d))
        busy.sort(key=lambda x: -x[2])
        res[k] = {"seconds": round(el, 1),
                  "cpu_pct": 100.0 * (_cpu_s(s1.process) - _cpu_s(s0[k].process)) / el,
                  "threads": len(s1.threads),
                  "top_threads": [{"name": n, "tid": tid, "cpu_pct": round(100 * d / el, 3)}
                                  for n, tid, d in busy[:5]]}
    return res


# == bytecode ==============================================================================

def _bytecode_fresh(src: Path) -> bool:
    """Whether ``src`` has bytecode the interpreter will use instead of compiling it
    (the pyc's header names the source's mtime and size, or it is hash-based)."""
    try:
        with open(importlib.util.cache_from_source(str(src)), "rb") as f:
            head = f.read(16)
    except OSError:
        return False
    if len(head) < 16 or head[:4] != importlib.util.MAGIC_NUMBER:
        return False
    if int.from_bytes(head[4:8], "little") & 1:  # hash-based: checked against the source
        return True
    st = src.stat()
    return (int.from_bytes(head[8:12], "little") == int(st.st_mtime) & 0xFFFFFFFF
            and int.from_bytes(head[12:16], "little") == st.st_size & 0xFFFFFFFF)


def fresh_modules(package: Path) -> tuple[int, int]:
    """(modules with fresh bytecode, modules) of the package at ``package``."""
    mods = sorted(package.rglob("*.py"))
    return sum(_bytecode_fresh(m) for m in mods), len(mods)


@dataclass
class Bytecode:
    """How the daemon gets edged's bytecode: the case measured, said in the report."""

    case: str  # "cached" or "source"
    package: Path  # the edged package the daemon imports
    fresh: int  # its modules with fresh bytecode before the first start
    modules: int
    env: dict[str, str] = field(default_factory=dict)  # set for the daemon

    def describe(self) -> str:
        if self.case == "source":
            return (f"bytecode: from source — edged copied without __pycache__ to "
                    f"{self.package}, PYTHONDONTWRITEBYTECODE=1: every start compiles its "
                    f"{self.modules} modules (a checkout run with PYTHONDONTWRITEBYTECODE set)")
        here = os.environ.get("PYTHONDONTWRITEBYTECODE")
        note = f" (it is set here: {here!r})" if here else ""
        text = (f"bytecode: cached, as installed — {self.fresh} of {self.modules} edged "
                f"modules have fresh bytecode in their __pycache__ under {self.package}; the "
                f"daemon runs with PYTHONDONTWRITEBYTECODE unset{note}")
        if self.fresh < self.modules:
            text += (f"; WARNING: {self.modules - self.fresh} module(s) could not be "
                     "compiled and compile from source at every start")
        return text


def prepare_bytecode(case: str, workdir: Path) -> Bytecode:
    """Compile the package into its ``__pycache__`` (cached), or copy it without any
    bytecode into ``workdir`` (source)."""
    if case == "source":
        copy = workdir / "src" / "edged"
        shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        return Bytecode("source", copy, *fresh_modules(copy),
                        env={"PYTHONDONTWRITEBYTECODE": "1"})
    if case != "cached":
        raise ValueError(f"bytecode case {case!r}: expected 'cached' or 'source'")
    # py_compile writes whatever PYTHONDONTWRITEBYTECODE says; a read-only install fails
    # here and the report says how many modules are left without bytecode.
    with contextlib.redirect_stdout(sys.stderr):
        compileall.compile_dir(PACKAGE, quiet=1)
    # Python reads the variable as "set" only when non-empty: "" is unset for the daemon.
    return Bytecode("cached", PACKAGE, *fresh_modules(PACKAGE),
                    env={"PYTHONDONTWRITEBYTECODE": ""})


# == the measurement =======================================================================

def _wait_startup_ms(d: Daemon, timeout: float = 10.0) -> float:
    """The daemon's ``startup_ms`` once its ready line is in the log (written just after
    the first OK health reply); nan if it never comes."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ms = d.startup_ms()
        if ms is not None:
            return ms
        time.sleep(0.02)
    return float("nan")


def measure(config: Path, workdir: Path, *, startups: int = 5, idle_seconds: float = 30.0,
            settle_seconds: float = 2.0, bytecode: str = "cached",
            also_idle: dict[str, int] | None = None,
            log: Callable[[str], None] = print) -> dict[str, Any]:
    """Start a daemon on ``config`` ``startups`` times, then measure the last one's idle
    CPU (beside ``also_idle``'s processes, in the same window) and RSS."""
    if startups < 1:
        raise ValueError(f"startups must be at least 1, not {startups}")
    variants = first_variants(config)
    bc = prepare_bytecode(bytecode, workdir)
    log(bc.describe())
    ready: list[float] = []
    startup: list[float] = []
    per_start: list[float] = []  # RSS of each start: threads racing for malloc arenas
    d: Daemon | None = None
    try:
        for i in range(startups):
            if d is not None:
                d.stop()
            d = Daemon(config, workdir / f"start-{i}", env=bc.env, metrics=True, wait=False,
                       cwd=bc.package.parent)
            ready.append(d.wait_ready())
            startup.append(_wait_startup_ms(d))
            time.sleep(RSS_SETTLE_S)  # pacing: the loaded models' trim and first ticks
            per_start.append(rss_mb(d.pid)["rss_mb"])
            log(f"[startup] {config.name}: healthy after {ready[-1] * 1000:.0f} ms "
                f"(daemon log startup_ms={startup[-1]:.0f}); RSS {per_start[-1]:.1f} MB")
        assert d is not None
        time.sleep(settle_seconds)  # pacing: start-up's tail work is not idle CPU
        pids = {"default": d.pid, **(also_idle or {})}
        log(f"[idle] CPU of {', '.join(pids)} for {idle_seconds:g} s")
        idle = idle_cpu(pids, idle_seconds)
        for k, v in idle.items():
            log(f"[idle] {k}: {v['cpu_pct']:.3f} % ({v['top_threads'][:3]})")
        dr = rss_mb(d.pid)
    finally:
        if d is not None:
            d.stop()
    # Start to start the same config's RSS differs by up to ~15 MB here (which loading
    # thread's allocations land in which arena), so the median over the starts is the figure.
    rss: dict[str, Any] = {"models": [str(v.path) for v in variants],
                           "daemon_rss_mb": statistics.median(per_start),
                           "daemon_rss_mb_per_start": per_start,
                           "daemon_rss_mb_after_idle": dr["rss_mb"], "daemon_uss_mb": dr["uss_mb"]}
    skipped = [f"{v.model} ({v.backend})" for v in variants if v.backend != "onnxruntime"]
    if len(skipped) < len(variants):
        bare = bare_sessions_rss(variants)
        rss.update(bare_rss_warm_mb=bare["rss_warm_mb"], bare_uss_warm_mb=bare["uss_warm_mb"],
                   delta_mb=rss["daemon_rss_mb"] - bare["rss_warm_mb"])
    if skipped:
        rss["not_in_bare"] = skipped
        log(f"[rss] the bare process opens ONNX Runtime sessions only; not in it: "
            f"{', '.join(skipped)}")
    log(f"[rss] daemon {rss['daemon_rss_mb']:.1f} MB (median of {len(per_start)} starts, "
        f"{min(per_start):.1f}-{max(per_start):.1f}), bare "
        f"{rss.get('bare_rss_warm_mb', 0):.1f} MB")
    return {"config": str(config),
            "bytecode": {**asdict(bc), "package": str(bc.package), "text": bc.describe()},
            "startup": {"ready_s": ready, "ready_s_median": statistics.median(ready),
                        "startup_ms": startup, "startup_ms_median": statistics.median(startup)},
            "idle": idle, "rss": {"default": rss}}


# == the report ============================================================================

def _fmt(x: float | None, nd: int = 2) -> str:
    return "-" if x is None or x != x else f"{x:.{nd}f}"


def _starts(m: dict[str, Any]) -> str:
    per = m.get("daemon_rss_mb_per_start") or []
    return (f"median of {len(per)} starts, {min(per):.1f}-{max(per):.1f}" if per
            else "one start")


def _met(ok: bool) -> str:
    return "yes" if ok else "**no**"


def markdown(fp: dict[str, Any], labels: dict[str, str] | None = None) -> str:
    """The footprint table; ``labels`` names the measured processes (idle and rss keys)."""
    labels = {"default": Path(fp["config"]).name, **(labels or {})}
    st = fp["startup"]
    lines = [
        fp["bytecode"]["text"], "",
        "| footprint | value | target | met |", "|---|---|---|---|",
        f"| start → healthy, {labels['default']} (Popen → first OK health; median of "
        f"{len(st['ready_s'])}; bytecode {fp['bytecode']['case']}) | "
        f"{_fmt(st['ready_s_median'] * 1000, 0)} ms (daemon log startup_ms "
        f"{_fmt(st['startup_ms_median'], 0)}) | ≤ {TARGET_READY_S * 1000:.0f} ms | "
        f"{_met(st['ready_s_median'] <= TARGET_READY_S)} |"]
    for key, i in fp["idle"].items():
        top = ", ".join(f"{t['name']} {t['cpu_pct']:.2f}%" for t in i["top_threads"][:3])
        lines.append(f"| idle CPU, {labels.get(key, key)} ({i['seconds']:.0f} s, all "
                     f"{i['threads']} threads; top: {top or 'none'}) | {i['cpu_pct']:.3f} % | "
                     f"≤ {TARGET_IDLE_CPU_PCT:g} % | {_met(i['cpu_pct'] <= TARGET_IDLE_CPU_PCT)} |")
    for key, m in fp["rss"].items():
        if "delta_mb" not in m:
            lines.append(f"| RSS, {labels.get(key, key)}: daemon {_fmt(m['daemon_rss_mb'], 1)} "
                         "MB (no ONNX Runtime first variant to compare with) | | | |")
            continue
        lines.append(
            f"| RSS, {labels.get(key, key)}: daemon {_fmt(m['daemon_rss_mb'], 1)} MB "
            f"({_starts(m)}) vs bare "
            f"ORT sessions of the same first variants {_fmt(m['bare_rss_warm_mb'], 1)} MB "
            f"(one batch-1 run each) | +{_fmt(m['delta_mb'], 1)} MB | "
            f"≤ +{TARGET_RSS_DELTA_MB:.0f} MB | {_met(m['delta_mb'] <= TARGET_RSS_DELTA_MB)} |")
    return "\n".join(lines)


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="edged-footprint-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def run(args: argparse.Namespace) -> int:
    if args.startups < 1 or args.idle_seconds <= 0:
        print("edged bench footprint: --startups must be >= 1 and --idle-seconds > 0",
              file=sys.stderr)
        return 2
    first_variants(args.config)  # a bad config raises ConfigError: said with its code
    info = machine_info()
    say_machine(info)
    with workdir() as wd:
        try:
            fp = measure(args.config, wd, startups=args.startups,
                         idle_seconds=args.idle_seconds, settle_seconds=args.settle_seconds,
                         bytecode=args.bytecode)
        except RuntimeError as e:  # the daemon exited or never became healthy: its log
            print(f"edged bench footprint: {str(e).splitlines()[0]}", file=sys.stderr)
            return 1
    print()
    print(markdown(fp))
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "footprint": fp}, indent=2,
                                        default=str) + "\n")
        print(f"wrote {args.json}")
    return 0
