"""One row of the device table, served through the daemon.

Why through the daemon and not in process: the row says what ``edged serve`` gives on
this device with this variant (its loader, its provider fallbacks, its batching), so it
starts a real daemon on a generated one-variant config (``edged.testing.harness.Daemon``),
checks its outputs with ``edged.client.Client`` and times it with ``edged bench``'s
load generator, then stops it and keeps its config and log.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from edged.device.candidates import Candidate, ModelRun
from edged.device.table import FAIL, Row, agreement

#: what ONNX Runtime's device string names when the provider asked for really runs
EXPECTED_PROVIDER = {"onnxruntime-cuda": "CUDA", "onnxruntime-tensorrt": "Tensorrt"}


def _toml(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return json.dumps(str(v))


def daemon_config(path: Path, model: str, variant: dict[str, Any], max_batch: int) -> Path:
    """A one-model, one-variant config for ``edged serve``."""
    lines = ["[server]", "drain_timeout_s = 5.0", "[metrics]", 'listen = "off"', "",
             "[[models]]", f"name = {_toml(model)}", "required = true",
             f"max_batch_size = {max_batch}", "max_queue = 4096", "",
             "[[models.variants]]", f"name = {_toml(model + '-' + variant['backend'])}",
             f"backend = {_toml(variant['backend'])}", f"path = {_toml(variant['path'])}"]
    opts = dict(variant.get("options") or {})
    nested = opts.pop("provider_options", {})
    if opts or nested:
        lines.append("[models.variants.options]")
        lines += [f"{k} = {_toml(v)}" for k, v in opts.items()]
    for prov, table in nested.items():
        lines.append(f"[models.variants.options.provider_options.{prov}]")
        lines += [f"{k} = {_toml(v)}" for k, v in table.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def serve_row(m: ModelRun, c: Candidate, workdir: Path, max_batch: int,
              seconds: float) -> Row:
    """Start a daemon on the candidate, measure it with the client, stop it: one Row."""
    from edged.testing.harness import Daemon

    row = Row(m.name, c.backend, c.precision, note=c.note)
    keep = workdir / "daemons" / f"{m.name}-{c.backend}-{c.precision}"
    keep.mkdir(parents=True, exist_ok=True)
    # A short private dir: ipc socket paths must fit in 107 bytes.
    rundir = Path(tempfile.mkdtemp(prefix="edged-dc-"))
    assert c.variant is not None
    cfg = daemon_config(rundir / "edged.toml", m.name, c.variant, max_batch)
    d = Daemon(cfg, rundir, wait=False)
    try:
        d.wait_ready(timeout=900)  # the TensorRT EP may build its engine at load
        with d.client(timeout_s=300) as cl:
            _describe(row, c, cl.models().header)
            if c.backend in EXPECTED_PROVIDER and EXPECTED_PROVIDER[c.backend] not in row.device:
                row.status, row.note = FAIL, f"ONNX Runtime fell back to {row.device}"
                return row
            outs = []
            for i in range(0, len(m.x), max_batch):
                rep = cl.infer(m.name, {m.input_name: m.x[i:i + max_batch]})
                if not rep.ok:
                    raise RuntimeError(f"infer: {rep.header}")
                outs.append(rep.outputs[m.output_name])
            row.top1_agree_pct, row.max_abs_diff = agreement(m.ref, np.concatenate(outs))
        row.p50_ms = _load(d.ipc, m, 1, seconds)["p50_ms"]
        row.items_per_s = _load(d.ipc, m, 2 * max_batch, seconds)["throughput"]
    except Exception as e:
        first = (str(e).splitlines() or [""])[0]
        row.status, row.note = FAIL, (f"{type(e).__name__}: {first}; daemon log: "
                                      f"{keep / 'daemon.log'}; last lines: {d.log_tail(3)}")
        if os.environ.get("EDGED_DEBUG"):
            traceback.print_exc()
            print(d.log_tail(), file=sys.stderr)
    finally:
        d.stop()
        for f in (cfg, d.log_path):
            shutil.copy2(f, keep / f.name)
        shutil.rmtree(rundir, ignore_errors=True)
    if row.status != FAIL and c.precision == "fp32" and row.max_abs_diff is not None:
        scale = max(1.0, float(np.max(np.abs(m.ref))))
        if row.max_abs_diff > 1e-2 * scale:  # TF32 on Ampere+ stays well inside this
            row.status = FAIL
            row.note = f"fp32 differs from ONNX Runtime on CPU by more than 1e-2 x {scale:.3g}"
    return row


def _describe(row: Row, c: Candidate, models_header: dict[str, Any]) -> None:
    """The row's device as the daemon's ``models`` reply names it (OpenVINO: its runtime)."""
    mine = next((x for x in models_header.get("models") or [] if x.get("name") == row.model),
                {})
    row.device = str(mine.get("device") or "")
    rt = mine.get("runtime") or {}
    if c.backend.startswith("openvino"):
        row.device += (f" ({rt.get('hint')}, {rt.get('threads')} threads, "
                       f"{rt.get('precision')}, OpenVINO {rt.get('openvino')})")


def _load(endpoint: str, m: ModelRun, in_flight: int, seconds: float) -> dict[str, Any]:
    """``edged bench``'s load generator: one client, single-item requests, ``in_flight``
    of them outstanding, for ``seconds``; a reply other than OK is a failure."""
    from edged.bench.loadgen import drive
    from edged.client import build_infer

    header, frames = build_infer(m.name, {m.input_name: m.x[:1]})
    load = argparse.Namespace(endpoint=endpoint, clients=1, in_flight=in_flight,
                              duration=seconds)
    r = drive(load, header, frames, f"{m.name}: {in_flight} in flight")
    if not r["ok"] or r["ok"] != r["replies"]:
        raise RuntimeError(f"load with {in_flight} in flight: statuses {r['statuses']}")
    return r
