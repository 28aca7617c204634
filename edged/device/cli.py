"""The options of ``edged device-check`` and ``edged isa-check``.

Why apart from the checks: ``edged``'s parser is built for every command, so this module
imports nothing but argparse; each command imports its engine (``edged.device.check``,
``edged.device.isa_check``) only when it runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def _at_least_one(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, not {n}")
    return n


def _positive(text: str) -> float:
    x = float(text)
    if not x > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, not {text}")
    return x


def add_parsers(subparsers: Any) -> None:
    add_device_check(subparsers)
    add_isa_check(subparsers)


def add_device_check(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "device-check", help="what this device can run, and how fast",
        description="What can this device run, how fast, and does it "
                    "run correctly? A missing runtime, GPU or model is a SKIP; exit 1 only "
                    "on a FAIL (docs/tensorrt.md, 'Check a device').")
    p.add_argument("--json", action="store_true", help="print one JSON document instead")
    p.add_argument("--model", action="append", default=None, metavar="[NAME=]PATH",
                   help="ONNX fp32 model to check (repeatable; default: the shipped digits "
                        "classifier, and MobileNetV2 where it was built for the benchmarks)")
    p.add_argument("--max-batch", type=_at_least_one, default=8,
                   help="max_batch_size of the daemon and of the TensorRT profiles")
    p.add_argument("--device", type=int, default=0, help="CUDA device index")
    p.add_argument("--seconds", type=_positive, default=3.0,
                   help="seconds of load for the p50 and again for the throughput")
    p.add_argument("--items", type=_at_least_one, default=64,
                   help="inputs compared with the reference")
    p.add_argument("--keep", type=Path, default=None,
                   help="keep plans, timing cache, configs and daemon logs in this directory")
    p.set_defaults(func=_device_check)


def add_isa_check(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "isa-check", help="check --verify and the model tests on an emulated older "
        "x86-64 CPU",
        description="Does edged hold on an x86-64 CPU without AVX-512? Checked here, under "
                    "qemu-x86_64 emulation, and natively for comparison; exit 1 on a FAIL, "
                    "2 when it cannot run (docs/operations.md).")
    p.add_argument("--cpu", action="append", metavar="MODEL",
                   help="qemu CPU model (repeatable; default Haswell-v4)")
    p.add_argument("--tests", nargs="+", default=None, metavar="FILE",
                   help="in-process test files to run under emulation (default: the "
                        "verify and model tests)")
    p.add_argument("--quick", action="store_true", help="the verify step only, no tests")
    p.add_argument("--python", default=sys.executable,
                   help="the Python (with edged's dependencies) to emulate")
    p.add_argument("--timeout", type=float, default=1200.0, help="seconds per step")
    p.add_argument("--no-install", action="store_true",
                   help="do not apt-get install qemu-user-static when it is missing")
    p.add_argument("--json", metavar="FILE", help="also write the results here")
    p.set_defaults(func=_isa_check)


def _device_check(args: argparse.Namespace) -> int:
    from edged.device.check import run

    return run(args)


def _isa_check(args: argparse.Namespace) -> int:
    from edged.device.isa_check import DEFAULT_TESTS, run

    args.tests = args.tests or list(DEFAULT_TESTS)
    return run(args)
