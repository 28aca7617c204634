"""``edged compile MODEL.onnx --out DIR``: build, validate, time and list the variants.

Why one command with steps: an ML engineer wants "everything for this device" in one
go, but also to redo one step (a new calibration set, a longer tuning run) without
rebuilding the rest. Each step writes artifacts with sidecars into DIR; validation
and speed are measured right after a step, through the daemon's own backends; the
ladder (``DIR/variants.toml``) is rewritten from every sidecar in DIR at the end.

Exit status: 0 when every step that ran succeeded and no variant was rejected; 1
when a step failed or a variant was rejected (unless ``--force``); 2 for bad usage.
A step that cannot run here (``tensorrt`` without TensorRT/GPU, ``int8`` without
calibration data) is reported as skipped and does not fail the run, unless it was
the only step asked for.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STEPS = ("ort-opt", "fp16", "int8", "dynamic-int8", "tvm", "tensorrt")
EXTRA_STEPS = ("validate",)


def add_parser(subparsers: Any) -> None:
    """Add the ``compile`` subcommand to an argparse subparsers object."""
    p = subparsers.add_parser(
        "compile", help="turn an ONNX model into validated, timed variants",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _arguments(p)
    p.set_defaults(func=run)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", type=Path, help="the trained fp32 ONNX model")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--steps", default="all",
                   help=f"comma list of {', '.join(STEPS)}, or all (default); "
                        "'validate' re-checks every artifact already in --out")
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
    p.add_argument("--calib-method", default="minmax", choices=("minmax", "entropy", "percentile"))
    p.add_argument("--int8-reduce-range", default="auto", choices=("auto", "on", "off"),
                   help="7-bit INT8 weights; auto: on for an x86 CPU without VNNI, where "
                        "ORT's U8S8 kernels saturate (default auto)")
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
    p.add_argument("--batch-sizes", help="TVM static batch sizes, e.g. 1,2,4,8 (default: "
                                         "symbolic batch when untuned; powers of 2 up to "
                                         "--max-batch when tuning)")
    p.add_argument("--tune-trials", type=int, default=0,
                   help="MetaSchedule trials per batch size (0 = no tuning)")
    p.add_argument("--tune-trials-per-task", type=int, help="cap per task")
    p.add_argument("--tuning-db", type=Path,
                   help="MetaSchedule JSON database dir, reused when present "
                        "(default DIR/tuning-db)")
    p.add_argument("--cost-model", default=None, choices=("xgb", "random"),
                   help="default xgb when xgboost is installed, else random")
    p.add_argument("--tune-strategy", default="evolutionary",
                   choices=("evolutionary", "replay-trace"))
    p.add_argument("--trt-precisions", default="all", type=_trt_precisions,
                   help="TensorRT plans to build: comma list of fp32, fp16, int8, or all "
                        "(default)")
    p.add_argument("--relative-to", type=Path, default=Path("."),
                   help="write variants.toml paths relative to this folder (default: cwd)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def _trt_precisions(text: str) -> list[str]:
    from edged.compile.tensorrt_plans import parse_precisions

    try:
        return parse_precisions(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


@dataclass
class Context:
    args: argparse.Namespace
    src: Path
    name: str
    out: Path
    inputs: list[dict[str, Any]]
    outputs: list[dict[str, Any]]
    sha: str
    val: Any = None  # data.Dataset
    calib: Any = None
    ref_out: Any = None  # original model's outputs on val
    detect: Any = None  # detect_val.DetectionCheck: validate by mAP instead
    failures: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)

    @property
    def progress(self) -> bool:
        return not self.args.no_progress


def say(msg: str) -> None:
    print(msg, flush=True)


def parse_steps(text: str) -> list[str]:
    if text.strip() == "all":
        return list(STEPS)
    steps = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in steps if s not in STEPS + EXTRA_STEPS + ("all",)]
    if bad:
        raise ValueError(f"unknown step(s) {', '.join(bad)}; known: {', '.join(STEPS)}, "
                         "validate, all")
    if "all" in steps:
        steps = [*STEPS, *[s for s in steps if s in EXTRA_STEPS]]
    return steps


def _batch_sizes(text: str | None, max_batch: int) -> list[int] | None:
    if not text:
        return None
    sizes = sorted({int(s) for s in text.split(",") if s.strip()})
    if not sizes or sizes[0] < 1:
        raise ValueError(f"--batch-sizes {text!r}: need positive integers")
    return sizes


def _powers(max_batch: int) -> list[int]:
    out, b = [], 1
    while b < max_batch:
        out.append(b)
        b *= 2
    return [*out, max_batch]


def _base_meta(ctx: Context, backend: str, precision: str, step: str) -> dict[str, Any]:
    from edged.compile.modelinfo import tool_versions

    tools = ("onnxruntime", "onnx", "onnxconverter-common") if backend == "onnxruntime" \
        else ("tvm", "tvm-ffi", "onnx")
    return {
        "source": {"path": str(ctx.src), "sha256": ctx.sha},
        "backend": backend, "precision": precision, "step": step,
        "inputs": ctx.inputs, "outputs": ctx.outputs, "tools": tool_versions(*tools),
    }


# -- steps -----------------------------------------------------------------------------

def step_ort(ctx: Context, step: str) -> list[Path]:
    from edged.backends.sidecar import sha256_file, write_sidecar
    from edged.compile import ort_steps

    out = ctx.out
    if step == "ort-opt":
        path = ort_steps.optimize(ctx.src, out / f"{ctx.name}-fp32-opt.onnx")
        precision, target = "fp32", {"kind": "cpu", "graph_optimization": "extended"}
        options: dict[str, Any] = {}
    elif step == "fp16":
        path = ort_steps.to_fp16(ctx.src, out / f"{ctx.name}-fp16.onnx")
        precision, target, options = "fp16", {"kind": "any"}, {}
    elif step == "int8":
        if ctx.calib is None:
            raise _Skip("no calibration data: pass --calib or --val, or name it in model.json")
        choice = ctx.args.int8_reduce_range
        reduce = choice == "on" or (choice == "auto" and ort_steps.lacks_vnni())
        if choice == "auto" and reduce:
            say("int8: this CPU has no VNNI (U8S8 would saturate): 7-bit weights "
                "(--int8-reduce-range off to override)")
        path = ort_steps.to_int8_static(
            ctx.src, out / f"{ctx.name}-int8.onnx", ctx.inputs[0]["name"], ctx.calib.x,
            method=ctx.args.calib_method, progress=ctx.progress, reduce_range=reduce,
            op_types=["Conv"] if ctx.detect is not None else None)
        precision = "int8"
        bits = "7-bit (reduce_range)" if reduce else "S8"
        scope = ", Conv only (decode stays float)" if ctx.detect is not None else ""
        target = {"kind": "cpu", "quantization": "static QDQ, U8 activations, per-channel "
                  f"{bits} weights, {ctx.args.calib_method}{scope}",
                  "calibration": ctx.calib.source,
                  "reduce_range": reduce}
        options = {}
    else:
        path = ort_steps.to_int8_dynamic(ctx.src, out / f"{ctx.name}-dynint8.onnx")
        precision, target, options = "int8-dynamic", {"kind": "cpu"}, {}
    meta = _base_meta(ctx, "onnxruntime", precision, step)
    meta.update(name=path.stem, target=target, batch_sizes=None, options=options,
                sha256=sha256_file(path))
    write_sidecar(path, meta)
    return [path]


def step_tvm(ctx: Context) -> list[Path]:
    from edged.backends.sidecar import sha256_file, write_sidecar
    from edged.compile import tvm_build, tvm_tune

    a = ctx.args
    choice = tvm_build.resolve_target(a.target, a.cc, a.threads)
    sizes = _batch_sizes(a.batch_sizes, a.max_batch)
    made: list[Path] = []
    label = f"{ctx.name}-tvm-{choice.name}"
    t0 = time.monotonic()
    # Untuned: one library, symbolic batch when the model has one, else per-size.
    if sizes is None and tvm_build.has_symbolic_batch(ctx.src):
        path = ctx.out / f"{label}.so"
        say(f"tvm: compiling {path.name} (symbolic batch, untuned)")
        tvm_build.build_dynamic(ctx.src, path, choice)
        meta = _base_meta(ctx, "tvm", "fp32", "tvm")
        meta.update(name=label, target=choice.spec, batch_sizes=None, sha256=sha256_file(path),
                    options={"threads": a.threads}, build_seconds=round(time.monotonic() - t0, 2))
        write_sidecar(path, meta)
        made.append(path)
    elif a.tune_trials <= 0:
        made.append(_static_set(ctx, choice, label, sizes or _powers(a.max_batch), None))
    if a.tune_trials > 0:
        cost = a.cost_model or ("xgb" if _has_xgboost() else "random")
        settings = tvm_tune.TuneSettings(
            trials=a.tune_trials, trials_per_task=a.tune_trials_per_task, cost_model=cost,
            strategy=a.tune_strategy, progress=ctx.progress)
        made.append(_static_set(ctx, choice, f"{label}-tuned", sizes or _powers(a.max_batch),
                                settings))
    return made


def _static_set(ctx: Context, choice: Any, label: str, sizes: list[int], tune: Any) -> Path:
    """Per-batch-size libraries ``LABEL.b<N>.so`` described by ``LABEL.so.json``."""
    from tqdm import tqdm

    from edged.backends.sidecar import sha256_file, write_sidecar
    from edged.compile import tvm_build

    a = ctx.args
    db_dir = (a.tuning_db or ctx.out / "tuning-db") if tune else None
    t0 = time.monotonic()
    files: dict[str, Any] = {}
    tuning: dict[str, Any] = {}
    for b in tqdm(sizes, desc=f"tvm: {label}", unit="lib", disable=not ctx.progress):
        lib = ctx.out / f"{label}.b{b}.so"
        _, summary = tvm_build.build_static(ctx.src, lib, choice, b, db_dir, tune)
        files[str(b)] = {"path": lib.name, "sha256": sha256_file(lib)}
        if summary:
            tuning[str(b)] = summary
            say(f"tvm: b={b}: {summary['tasks']} tasks, {summary['tasks_reused']} from the "
                f"database, {summary['tasks_tuned']} tuned ({summary['trials']} trials)")
    path = ctx.out / f"{label}.so"
    meta = _base_meta(ctx, "tvm", "fp32", "tvm")
    meta.update(name=label, target=choice.spec, batch_sizes=sizes, files=files,
                options={"threads": a.threads}, build_seconds=round(time.monotonic() - t0, 2))
    if tune:
        meta["tuning"] = {"trials_per_batch_size": tune.trials, "cost_model": tune.cost_model,
                          "strategy": tune.strategy, "database": str(db_dir), "runs": tuning}
    write_sidecar(path, meta)
    return path


def _has_xgboost() -> bool:
    import importlib.util

    return importlib.util.find_spec("xgboost") is not None


def step_tensorrt(ctx: Context) -> list[Path]:
    """fp32, fp16 and int8 plans for this GPU (``edged.compile.tensorrt_plans``)."""
    from edged.compile import tensorrt as trt_build
    from edged.compile.tensorrt_plans import build_plans

    precisions = getattr(ctx.args, "trt_precisions", None) or ["fp32", "fp16", "int8"]
    try:
        res = build_plans(ctx.src, ctx.out, ctx.name, precisions=precisions,
                          max_batch=ctx.args.max_batch, input_name=ctx.inputs[0]["name"],
                          calib=ctx.calib, calib_method=ctx.args.calib_method,
                          progress=ctx.progress)
    except trt_build.GpuUnavailable as e:
        raise _Skip(str(e)) from e
    for precision, why in res.skipped.items():
        say(f"tensorrt {precision}: skipped — {why}")
    for precision, err in res.failed.items():
        ctx.failures.append(f"tensorrt {precision}")
        say(f"tensorrt {precision}: FAILED — {err}")
    return res.made


class _Skip(Exception):
    """A step that cannot run on this machine (not an error of the model)."""


# -- validation and speed ----------------------------------------------------------------

def reference(ctx: Context) -> None:
    """Run the original model on the validation set; record its figures in source.json."""
    import json

    from edged.compile import bench, ladder
    from edged.compile.runners import open_variant
    from edged.compile.validate import compare, predict

    a = ctx.args
    be = open_variant("onnxruntime", ctx.src, a.threads, a.max_batch)
    try:
        if ctx.detect is not None:
            v = ctx.detect.validate(be, a.max_batch)
        else:
            ctx.ref_out = predict(be, ctx.val.x, a.max_batch)
            v = compare(ctx.ref_out, ctx.ref_out, ctx.val.y, a.max_drop)
        s = bench.measure(be, a.max_batch, a.bench_runs, threads=a.threads)
    finally:
        be.close()
    doc = {"name": f"{ctx.name}-fp32", "backend": "onnxruntime", "precision": "fp32",
           "source": {"path": str(ctx.src.resolve()), "sha256": ctx.sha},
           "validation": {**v.to_json(), "data": ctx.val.source}, "speed": s.to_json()}
    (ctx.out / ladder.SOURCE_RECORD).write_text(json.dumps(doc, indent=2) + "\n")
    say(f"original {ctx.src.name}: {v.summary()}; {s.summary()}")


def check_variant(ctx: Context, path: Path) -> None:
    """Validate and time one artifact, record the results, move it aside if rejected."""
    from edged.backends.sidecar import read_sidecar, update_sidecar
    from edged.compile import bench
    from edged.compile.runners import open_variant
    from edged.compile.validate import compare, predict

    a = ctx.args
    meta = read_sidecar(path) or {}
    backend = meta.get("backend", "onnxruntime")
    if backend == "tvm":
        from edged.compile.tvm_build import TargetChoice

        if not TargetChoice(meta.get("target") or {}, "").runs_here:
            say(f"{path.name}: not validated or timed here (built for another machine)")
            return
    be = open_variant(backend, path, a.threads, a.max_batch)
    try:
        if ctx.detect is not None:
            v = ctx.detect.validate(be, a.max_batch)
        else:
            out = predict(be, ctx.val.x, a.max_batch)
            v = compare(ctx.ref_out, out, ctx.val.y if not ctx.val.synthetic else None,
                        a.max_drop)
            if ctx.val.synthetic:  # random inputs: agreement is no accuracy proxy
                v.passed, v.drop_pct = bool(v.max_abs_diff != float("inf")), 0.0
        s = bench.measure(be, a.max_batch, a.bench_runs, threads=a.threads)
        if v.passed and ctx.detect is None:
            _record_golden(be, path, ctx.val.x, meta.get("precision") or "fp32")
    finally:
        be.close()
    fields: dict[str, Any] = {"validation": {**v.to_json(), "data": ctx.val.source},
                              "speed": s.to_json()}
    if not v.passed:
        if a.force:
            fields["forced"] = True
            say(f"{path.name}: FAILED validation, kept because of --force: {v.summary()}")
            update_sidecar(path, **fields)
            return
        update_sidecar(path, **fields)
        dest = _move_aside(path, meta)
        ctx.rejected.append(path.name)
        say(f"{path.name}: REJECTED: loses {v.drop_pct:.2f} points (> --max-drop "
            f"{a.max_drop}); {v.summary()}; moved to {dest}")
        return
    update_sidecar(path, **fields)
    say(f"{path.name}: ok: {v.summary()}; {s.summary()}")


def _record_golden(be: Any, path: Path, x: Any, precision: str) -> None:
    """A few validation inputs and this artifact's own outputs on them, beside it: what
    the daemon checks a swap candidate against (edged.golden)."""
    from edged.backends.base import run_batch
    from edged.golden import MAX_SAMPLES, write_golden

    feeds = {be.inputs[0].name: x[:MAX_SAMPLES]}
    if write_golden(path, feeds, run_batch(be, feeds), precision) is None:
        say(f"{path.name}: golden inputs too large to record; swaps check the contract only")


def _move_aside(path: Path, meta: dict[str, Any]) -> Path:
    from edged.backends.sidecar import sidecar_path

    dest = path.parent / "rejected"
    dest.mkdir(exist_ok=True)
    members = [path, sidecar_path(path)]
    members += [path.parent / f["path"] for f in (meta.get("files") or {}).values()]
    for m in members:
        if m.exists():
            shutil.move(str(m), str(dest / m.name))
    return dest


def _existing_artifacts(out: Path) -> list[Path]:
    from edged.compile import ladder

    return [e["_artifact"] for e in ladder.collect(out) if not e.get("_source")]


# -- main --------------------------------------------------------------------------------

def _load_data(ctx: Context) -> None:
    """Validation and calibration data: the flags, else what ``model.json`` names."""
    from edged.compile import modeljson
    from edged.compile.data import Dataset, Preprocess, load_dataset

    a = ctx.args
    card_path = modeljson.beside(ctx.src)
    card = modeljson.read(card_path) if card_path else None
    val = a.val or (card.validation if card else None)
    calib = a.calib or (card.calibration if card else None) or val
    pre_json = a.preprocess
    if pre_json is None and val and (val.parent / modeljson.NAME).exists():
        pre_json = val.parent / modeljson.NAME
    pre = Preprocess.from_json(pre_json or card_path) if (pre_json or card_path) else None
    if a.postprocess:
        _load_detection(ctx, pre)
        return
    if val:
        ctx.val = load_dataset(val, ctx.inputs[0], pre)
        if not a.val:
            say(f"validation data: {val} (named by {card_path})")
    else:
        import numpy as np

        shape = [64 if i == 0 else max(d, 1) for i, d in enumerate(ctx.inputs[0]["shape"])]
        x = np.random.default_rng(0).random(shape, dtype=np.float32)
        ctx.val = Dataset(x.astype(ctx.inputs[0]["dtype"]), None, "64 random inputs (no --val)",
                          synthetic=True)
        say("note: no --val given and no model.json \"validation\": variants are compared "
            "on random inputs (differences only)")
    if calib:
        ctx.calib = load_dataset(calib, ctx.inputs[0], pre, limit=a.calib_limit)
    elif "int8" in parse_steps(a.steps):
        say("note: no calibration data (no --calib, no --val, no model.json \"calibration\" "
            "or \"validation\"): INT8 steps are skipped")


def _load_detection(ctx: Context, pre: Any) -> None:
    """A detector: mAP on a labelled set; calibration sees the same letterboxed frames."""
    from edged.compile.data import Dataset, load_dataset
    from edged.compile.detect_val import DetectionCheck, load_detection_set, load_postprocess
    from edged.errors import ConfigError

    a = ctx.args
    if not a.val:
        raise ValueError("--postprocess needs --val: a .npz with 'images' and 'boxes', or a "
                         "folder of photos with boxes.csv")
    try:
        cfg = load_postprocess(a.postprocess)
    except ConfigError as e:
        raise ValueError(str(e)) from None
    ctx.detect = DetectionCheck(cfg, load_detection_set(a.val), pre, a.max_drop)
    spec = ctx.inputs[0]
    x, _ = ctx.detect.inputs(spec["name"], spec["dtype"], spec["shape"])
    ctx.val = Dataset(x, None, ctx.detect.data.source)
    if a.calib:
        ctx.calib = load_dataset(a.calib, spec, pre, limit=a.calib_limit)
    else:
        ctx.calib = Dataset(x[:a.calib_limit], None, f"{ctx.detect.data.source}, letterboxed")


def run(args: argparse.Namespace) -> int:
    """Run the requested steps; see the module docstring for the exit status."""
    missing = [m for m in ("onnx", "onnxconverter_common", "tqdm")
               if importlib.util.find_spec(m) is None]
    if missing:
        print(f"edged compile: needs {', '.join(missing)}: install the compile extra "
              "(pip install 'edged[compile]'; add ,tvm for the TVM step)", file=sys.stderr)
        return 2
    os.environ.setdefault("TVM_NUM_THREADS", str(args.threads))  # before TVM's first import
    from edged.backends.sidecar import sha256_file
    from edged.compile import ladder
    from edged.compile.modelinfo import io_specs

    try:
        steps = parse_steps(args.steps)
        _batch_sizes(args.batch_sizes, args.max_batch)
    except ValueError as e:
        print(f"edged compile: {e}", file=sys.stderr)
        return 2
    src = args.model
    if not src.is_file():
        print(f"edged compile: model not found: {src}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    inputs, outputs = io_specs(src)
    name = args.name or src.stem.removesuffix("-fp32")
    ctx = Context(args, src, name, args.out, inputs, outputs, sha256_file(src))
    try:
        _load_data(ctx)
    except ValueError as e:
        print(f"edged compile: {e}", file=sys.stderr)
        return 2
    if ctx.calib is not None:
        say(f"calibration data: {ctx.calib.source}")
    reference(ctx)

    skipped_only = False
    for step in steps:
        if step == "validate":
            continue
        t0 = time.monotonic()
        try:
            if step == "tvm":
                made = step_tvm(ctx)
            elif step == "tensorrt":
                made = step_tensorrt(ctx)
            else:
                made = step_ort(ctx, step)
        except _Skip as e:
            say(f"{step}: skipped — {e}")
            skipped_only = steps == [step]
            continue
        except Exception as e:
            ctx.failures.append(step)
            say(f"{step}: FAILED — {type(e).__name__}: {e}")
            continue
        say(f"{step}: built {', '.join(p.name for p in made)} in {time.monotonic() - t0:.1f} s")
        for p in made:
            _check(ctx, p)
    if "validate" in steps:
        for p in _existing_artifacts(ctx.out):
            _check(ctx, p)
    toml = ladder.write(ctx.out, args.relative_to, confirm=_confirmer(ctx))
    say(f"wrote {toml}")
    if ctx.failures:
        say(f"failed steps: {', '.join(ctx.failures)}")
    if ctx.rejected:
        say(f"rejected: {', '.join(ctx.rejected)} (see {ctx.out / 'rejected'}; --force keeps)")
    return 1 if ctx.failures or ctx.rejected or skipped_only else 0


def _confirmer(ctx: Context) -> Any:
    """``ladder.Confirm``: re-time two variants interleaved, None if one cannot run here."""
    from edged.compile import bench
    from edged.compile.runners import open_variant

    a = ctx.args

    def confirm(upper: dict[str, Any], lower: dict[str, Any]) -> tuple[float, float] | None:
        opened = []
        try:
            for e in (upper, lower):
                opened.append(open_variant(e.get("backend", "onnxruntime"), e["_artifact"],
                                           a.threads, a.max_batch))
            ratios = bench.compare(opened[0], opened[1], a.max_batch, a.bench_runs)
        except Exception as ex:  # built for another machine, no GPU, ...: keep the figures
            say(f"ladder: cannot re-time {upper.get('name')} against {lower.get('name')} "
                f"here ({type(ex).__name__}: {ex}); using the recorded figures")
            return None
        finally:
            for be in opened:
                be.close()
        say(f"ladder: {lower.get('name')} vs {upper.get('name')}, timed interleaved: "
            f"b=1 {ratios[0]:.2f}x, b={a.max_batch} {ratios[1]:.2f}x cheaper")
        return ratios

    return confirm


def _check(ctx: Context, p: Path) -> None:
    try:
        check_variant(ctx, p)
    except Exception as e:
        ctx.failures.append(f"check {p.name}")
        say(f"{p.name}: could not be validated — {type(e).__name__}: {e}")


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
