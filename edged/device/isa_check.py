"""``edged isa-check``: does edged hold on an x86-64 CPU without AVX-512? Checked under emulation.

ONNX Runtime picks its kernels by CPUID: AVX2-only, AVX-512 and AVX-512 VNNI CPUs run
different INT8 code that rounds differently, so a variant that passes its swap check on
one CPU may not on another. This runs edged's in-process work under ``qemu-x86_64``
user-mode emulation (``edged.device.qemu``) with a CPU model that has AVX2 + FMA and no
AVX-512 (default ``Haswell-v4``), and natively for comparison:

1. ``edged check --verify --json`` (the real swap check of every variant against the
   model's reference computed on the emulated CPU, ``edged.device.go_live``) on
   ``config.toml`` and on the trained detector ``models/digits-det``;
2. evidence that the emulated CPU really takes other kernel paths: its INT8 variants'
   distance from the build machine's recorded outputs must differ from the native
   run's when this CPU has AVX-512 and the emulated one has not;
3. the in-process model test files (no daemons: qemu-user runs a child process
   natively, so daemon tests would not be emulated) with pytest.

It needs an edged checkout (its ``config.toml``, models and tests). qemu's TCG emulates
AVX2 but not AVX-512: a CPU model with AVX-512 (``Cascadelake-Server``) is SKIPped with
that reason; the native run stands in for AVX-512 VNNI when this CPU has it. Everything
runs niced. Prints a PASS/FAIL summary per CPU model; exits 1 on a FAIL, 2 when it
cannot run. ``scripts/ops/isa-check`` is the same command.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edged.device import qemu
from edged.testing.harness import ROOT

DEFAULT_CPUS = ("Haswell-v4",)
DEFAULT_TESTS = ("tests/test_verify.py", "tests/test_digits_model.py",
                 "tests/test_person_model.py", "tests/test_digits_det_model.py")
CPU_PROBE = ("import json; from edged.device.go_live import simd_features; "
             "print(json.dumps(simd_features()))")
DET = ROOT / "models" / "digits-det"


def det_config() -> str:
    """``models/digits-det`` as tests/test_detect_yolo_daemon.py serves it."""
    variants = "".join(f'[[models.variants]]\nname = "{v}"\nbackend = "onnxruntime"\n'
                       f'path = "{DET / (v + ".onnx")}"\n'
                       for v in ("det-fp32", "det-int8", "det128-fp32"))
    # the lowest rung is a deliberately less accurate one (the model's card): its own limits
    variants += "[models.variants.verify]\nmin_precision = 0.7\nmin_recall = 0.7\n"
    return """\
# models/digits-det as tests/test_detect_yolo_daemon.py serves it
[metrics]
listen = "off"
[[models]]
name = "digits-det"
max_batch_size = 8
[models.preprocess]
color = "rgb"
width = 160
height = 160
scale = 0.00392156862745098
layout = "NCHW"
dtype = "float32"
[models.postprocess]
kind = "detect"
decoder = "yolov8"
resize = "letterbox"
conf = 0.3
iou = 0.5
""" + variants


@dataclass
class Step:
    name: str
    status: str  # PASS, FAIL, SKIP
    detail: str = ""
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # the child's user + system time: less sensitive to load


@dataclass
class CpuRun:
    cpu: str
    features: list[str] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    verify: dict[str, Any] = field(default_factory=dict)  # config name -> check --verify JSON
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(s.status != "FAIL" for s in self.steps)

    @property
    def cpu_seconds(self) -> float:
        return sum(s.cpu_seconds for s in self.steps)

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "ok": self.ok, "cpu_seconds": self.cpu_seconds,
                "steps": [s.__dict__ for s in self.steps]}


def _run(argv: list[str], cwd: Path, timeout: float) -> qemu.Ran:
    return qemu.run(argv, cwd, timeout, first_on_path=ROOT)


def verify_configs(prefix: list[str], python: str, configs: dict[str, Path], cwd: Path,
                   timeout: float, out: CpuRun) -> None:
    """Step 1: ``edged check --verify --json`` per config."""
    for label, cfg in configs.items():
        r = _run([*prefix, python, "-m", "edged", "check", "--verify", "--json", str(cfg)],
                 cwd, timeout)
        try:
            doc = json.loads(r.stdout)
        except json.JSONDecodeError:
            out.steps.append(Step(f"verify {label}", "FAIL",
                                  f"exit {r.rc}, no report: {r.stdout.strip()[-300:]}",
                                  r.seconds, r.cpu_seconds))
            continue
        out.verify[label] = doc
        bad = [v for v in doc["variants"] if not v["ok"]]
        detail = (f"{len(doc['variants'])} variants go live" if not bad else
                  "; ".join(f"{v['model']}/{v['variant']}: {v['error']}" for v in bad))
        out.steps.append(Step(f"verify {label}", "FAIL" if bad or r.rc else "PASS", detail,
                              r.seconds, r.cpu_seconds))


def drift(doc: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Each INT8 variant's distance from the build machine's outputs, by output."""
    return {f"{v['model']}/{v['variant']}": {k: m for k, m in v["measures"].items()
                                               if k.endswith(".vs_build_machine")}
            for v in doc["variants"] if v.get("precision") == "int8"}


def kernel_path(native: CpuRun, emulated: CpuRun) -> Step:
    """Step 2: do the emulated CPU's INT8 results differ from this CPU's?"""
    pairs = [(label, drift(native.verify[label]), drift(doc))
             for label, doc in emulated.verify.items() if label in native.verify]
    differ = [f"{name} {k}: native {n[name][k]:.3g}, emulated {e[name][k]:.3g}"
              for _, n, e in pairs for name in e if name in n
              for k in e[name] if k in n[name] and n[name][k] != e[name][k]]
    host_avx512 = "AVX512F" in native.features
    if differ:
        return Step("int8 kernels differ from native", "PASS", "; ".join(differ))
    if host_avx512 and "AVX512F" not in emulated.features:
        return Step("int8 kernels differ from native", "FAIL",
                    "every INT8 variant computes exactly what this AVX-512 CPU does: ONNX "
                    "Runtime did not take another kernel path under emulation")
    return Step("int8 kernels differ from native", "SKIP",
                "same results as native (this CPU has the same ISA as the emulated one)")


def run_tests(prefix: list[str], python: str, tests: list[str], timeout: float,
              out: CpuRun) -> None:
    """Step 3: the in-process test files under the emulated CPU."""
    # pytest-timeout's per-test limit is for native speed: emulation is 10-100x slower
    r = _run([*prefix, python, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider",
              "-o", f"timeout={int(timeout)}", *tests], ROOT, timeout)
    tail = [ln for ln in r.stdout.splitlines() if ln.strip()]
    summary = tail[-1].strip("= ") if tail else f"exit {r.rc}, no output"
    if r.rc:
        failed = [ln for ln in tail if ln.startswith(("FAILED", "ERROR"))]
        summary = "; ".join([*failed[:5], summary])
    out.steps.append(Step(f"tests ({len(tests)} files)", "FAIL" if r.rc else "PASS", summary,
                          r.seconds, r.cpu_seconds))


def probe(prefix: list[str], python: str, out: CpuRun) -> list[str]:
    """The features the emulated process sees; returns those qemu dropped."""
    r = _run([*prefix, python, "-c", CPU_PROBE], ROOT, 300)
    if r.rc == 0:
        out.features = json.loads(r.stdout)["features"]
    return r.dropped


def check_cpu(qemu_bin: str, cpu: str, args: argparse.Namespace, configs: dict[str, Path],
              work: Path, native: CpuRun) -> CpuRun:
    """The three steps under one emulated CPU model (SKIP when qemu cannot emulate it)."""
    out = CpuRun(cpu)
    t0 = time.monotonic()
    prefix = [qemu_bin, "-cpu", cpu]
    dropped = probe(prefix, args.python, out)
    avx512 = [f for f in dropped if "avx512" in f]
    if avx512:
        out.steps.append(Step("emulation", "SKIP",
                              f"qemu's TCG cannot emulate AVX-512 (drops {', '.join(avx512)}); "
                              "this model would run AVX2 kernels. The native run covers "
                              "AVX-512 when this CPU has it"))
        return out
    if not out.features:
        out.steps.append(Step("emulation", "FAIL", f"python does not start under {cpu}"))
        return out
    out.steps.append(Step("emulation", "PASS", "sees " + " ".join(out.features)))
    verify_configs(prefix, args.python, configs, work, args.timeout, out)
    out.steps.append(kernel_path(native, out))
    if not args.quick:
        run_tests(prefix, args.python, args.tests, args.timeout, out)
    out.seconds = time.monotonic() - t0
    return out


def report(runs: list[CpuRun]) -> None:
    for r in runs:
        print(f"\n== {r.cpu}: {'PASS' if r.ok else 'FAIL'} in {r.seconds:.0f} s, CPU "
              f"{r.cpu_seconds:.0f} s ({' '.join(r.features) or 'features unknown'})")
        for s in r.steps:
            took = f" [{s.seconds:.0f} s, CPU {s.cpu_seconds:.0f} s]" if s.seconds else ""
            print(f"  {s.status:<4} {s.name}{took}: {s.detail}")
        for label, doc in r.verify.items():
            for v in doc["variants"]:
                ms = " ".join(f"{k}={m:.4g}" for k, m in v["measures"].items())
                print(f"       {label} {v['model']}/{v['variant']} ({v['role']}, "
                      f"{v['precision'] or '-'}): {ms or v['error']}")


def cannot_run(install: bool) -> tuple[str | None, str]:
    """The qemu binary, or why this machine cannot run the check (exit status 2)."""
    if platform.machine() != "x86_64":
        return None, (f"this emulates x86-64 CPUs on an x86-64 host; this is "
                      f"{platform.machine()}")
    if not (ROOT / "config.toml").is_file() or not (ROOT / "tests").is_dir():
        return None, (f"needs an edged checkout (config.toml, models/ and tests/ beside "
                      f"edged/); {ROOT} is not one")
    found = qemu.find_qemu(install=install)
    if found is None:
        return None, ("qemu-x86_64 is missing: install Debian's qemu-user-static "
                      "(sudo apt-get install qemu-user-static)")
    return found, ""


def run(args: argparse.Namespace) -> int:
    """The native run, then each ``--cpu`` model; 0 PASS, 1 FAIL, 2 cannot run here."""
    qemu_bin, why = cannot_run(install=not args.no_install)
    if qemu_bin is None:
        print(f"isa-check: {why}", file=sys.stderr)
        return 2
    # SIGTERM (a test's timeout, a CI cancel) unwinds like Ctrl-C: subprocess.run then
    # kills the emulated child instead of leaving it running.
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        return _check_all(qemu_bin, args)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _check_all(qemu_bin: str, args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="edged-isa-") as tmp:
        work = Path(tmp)
        (work / "digits-det.toml").write_text(det_config())
        configs = {"config.toml": ROOT / "config.toml", "digits-det": work / "digits-det.toml"}
        native = CpuRun("native")
        probe([], args.python, native)
        verify_configs([], args.python, configs, work, args.timeout, native)
        native.seconds = time.monotonic() - t0
        runs = [native] + [check_cpu(qemu_bin, cpu, args, configs, work, native)
                           for cpu in args.cpu or DEFAULT_CPUS]
    report(runs)
    total = time.monotonic() - t0
    ok = all(r.ok for r in runs)
    print(f"\nisa-check: {'PASS' if ok else 'FAIL'} in {total:.0f} s "
          f"({', '.join(f'{r.cpu} {r.seconds:.0f} s' for r in runs[1:])}; load "
          f"{os.getloadavg()[0]:.1f})")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"ok": ok, "seconds": total, "runs": [r.to_json() for r in runs]}, indent=2))
    return 0 if ok else 1
