"""Validate and time each artifact through the daemon's own backends; keep or reject it.

Why right after each build: a variant that loses more than ``max_drop`` accuracy points
against the original (or, for a detector, mAP points) is moved to ``OUT/rejected/``
at once, so the ladder written at the end is made only of variants that held up, and
its figures (``validation``, ``speed`` in each sidecar) are what the daemon's loader
and padding actually achieve on this machine.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from edged.backends.base import Backend, run_batch
from edged.backends.support.sidecar import read_sidecar, sidecar_path, update_sidecar
from edged.compile import bench, ladder
from edged.compile.context import Context
from edged.compile.tvm_build import TargetChoice
from edged.compile.validate import Validation, compare, predict
from edged.config.runtimes import BackendOptions, read_options
from edged.config.schema import Table, raise_if_problems
from edged.model.artifact import open_artifact
from edged.verify.golden import MAX_SAMPLES, write_golden


def open_for_timing(backend: str, path: Path, threads: int | None, max_batch: int,
                 options: dict[str, Any] | None = None) -> Backend:
    """``path`` opened as the daemon would with the ``options`` its sidecar gives the
    served variant (OpenVINO's bf16 rung: ``precision = "bf16"``), with ``threads`` CPU
    threads and no compiled-blob cache (it is timed once here; the daemon keeps one)."""
    settings: dict[str, object] = dict(options or {})
    if threads and backend in ("onnxruntime", "tvm", "openvino"):
        settings["threads"] = threads
    if backend == "openvino":
        settings["cache"] = False
    table = Table(settings, "options", f"{path.name}'s sidecar")
    options: BackendOptions = read_options(backend, table)
    raise_if_problems(table.problems)
    return open_artifact(backend, path, options, max_batch)[0]


def reference(ctx: Context) -> None:
    """Run the original model on the validation set; record its figures in source.json."""
    o = ctx.opts
    assert ctx.val is not None
    be = open_for_timing("onnxruntime", ctx.src, o.threads, o.max_batch)
    try:
        if ctx.detect is not None:
            v = ctx.detect.validate(be, o.max_batch)
        else:
            ctx.ref_out = predict(be, ctx.val.x, o.max_batch)
            v = compare(ctx.ref_out, ctx.ref_out, ctx.val.y, o.max_drop)
        s = bench.measure(be, o.max_batch, o.bench_runs, threads=o.threads)
    finally:
        be.close()
    doc = {"name": f"{ctx.name}-fp32", "backend": "onnxruntime", "precision": "fp32",
           "source": {"path": str(ctx.src.resolve()), "sha256": ctx.sha},
           "validation": {**v.to_json(), "data": ctx.val.source}, "speed": s.to_json()}
    (ctx.out / ladder.SOURCE_RECORD).write_text(json.dumps(doc, indent=2) + "\n")
    ctx.say(f"original {ctx.src.name}: {v.summary()}; {s.summary()}")


def check(ctx: Context, path: Path) -> str:
    """``check_variant``, with an error counted as a failure of the run, not raised."""
    try:
        return check_variant(ctx, path)
    except Exception as e:
        ctx.failures.append(f"check {path.name}")
        ctx.say(f"{path.name}: could not be validated — {type(e).__name__}: {e}")
        return "error"


def check_variant(ctx: Context, path: Path) -> str:
    """Validate and time one artifact, record the results, move it aside if rejected.

    Returns what became of it: "ok", "forced", "rejected" or "not checked here".
    """
    o = ctx.opts
    meta = read_sidecar(path) or {}
    backend = meta.get("backend", "onnxruntime")
    if backend == "tvm" and not TargetChoice(meta.get("target") or {}, "").runs_here:
        ctx.say(f"{path.name}: not validated or timed here (built for another machine)")
        return "not checked here"
    be = open_for_timing(backend, path, o.threads, o.max_batch, meta.get("options"))
    try:
        v = _validate(ctx, be)
        s = bench.measure(be, o.max_batch, o.bench_runs, threads=o.threads)
        if v.passed and ctx.detect is None:
            _record_golden(ctx, be, path, meta.get("precision") or "fp32")
    finally:
        be.close()
    assert ctx.val is not None
    fields: dict[str, Any] = {"validation": {**v.to_json(), "data": ctx.val.source},
                              "speed": s.to_json()}
    if v.passed:
        update_sidecar(path, **fields)
        ctx.say(f"{path.name}: ok: {v.summary()}; {s.summary()}")
        return "ok"
    if o.force:
        update_sidecar(path, **fields, forced=True)
        ctx.say(f"{path.name}: FAILED validation, kept because of --force: {v.summary()}")
        return "forced"
    update_sidecar(path, **fields)
    dest = _move_aside(path, meta)
    ctx.rejected.append(path.name)
    ctx.say(f"{path.name}: REJECTED: loses {v.drop_pct:.2f} points (> --max-drop "
            f"{o.max_drop}); {v.summary()}; moved to {dest}")
    return "rejected"


def _validate(ctx: Context, be: Backend) -> Any:
    """Accuracy against the original: mAP for a detector, else top-1 and agreement."""
    o = ctx.opts
    assert ctx.val is not None
    if ctx.detect is not None:
        return ctx.detect.validate(be, o.max_batch)
    out = predict(be, ctx.val.x, o.max_batch)
    v: Validation = compare(ctx.ref_out, out, ctx.val.y if not ctx.val.synthetic else None,
                            o.max_drop)
    if ctx.val.synthetic:  # random inputs: agreement is no accuracy proxy
        v.passed, v.drop_pct = bool(v.max_abs_diff != float("inf")), 0.0
    return v


def _record_golden(ctx: Context, be: Backend, path: Path, precision: str) -> None:
    """A few validation inputs (and this artifact's own outputs on them) beside it: the
    check inputs the daemon runs before a swap, comparing with the model's reference on
    its own device (edged.verify). As many as fit the file's bound, down to one."""
    assert ctx.val is not None
    for n in (MAX_SAMPLES, 4, 2, 1):
        feeds = {be.inputs[0].name: ctx.val.x[:n]}
        if write_golden(path, feeds, run_batch(be, feeds), precision) is not None:
            return
    ctx.say(f"{path.name}: golden inputs too large to record; the daemon checks a swap to "
            "it on the last inputs the model served (or name validation data in model.json)")


def _move_aside(path: Path, meta: dict[str, Any]) -> Path:
    dest = path.parent / "rejected"
    dest.mkdir(exist_ok=True)
    members = [path, sidecar_path(path)]
    members += [path.parent / f["path"] for f in (meta.get("files") or {}).values()]
    for m in members:
        if m.exists():
            shutil.move(str(m), str(dest / m.name))
    return dest


def existing_artifacts(out: Path) -> list[Path]:
    return [e["_artifact"] for e in ladder.collect(out) if not e.get("_source")]


def confirmer(ctx: Context) -> ladder.Confirm:
    """``ladder.Confirm``: re-time two variants interleaved, None if one cannot run here."""
    o = ctx.opts

    def confirm(upper: dict[str, Any], lower: dict[str, Any]) -> tuple[float, float] | None:
        opened: list[Backend] = []
        try:
            for e in (upper, lower):
                opened.append(open_for_timing(e.get("backend", "onnxruntime"), e["_artifact"],
                                           o.threads, o.max_batch, e.get("options")))
            ratios = bench.compare(opened[0], opened[1], o.max_batch, o.bench_runs)
        except Exception as ex:  # built for another machine, no GPU, ...: keep the figures
            ctx.say(f"ladder: cannot re-time {upper.get('name')} against {lower.get('name')} "
                    f"here ({type(ex).__name__}: {ex}); using the recorded figures")
            return None
        finally:
            for be in opened:
                be.close()
        ctx.say(f"ladder: {lower.get('name')} vs {upper.get('name')}, timed interleaved: "
                f"b=1 {ratios[0]:.2f}x, b={o.max_batch} {ratios[1]:.2f}x cheaper")
        return ratios

    return confirm
