"""The ``tvm`` step: TVM Relax libraries for the target, untuned and/or tuned.

Untuned: one library with a symbolic batch when the model has one, else one per
batch size. Tuned (``tune_trials`` > 0): one static library per batch size
(``LABEL.b<N>.so`` described by ``LABEL.so.json``), see ``edged.compile.tvm_build``.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm

from edged.backends.support.sidecar import sha256_file, write_sidecar
from edged.compile import tvm_build, tvm_tune
from edged.compile.context import Context, StepSkipped

TVM_TOOLS = ("tvm", "tvm-ffi", "onnx")


def build(ctx: Context) -> list[Path]:
    try:
        import tvm  # noqa: F401  (imported by the build below; absent: skipped, not failed)
    except ImportError:
        raise StepSkipped("TVM is not installed here (pip install 'edged[tvm]'; or build the "
                          ".so on a host that has it and copy it: docs/compile.md)") from None
    o = ctx.opts
    choice = tvm_build.resolve_target(o.target, o.cc, o.threads)
    sizes = list(o.batch_sizes) if o.batch_sizes else None
    made: list[Path] = []
    label = f"{ctx.name}-tvm-{choice.name}"
    t0 = time.monotonic()
    if sizes is None and tvm_build.has_symbolic_batch(ctx.src):
        path = ctx.out / f"{label}.so"
        ctx.say(f"tvm: compiling {path.name} (symbolic batch, untuned)")
        tvm_build.build_dynamic(ctx.src, path, choice)
        meta = ctx.base_meta("tvm", "fp32", "tvm", TVM_TOOLS)
        meta.update(name=label, target=choice.spec, batch_sizes=None, sha256=sha256_file(path),
                    options={"threads": o.threads}, build_seconds=round(time.monotonic() - t0, 2))
        write_sidecar(path, meta)
        made.append(path)
    elif o.tune_trials <= 0:
        made.append(_static_set(ctx, choice, label, sizes or _powers(o.max_batch), None))
    if o.tune_trials > 0:
        has_xgb = importlib.util.find_spec("xgboost") is not None
        settings = tvm_tune.TuneSettings(
            trials=o.tune_trials, trials_per_task=o.tune_trials_per_task,
            cost_model=o.cost_model or ("xgb" if has_xgb else "random"),
            strategy=o.tune_strategy, progress=o.progress)
        made.append(_static_set(ctx, choice, f"{label}-tuned", sizes or _powers(o.max_batch),
                                settings))
    return made


def _powers(max_batch: int) -> list[int]:
    """1, 2, 4, ... below ``max_batch``, then ``max_batch``."""
    out, b = [], 1
    while b < max_batch:
        out.append(b)
        b *= 2
    return [*out, max_batch]


def _static_set(ctx: Context, choice: tvm_build.TargetChoice, label: str, sizes: list[int],
                tune: tvm_tune.TuneSettings | None) -> Path:
    """Per-batch-size libraries ``LABEL.b<N>.so`` described by ``LABEL.so.json``."""
    o = ctx.opts
    db_dir = (o.tuning_db or ctx.out / "tuning-db") if tune else None
    t0 = time.monotonic()
    files: dict[str, Any] = {}
    tuning: dict[str, Any] = {}
    for b in tqdm(sizes, desc=f"tvm: {label}", unit="lib", disable=not o.progress):
        lib = ctx.out / f"{label}.b{b}.so"
        _, summary = tvm_build.build_static(ctx.src, lib, choice, b, db_dir, tune)
        files[str(b)] = {"path": lib.name, "sha256": sha256_file(lib)}
        if summary:
            tuning[str(b)] = summary
            ctx.say(f"tvm: b={b}: {summary['tasks']} tasks, {summary['tasks_reused']} from the "
                    f"database, {summary['tasks_tuned']} tuned ({summary['trials']} trials)")
    path = ctx.out / f"{label}.so"
    meta = ctx.base_meta("tvm", "fp32", "tvm", TVM_TOOLS)
    meta.update(name=label, target=choice.spec, batch_sizes=sizes, files=files,
                options={"threads": o.threads}, build_seconds=round(time.monotonic() - t0, 2))
    if tune:
        meta["tuning"] = {"trials_per_batch_size": tune.trials, "cost_model": tune.cost_model,
                          "strategy": tune.strategy, "database": str(db_dir), "runs": tuning}
    write_sidecar(path, meta)
    return path
