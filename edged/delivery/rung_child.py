"""The rung build's child process: builds a model's missing rungs on the device, checks and
times them, orders the ladder.

Why a process of its own: quantizing is minutes of CPU, so it runs as a child at the lowest
priority on one core (``edged.delivery.rung_launcher`` in the daemon starts it and reads its
progress lines), never in the serving process. Two roads start it, with the same build:
a model Frigate sent (``python -m edged.protocols.frigate.rung_child``: its reference is
made from the graph and its ``model_type``) and a delivered version whose ladder has no rung
below its top (``python -m edged.delivery.rung_child``: its reference is the version's own
top variant, as the model's config table reads it).

What it does, for each rung of ``edged.delivery.rungs.RUNGS``: the ``int8`` rung is ONNX
Runtime static QDQ, Conv only, as ``edged compile`` does for detectors, calibrated on the
first frames (the model's own input tensors: frames Frigate sent, or rows of a version's
validation set); with OpenVINO importable the ``ov-fp32`` and ``ov-int8`` rungs are the
served graph and the QDQ model as OpenVINO IR with the weights as they are, as the
compile pipeline's ``openvino`` step writes them (without OpenVINO they are skipped,
saying why). Each is accepted only by ``edged.verify``'s task-level check (matched boxes,
or top-1 for a classifier, against the served fp32 model, on this device) on *other*
frames than the calibration ones. The accepted ones and the served model are then timed at
batch 1 on the build's core, in turns (so load from elsewhere hits them alike), and ordered
by ``edged.compile.ladder.plan``, the rule of ``edged compile``'s ladders: heaviest first,
each rung measurably cheaper than the one above (>= 1.15x), variants of equal precision
competing for one rung (the fastest wins). Every outcome is written beside the model.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from edged.backends.base import run_batch
from edged.compile.bench import measure
from edged.compile.ladder import MIN_SPEEDUP, passes, plan, speedup
from edged.compile.openvino_steps import save_ir
from edged.delivery.atomic import atomic_write
from edged.delivery.rungs import (
    CALIBRATION_SHARE,
    RUNGS,
    TOP,
    artifact,
    ladder_path,
    lowest_priority_one_core,
    openvino_missing,
    record_path,
    variant,
)
from edged.model.detect_head import build_postprocessor
from edged.model.open import open_variant
from edged.preprocess.preprocessor import Preprocessor
from edged.verify.golden import MAX_BYTES, MAX_SAMPLES, write_golden
from edged.verify.verifier import Verifier

#: timing the ladder: rounds in turns, and per round and variant one short measure
#: (``bench.ROUNDS`` sub-rounds) of at most this many runs and seconds, at batch 1
TIMING_ROUNDS = 3
TIMING_RUNS = 15
TIMING_BUDGET_S = 1.0
#: above this model size the variants are timed one open at a time (memory)
INTERLEAVE_MAX_BYTES = 64 << 20


def build_and_check(src: Path, frames: np.ndarray, base: Any, input_name: str,
                    say: Callable[[str], None] = print) -> dict[str, Any]:
    """Build every rung this machine can run below ``base`` (a ``ModelConfig`` whose one
    variant is the fp32 model at ``src``; ``input_name`` its image input), check each on
    the held-out frames, time the accepted ones and order the ladder; the record of what
    happened (also on disk)."""
    n_cal = max(1, int(len(frames) * CALIBRATION_SHARE))
    calib, held = frames[:n_cal], frames[n_cal:]
    if len(held) == 0:
        raise ValueError(f"{len(frames)} frames leave none to check the rungs on")
    records: dict[str, dict[str, Any]] = {}
    t0 = time.perf_counter()
    with _Checker(src, base, input_name, held) as checker:
        for key in RUNGS:
            records[key] = _one(src, key, calib, input_name, checker, records, say)
        ladder, off, best_ms = _order(records, checker, say)
    for key, rec in records.items():  # with their speeds; the ladder file is written last
        atomic_write(record_path(src, key), json.dumps(rec).encode())
    doc = {"ladder": ladder, "off": off, "best_round_ms": best_ms, "rungs": records,
           "build_s": round(time.perf_counter() - t0, 2),
           "calibration_frames": len(calib), "check_frames": len(held)}
    say(f"ladder: {' > '.join(ladder)}")
    return doc


def _one(src: Path, key: str, calib: np.ndarray, input_name: str, checker: _Checker,
         done: dict[str, dict[str, Any]], say: Callable[[str], None]) -> dict[str, Any]:
    """Build and check rung ``key``: its record (refused or skipped with the reason)."""
    r = RUNGS[key]
    base = {"rung": key, "backend": r.backend, "precision": r.precision, "accepted": False}
    if r.backend == "openvino":
        missing = openvino_missing(load=True)
        if missing:
            say(f"{key}: skipped: {missing}")
            return {**base, "skipped": True, "error": missing}
    if key == "ov-int8" and not done.get("int8", {}).get("quantized"):
        why = "no QDQ model to read (the int8 rung's quantization did not run)"
        return {**base, "skipped": True, "error": why}
    try:
        t0 = time.perf_counter()
        if key == "int8":
            say(f"int8: calibrating on {len(calib)} frames")
            _quantize(src, artifact(src, key), input_name, calib)
            base["quantized"] = True
        else:
            say(f"{key}: writing OpenVINO IR")
            save_ir(artifact(src, "int8") if key == "ov-int8" else src, artifact(src, key))
        base["build_s"] = round(time.perf_counter() - t0, 2)
        say(f"{key}: built in {base['build_s']:.1f} s; checking on {checker.count} other "
            "frames")
        report = checker.check(variant(checker.top, src, key, threads=1))
    except Exception as e:  # the refusal is the outcome, recorded
        say(f"{key}: refused: {type(e).__name__}: {e}"[:300])
        return {**base, "error": f"{type(e).__name__}: {e}"[:2000]}
    say(f"{key}: check passed: {report}")
    return {**base, "accepted": True, "check": report}


def _quantize(src: Path, out: Path, input_name: str, calib: np.ndarray) -> None:
    from edged.compile.ort_steps import to_int8_static

    tmp = out.with_name(out.name + ".tmp")
    to_int8_static(src, tmp, input_name, calib, batch=1, progress=False,
                   op_types=["Conv"])
    tmp.replace(out)


def _order(records: dict[str, dict[str, Any]], checker: _Checker,
           say: Callable[[str], None]) -> tuple[list[str], dict[str, str], dict[str, float]]:
    """Time the served model and the accepted rungs, then ``edged compile``'s ladder rule:
    the ladder, why each other variant is off it, each one's best round (ms at batch 1)."""
    keys = [TOP, *[k for k, rec in records.items() if rec.get("accepted")]]
    if len(keys) == 1:
        return [TOP], {}, {}
    variants = {k: checker.top if k == TOP else variant(checker.top, checker.src, k, threads=1)
                for k in keys}
    speeds, failed = checker.time(variants)
    for key, why in failed.items():
        records[key].update(accepted=False, error=f"could not be timed: {why}"[:2000])
    timed = []
    for key, speed in speeds.items():
        say(f"{key}: best round {min(r['latency_ms_p50'] for r in speed['rounds']):.3f} CPU ms "
            "at batch 1")
        if key != TOP:
            records[key]["speed"] = speed
        timed.append({"name": key, "precision": "fp32" if key == TOP else
                      RUNGS[key].precision, "speed": speed})
    timed, kept_top = _top_stays(timed)
    rungs, off = plan(timed, pairs=False)  # a stored ladder names one variant a rung
    off.update(kept_top)
    return [str(e["name"]) for e in rungs], off, {
        str(e["name"]): min(r["latency_ms_p50"] for r in e["speed"]["rounds"]) for e in timed}


def _top_stays(timed: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The served model keeps the top unless another fp32 variant is measurably faster
    (the ladder rule's ``MIN_SPEEDUP``), not merely faster in these few rounds. Why: the
    rounds run on one core beside serving, and OpenVINO's FP32 at 0.9-1.1x of ONNX
    Runtime's there took the top of a ladder whose model it then served 0.75x as fast with
    the daemon's two threads (and more zeros for Frigate)."""
    top = next((e for e in timed if e["name"] == TOP), None)
    out, off = [], {}
    for e in timed:
        if top is not None and e is not top and e["precision"] == "fp32":
            b1, big = speedup(top, e)
            if not passes(b1, big):
                off[str(e["name"])] = (
                    f"not measurably faster than the served model (b=1 {b1:.2f}x; the served "
                    f"model stays the top unless an fp32 variant is >= {MIN_SPEEDUP}x faster)")
                continue
        out.append(e)
    return out, off


class _Checker:
    """The served fp32 model opened once as the reference, the held frames recorded as
    served inputs, and each candidate checked and timed against it."""

    def __init__(self, src: Path, base: Any, input_name: str, held: np.ndarray) -> None:
        self.src = src
        self.count = len(held)
        fp32 = replace(base.variants[0], path=src)
        self.top = replace(fp32, options=replace(fp32.options, threads=1))
        self.cfg = replace(base, variants=(self.top,))
        self.name = input_name
        self.held = held
        self.ref: Any = None

    def __enter__(self) -> _Checker:
        self.ref = self._open(self.top, 0)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.ref is not None:
            self.ref.backend.close()

    def _open(self, v: Any, index: int) -> Any:
        loaded = open_variant("check", index, v, 1)
        if self.cfg.postprocess is None or self.cfg.preprocess is None:
            loaded.post = None  # a tensor model: its outputs are compared as they are
            return loaded
        try:
            loaded.post = build_postprocessor(self.cfg.postprocess, self.cfg.preprocess,
                                              loaded.backend, v.path, self.name)
        except Exception:
            loaded.backend.close()
            raise
        return loaded

    def check(self, cand: Any) -> str:
        """edged.verify's own check of ``cand`` against the reference on the held frames."""
        cfg = replace(self.cfg, variants=(self.top, cand))
        verifier = Verifier(cfg, Preprocessor(cfg.preprocess) if cfg.preprocess else None)
        for frame in self.held:
            verifier.record({self.name: frame[None]})
        opened = self._open(cand, 1)
        try:
            spec = next(s for s in self.ref.backend.inputs if s.name == self.name)
            ref = verifier.reference(1, spec, lambda job: job(self.ref))
            report = verifier.check(opened, ref)
            self._record(cand, opened)
            return report
        finally:
            opened.backend.close()

    def _record(self, cand: Any, opened: Any) -> None:
        """The held frames (as many as a golden file holds) and the rung's outputs on
        them, as its golden file. Why: the daemon checks a rung again before a swap to it,
        and on served frames the reference's results would be computed then, on the
        worker between batches, under the very load a swap for load comes in (Frigate's
        frames waiting past their 200 ms); on fixed inputs it computes them once, when it
        loads the model."""
        frames = self.held[:MAX_SAMPLES]
        outs = [run_batch(opened.backend, {self.name: f[None]}) for f in frames]
        per_frame = frames[0].nbytes + sum(a.nbytes for a in outs[0].values())
        n = min(len(frames), MAX_BYTES // max(per_frame, 1))
        if n:
            write_golden(cand.path, {self.name: frames[:n]},
                         {k: np.concatenate([o[k] for o in outs[:n]]) for k in outs[0]},
                         cand.precision)

    def time(self, variants: dict[str, Any]) -> tuple[dict[str, dict[str, Any]],
                                                      dict[str, str]]:
        """Batch-1 cost of each variant on this core: ``TIMING_ROUNDS`` short
        ``edged.compile.bench`` measures each of the CPU time a run takes (at nice 19 beside
        a busy daemon, wall time is mostly waiting for the core: OpenVINO's FP32 once
        "measured" 1.2x faster than ONNX Runtime's that way and took the whole ladder,
        though it serves 0.75x as fast), taken in turns so what load does to caches hits
        them alike (one variant open at a time, round after round, for a model over
        ``INTERLEAVE_MAX_BYTES``: all open at once would not fit a small device's memory).
        ``(speeds, {key: why})`` for a variant that failed to open or run."""
        rounds: dict[str, list[dict[str, Any]]] = {k: [] for k in variants}
        failed: dict[str, str] = {}

        def run(key: str, o: Any) -> None:
            try:
                rounds[key].append(measure(o.backend, 1, runs=TIMING_RUNS,
                                           budget_s=TIMING_BUDGET_S, threads=1,
                                           clock=time.process_time).to_json())
            except Exception as e:
                failed[key] = f"{type(e).__name__}: {e}"

        together = self.src.stat().st_size <= INTERLEAVE_MAX_BYTES
        groups = [list(variants)] if together else [[k] for k in variants]
        for group in groups:
            opened: dict[str, Any] = {}
            try:
                for key in group:
                    v = variants[key]
                    try:
                        opened[key] = self.ref if v is self.top else self._open(v, 1)
                    except Exception as e:
                        failed[key] = f"{type(e).__name__}: {e}"
                for _ in range(TIMING_ROUNDS):
                    for key, o in opened.items():
                        if key not in failed:
                            run(key, o)
            finally:
                for o in opened.values():
                    if o is not self.ref:
                        o.backend.close()
        if TOP in failed:
            raise RuntimeError(f"the served model could not be timed: {failed[TOP]}")
        speeds = {}
        for key, parts in rounds.items():
            if key in failed or not parts:
                continue
            best = min(parts, key=lambda p: p["latency_ms_p50"])
            speeds[key] = {**best, "rounds": [r for part in parts for r in part["rounds"]],
                           "runs": sum(p["runs"] for p in parts)}
        return speeds, failed


def run_child(args: argparse.Namespace, base_for: Callable[[], tuple[Any, str]]) -> int:
    """The child's body, for either road: ``base_for()`` gives the reference config and its
    input name. Progress on stdout, the record as the last line (JSON) and in
    ``<stem>.ladder.json`` beside the model."""
    if args.low_priority:
        lowest_priority_one_core()

    def say(msg: str) -> None:
        print(msg, flush=True)

    try:
        with np.load(args.frames, allow_pickle=False) as z:
            frames = z["frames"]
        base, input_name = base_for()
        record = build_and_check(args.src, frames, base, input_name, say)
    except Exception as e:  # the refusal is the outcome, recorded
        record = {"ladder": [TOP], "off": {}, "rungs": {},
                  "error": f"{type(e).__name__}: {e}"[:2000]}
    atomic_write(ladder_path(args.src), json.dumps(record).encode())
    print(json.dumps(record), flush=True)
    return 0 if len(record["ladder"]) > 1 else 1


def child_parser(doc: str | None) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("src", type=Path)
    ap.add_argument("frames", type=Path)
    ap.add_argument("--low-priority", action="store_true", help="nice 19 on one CPU")
    return ap


def main(argv: list[str] | None = None) -> int:
    """``python -m edged.delivery.rung_child SRC FRAMES.npz --config FILE --model NAME``:
    the rungs of a delivered version's top variant ``SRC`` (in its version folder), its
    reference read from the model's table in the daemon's config."""
    ap = child_parser(main.__doc__)
    ap.add_argument("--config", type=Path, required=True)
    ap.add_argument("--model", required=True)
    args = ap.parse_args(argv)

    def base_for() -> tuple[Any, str]:
        from edged.config.file import load_config

        mc = load_config(args.config).model(args.model)
        if mc is None:
            raise ValueError(f"{args.config} has no model {args.model!r}")
        top = ladder_top(args.src)
        base = replace(mc, variants=(top,))
        name = (mc.preprocess.input if mc.preprocess and mc.preprocess.input else None)
        if name is None:
            import onnxruntime as ort

            sess = ort.InferenceSession(str(args.src), providers=["CPUExecutionProvider"])
            name = sess.get_inputs()[0].name
        return base, name

    return run_child(args, base_for)


def ladder_top(src: Path) -> Any:
    """The fp32 ONNX Runtime variant of ``src`` (one thread: the build's one core)."""
    from edged.config.models import VariantConfig
    from edged.config.runtimes import OnnxRuntimeOptions

    return VariantConfig(src.stem, "onnxruntime", src, OnnxRuntimeOptions(threads=1),
                         precision="fp32")


if __name__ == "__main__":
    sys.exit(main())
