#!/usr/bin/env python3
"""Start-up time and RSS of a daemon serving a TVM variant, with the TVM runtime library
only (the default) and with the whole compiler library (TVM_USE_RUNTIME_LIB=0), in
interleaved rounds on this machine. Builds the digits model's dynamic library first.

    .venv/bin/python scripts/bench/bench_tvm_footprint.py --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from edged.backends.support.sidecar import sha256_file, write_sidecar  # noqa: E402
from edged.compile import tvm_build  # noqa: E402
from edged.compile.modelinfo import io_specs, tool_versions  # noqa: E402
from edged.testing.harness import Daemon, machine_info  # noqa: E402

MODEL = ROOT / "models" / "digits" / "cnn-fp32.onnx"


def build(d: Path) -> Path:
    choice = tvm_build.resolve_target("llvm", None, 2)
    lib = tvm_build.build_dynamic(MODEL, d / "digits.so", choice)
    ins, outs = io_specs(MODEL)
    write_sidecar(lib, {"source": {"path": str(MODEL), "sha256": sha256_file(MODEL)},
                        "backend": "tvm", "precision": "fp32", "target": choice.spec,
                        "batch_sizes": None, "inputs": ins, "outputs": outs,
                        "tools": tool_versions("tvm"), "sha256": sha256_file(lib)})
    return lib


def once(cfg: Path, work: Path, runtime_only: bool) -> tuple[float, float, bool]:
    env = {} if runtime_only else {"TVM_USE_RUNTIME_LIB": "0"}
    d = Daemon(cfg, work, env=env, wait=False)
    try:
        ready = d.wait_ready(120)
        rss = psutil.Process(d.pid).memory_info().rss / 2**20
        compiler = "libtvm_compiler" in Path(f"/proc/{d.pid}/maps").read_text()
    finally:
        d.stop()
    return ready, rss, compiler


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        lib = build(tmp)
        cfg = tmp / "edged.toml"
        cfg.write_text(f'[metrics]\nlisten = "off"\n[[models]]\nname = "digits"\n'
                       f'max_batch_size = 8\n[[models.variants]]\nname = "tvm"\n'
                       f'backend = "tvm"\npath = "{lib}"\n')
        res: dict[bool, list[tuple[float, float, bool]]] = {True: [], False: []}
        for k in range(a.rounds):
            for mode in (True, False):
                res[mode].append(once(cfg, tmp / f"r{k}-{mode}", mode))
    print(f"machine: {machine_info(ROOT)['cpu']}, load {machine_info(ROOT)['load_avg']}")
    print("| TVM library in the daemon | ready s (median) | RSS MiB (median) | compiler mapped |")
    print("|---|---|---|---|")
    for mode, label in ((True, "runtime only (default)"), (False, "compiler (before)")):
        r = res[mode]
        print(f"| {label} | {statistics.median(x[0] for x in r):.2f} | "
              f"{statistics.median(x[1] for x in r):.0f} | {any(x[2] for x in r)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
