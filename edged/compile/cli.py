"""``edged compile MODEL.onnx --out DIR``: build, validate, time and list the variants.

Each step writes artifacts with sidecars into DIR; validation and speed are measured
right after a step, through the daemon's own backends; the ladder
(``DIR/variants.toml``) is rewritten from every sidecar in DIR at the end.

Exit status: 0 when every step that ran succeeded and no variant was rejected; 1
when a step failed or a variant was rejected (unless ``--force``); 2 for bad usage.
A step that cannot run here (``tensorrt`` without TensorRT/GPU, ``int8`` without
calibration data) is reported as skipped and does not fail the run, unless it was
the only step asked for.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import Any

from edged.compile.options import (
    CALIB_METHODS,
    COST_MODELS,
    REDUCE_RANGE,
    TUNE_STRATEGIES,
    CompileOptions,
    OptionError,
    parse_ints,
    parse_precisions,
    parse_steps,
)
from edged.compile.steps import EXTRA_STEPS, STEP_NAMES

#: what ``edged compile --help`` says (the module docstring is for developers)
DESCRIPTION = """\
Build the variants of an ONNX model for this device (ONNX Runtime optimized, FP16, INT8,
OpenVINO, TVM, TensorRT), check each against the original on validation data, time it,
and write into --out: every artifact, variants.toml (the ladder, heaviest first) and
edged.toml (a config edged serve takes as it is: the model, its preprocessing, the
ladder and a governor).

Exit status: 0 when every step that ran succeeded; 1 when a step failed or a variant was
rejected (unless --force); 2 for bad usage. A step that cannot run here (tensorrt
without a GPU, int8 without calibration data) is skipped with a note.
"""

#: the compile extra's modules; without them the run stops with the pip command
NEEDS = ("onnx", "onnxconverter_common", "tqdm")


def add_parser(subparsers: Any) -> None:
    """Add the ``compile`` subcommand to an argparse subparsers object."""
    p = subparsers.add_parser(
        "compile", help="turn an ONNX model into a checked, timed ladder of variants",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    _arguments(p)
    p.set_defaults(func=run)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", type=Path, help="the trained fp32 ONNX model")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--steps", default="all", type=_parsed(parse_steps),
                   help=f"comma list of {', '.join(STEP_NAMES)}, or all (default); "
                        f"{', '.join(EXTRA_STEPS)} re-checks every artifact already in --out")
    p.add_argument("--name", help="variant name prefix (default: model file stem without -fp32)")
    p.add_argument("--val", type=Path,
                   help="validation data: .npz (x, y), .npy or image folder (default: what "
                        "the model.json beside MODEL names as \"validation\")")
    p.add_argument("--calib", type=Path,
                   help="INT8 calibration data: image folder, .npy or .npz (default: "
                        "model.json's \"calibration\", else the validation data; without "
                        "any, INT8 steps are skipped)")
    p.add_argument("--preprocess", type=Path,
                   help="model.json with the preprocessing for uint8 images (default: the "
                        "one beside --val, else beside MODEL; see docs)")
    p.add_argument("--postprocess", type=Path,
                   help="a detector's [postprocess] TOML: validate by mAP@0.5 on --val, a "
                        ".npz with images and boxes or a folder of photos with boxes.csv "
                        "(see docs/detection.md)")
    p.add_argument("--calib-method", default="minmax", choices=CALIB_METHODS,
                   help="how INT8 ranges are chosen from the calibration data (default minmax)")
    p.add_argument("--int8-reduce-range", default="auto", choices=REDUCE_RANGE,
                   help="7-bit INT8 weights; auto: on for an x86 CPU without VNNI, where "
                        "ORT's U8S8 kernels saturate; on: for a fleet of mixed CPUs "
                        "(docs/compile.md) (default auto)")
    p.add_argument("--calib-limit", type=int, default=512, help="max calibration samples")
    p.add_argument("--max-drop", type=float, default=2.0,
                   help="reject a variant losing more accuracy points than this (default 2)")
    p.add_argument("--force", action="store_true",
                   help="keep rejected variants (marked FORCED) and exit 0")
    p.add_argument("--max-batch", type=int, default=8, help="batch for throughput (default 8)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="CPU threads for ORT/TVM while measuring (default: all cores)")
    p.add_argument("--bench-runs", type=int, default=50, help="timed runs per figure")
    p.add_argument("--target", default="llvm",
                   help="TVM target: llvm (this CPU), aarch64 (cross), cuda, or a JSON dict")
    p.add_argument("--cc", help="C++ compiler for exporting the .so (aarch64 default: "
                                "aarch64-linux-gnu-g++)")
    p.add_argument("--batch-sizes", type=_parsed(parse_ints),
                   help="TVM static batch sizes, e.g. 1,2,4,8 (default: symbolic batch when "
                        "untuned; powers of 2 up to --max-batch when tuning)")
    p.add_argument("--tune-trials", type=int, default=0,
                   help="MetaSchedule trials per batch size (0 = no tuning)")
    p.add_argument("--tune-trials-per-task", type=int, help="cap per task")
    p.add_argument("--tuning-db", type=Path,
                   help="MetaSchedule JSON database dir, reused when present "
                        "(default DIR/tuning-db)")
    p.add_argument("--cost-model", default=None, choices=COST_MODELS,
                   help="default xgb when xgboost is installed, else random")
    p.add_argument("--tune-strategy", default="evolutionary", choices=TUNE_STRATEGIES,
                   help="MetaSchedule search (default evolutionary; replay-trace for a quick "
                        "smoke run)")
    p.add_argument("--trt-precisions", default="all", type=_parsed(parse_precisions),
                   help="TensorRT plans to build: comma list of fp32, fp16, int8, or all "
                        "(default)")
    p.add_argument("--relative-to", type=Path, default=None, metavar="DIR",
                   help="write variants.toml paths relative to this folder (default: --out; "
                        "edged.toml there is always relative to --out)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bars (they are drawn only on a terminal anyway)")


def _parsed(parse: Any) -> Any:
    """An argparse ``type`` from a parser raising ValueError (argparse then names the flag)."""
    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    convert.__name__ = parse.__name__
    return convert


def options_from(args: argparse.Namespace) -> CompileOptions:
    """The flags as ``CompileOptions`` (one field per flag); OptionError if bad."""
    given = vars(args)
    fields = {f.name for f in dataclasses.fields(CompileOptions)} & given.keys()
    progress = not args.no_progress and sys.stderr.isatty()  # bars only on a terminal
    return CompileOptions(**{k: given[k] for k in fields}, progress=progress)


def flag(option: str) -> str:
    """``max_batch`` -> ``--max-batch``; ``model`` -> ``MODEL``."""
    return "MODEL" if option == "model" else "--" + option.replace("_", "-")


def run(args: argparse.Namespace) -> int:
    """Run the requested steps, printing the report; see the module docstring."""
    missing = [m for m in NEEDS if importlib.util.find_spec(m) is None]
    if missing:
        print(f"edged compile: needs {', '.join(missing)}: install the compile extra "
              "(pip install 'edged[compile]'; add ,tvm for the TVM step)", file=sys.stderr)
        return 2
    try:
        opts = options_from(args)
    except OptionError as e:
        problem = re.sub(r"`(\w+)`", lambda m: flag(m[1]), e.problem)
        print(f"edged compile: {flag(e.option)}: {problem}", file=sys.stderr)
        return 2
    # A compile run imports ONNX, ORT and numpy: loaded only when a compile runs, not for
    # every `edged` command that builds this parser.
    from edged.compile.run import run as run_compile
    from edged.compile.sources import DataError

    try:
        return run_compile(opts, say=_say).exit_code
    except DataError as e:
        print(f"edged compile: {e}", file=sys.stderr)
        return 2


def _say(line: str) -> None:
    print(line, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="edged")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "compile":
        argv = ["compile", *argv]
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
