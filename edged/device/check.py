"""``edged device-check``: what can this device run, how fast, and does it run correctly?

Run it on the device itself (Jetson, desktop GPU, Raspberry Pi, x86 box) from an
edged checkout or install (``scripts/ops/device-check`` is the same command):

    edged device-check            # facts, PASS/SKIP/FAIL lines, one table per model
    edged device-check --json     # the same, machine-readable

It prints platform facts, which runtimes import and whether a CUDA device is usable
(``edged.device.probe``). Then, for the default digits model and a MobileNetV2-sized one
(made by ``scripts/models/make_bench_models.py``), it serves every backend and precision
this device has **through the daemon** (``edged serve`` with a generated config, requests
from ``edged.client.Client``; ``edged.device.serve``): ONNX Runtime on CPU (fp32, and
int8 when the model has an int8 sibling), OpenVINO on CPU (the same two files; its row
shows the hint, threads, precision and version), ONNX Runtime's CUDA and TensorRT
execution providers, and edged's own TensorRT plans in fp32, fp16 and int8 (built here by
the ``edged compile`` TensorRT step, keyed to this GPU; ``edged.device.candidates``). Each
row gives the batch-1 p50 (one request in flight) and the throughput of single-item
requests batched by the daemon (``2 x max-batch`` in flight), both from ``edged bench``'s
load generator, and top-1 agreement / max difference with ONNX Runtime fp32 on CPU for the
same inputs. The table's format is ``edged.device.table``.

A missing optional runtime, GPU or model is a SKIP with the reason; only something
installed but broken, or an fp32 result that differs from the CPU reference, is a
FAIL, and only a FAIL exits non-zero.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from edged.backends.tensorrt.cuda import probe
from edged.device.probe import cuda_check, nvml_check, platform_facts, runtime_checks
from edged.device.report import FAIL, PASS, SKIP, Report


def models_to_check(specs: list[str] | None) -> dict[str, Path]:
    """``--model [NAME=]PATH`` options, or the default digits and MobileNetV2 models."""
    if not specs:
        from edged.testing.harness import ROOT

        return {"digits": ROOT / "models" / "digits" / "cnn-fp32.onnx",
                "mobilenetv2": ROOT / ".cache" / "bench-models" / "mobilenetv2-fp32.onnx"}
    models = {}
    for spec in specs:
        name, _, path = spec.rpartition("=")
        p = Path(path).resolve()  # the daemon's config resolves relative to itself
        models[name or p.stem.removesuffix("-fp32")] = p
    return models


def run(args: argparse.Namespace) -> int:
    """The whole check (its options: ``edged.device.cli``); 1 when a check FAILed."""
    r = Report(args.json)
    platform_facts(r)
    mods = runtime_checks(r)
    cuda_check(r, mods, args.device)
    nvml_check(r, mods)
    gpu = probe(args.device)
    r.fact("tensorrt plans", gpu[1] if gpu[0] else f"not built here: {gpu[1]}")
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="edged-device-check-"))
    workdir.mkdir(parents=True, exist_ok=True)
    for name, path in models_to_check(args.model).items():
        run_model(r, name, path, mods, args, workdir, gpu)
    return r.finish()


def run_model(r: Report, name: str, path: Path, mods: dict[str, Any], args: argparse.Namespace,
              workdir: Path, gpu: tuple[bool, str]) -> None:
    """One model: its check line, one line per backend x precision, then its table."""
    if mods.get("onnxruntime") is None or mods.get("numpy") is None:
        r.add(f"{name} model", SKIP, "onnxruntime or numpy not importable")
        return
    if not path.is_file():
        hint = " (make it with scripts/models/make_bench_models.py, needs torch)" \
            if name == "mobilenetv2" else ""
        r.add(f"{name} model", SKIP, f"model not found: {path}{hint}")
        return
    # numpy and onnxruntime: imported once the checks above say they import
    from edged.device import candidates, table
    from edged.device.serve import serve_row

    try:
        m = candidates.load_model(name, path, args.items)
    except Exception as e:
        r.add(f"{name} model", FAIL, f"{path.name}: ONNX Runtime cannot run it: "
                                     f"{type(e).__name__}: {e}")
        return
    r.add(f"{name} model", PASS, f"{path} ({m.source}, output {m.output_name})")
    cands = candidates.ort_candidates(m, mods["onnxruntime"], workdir, args.max_batch,
                                      args.device)
    cands += candidates.openvino_candidates(m, mods.get("openvino"), workdir)
    cands += candidates.plan_candidates(m, workdir, args.max_batch, args.device, gpu)
    for c in cands:
        if c.skip:
            row = table.Row(name, c.backend, c.precision, status=table.SKIP, note=c.skip)
        elif c.variant is None:
            row = table.Row(name, c.backend, c.precision, status=table.FAIL, note=c.note)
        else:
            row = serve_row(m, c, workdir, args.max_batch, args.seconds)
        m.rows.append(row)
        status = {table.SKIP: SKIP, table.FAIL: FAIL}.get(row.status, PASS)
        detail = row.note if status != PASS else (
            f"p50 {row.p50_ms:.2f} ms, {row.items_per_s:,.0f} items/s, top-1 agreement "
            f"{row.top1_agree_pct:.2f}%, max |diff| {row.max_abs_diff:.1e} on {row.device}")
        r.add(f"{name} {c.backend} {c.precision}", status, detail, row=row.to_json())
    r.table(table.format_table(
        f"{name}: {path.name}, through the daemon (p50 at batch 1; items/s of single-item "
        f"requests, max_batch_size {args.max_batch}; agreement with onnxruntime-cpu fp32 on "
        f"{m.source})", m.rows))
