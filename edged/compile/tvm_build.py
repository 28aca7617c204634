"""Compile an ONNX model with TVM Relax and export ``.so`` libraries.

Why the shapes are handled as they are (checked with TVM 0.27; docs/compile.md, "TVM"):
untuned Relax code on CPU gets no schedules, so it runs 15-20x slower than ORT;
MetaSchedule tuning needs static shapes. So an untuned build keeps the ONNX batch
dimension symbolic (one ``.so`` for every batch size), and a tuned build makes one static
library per batch size, which the backend pads up to (``NAME.b<N>.so`` listed in
``NAME.so.json``).
"""

from __future__ import annotations

import json
import platform
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edged.compile import tvm_tune

CROSS_CC = "aarch64-linux-gnu-g++"


@dataclass
class TargetChoice:
    """A resolved target: the JSON dict (recorded in the sidecar), a short name, a cc."""

    spec: dict[str, Any]
    name: str
    cc: str | None = None

    @property
    def runs_here(self) -> bool:
        """Can this machine load and run what we build (for validation and speed)?"""
        from edged.backends.tvm import normalize_arch

        cpu = self.spec if self.spec.get("kind") == "llvm" else self.spec.get("host", {})
        triple = cpu.get("mtriple", "") if isinstance(cpu, dict) else ""
        if self.spec.get("kind") == "cuda":
            import tvm

            return bool(tvm.cuda(0).exist)
        return not triple or normalize_arch(triple) == normalize_arch(platform.machine())


def host_triple() -> str:
    arch = platform.machine().lower()
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(arch, arch)
    return f"{arch}-linux-gnu"


def resolve_target(text: str, cc: str | None, threads: int) -> TargetChoice:
    """``llvm`` | ``aarch64`` | ``cuda`` | a JSON target dict -> TargetChoice.

    ``llvm`` uses ``codegen.llvm_get_system_cpu()``: ``"mcpu": "native"`` silently
    falls back to generic code with TVM 0.27's LLVM 22. ``num-cores`` is set because
    MetaSchedule requires it.
    """
    from tvm.target import codegen

    host = {"kind": "llvm", "mtriple": host_triple(), "mcpu": codegen.llvm_get_system_cpu(),
            "num-cores": threads}
    if text == "llvm":
        return TargetChoice(host, "llvm", cc)
    if text == "aarch64":
        spec = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"],
                "num-cores": threads}
        return TargetChoice(spec, "aarch64", cc or CROSS_CC)
    if text == "cuda":
        return TargetChoice({"kind": "cuda", "host": host}, "cuda", cc)
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(
            f"--target {text!r}: expected llvm, aarch64, cuda or a JSON target dict"
        ) from e
    if not isinstance(spec, dict) or "kind" not in spec:
        raise ValueError(f"--target {text!r}: a JSON target must be an object with 'kind'")
    if spec["kind"] == "llvm":
        spec.setdefault("num-cores", threads)
    name = spec.get("tag") or spec["kind"]
    if spec["kind"] == "llvm" and spec.get("mtriple", "").startswith("aarch64"):
        name = "aarch64"
        cc = cc or (CROSS_CC if platform.machine() != "aarch64" else None)
    return TargetChoice(spec, str(name), cc)


def tvm_target(choice: TargetChoice) -> Any:
    import tvm

    return tvm.target.Target(choice.spec)


def import_onnx(model_path: Path, batch: int | None) -> Any:
    """Relax module for the model; ``batch`` fixes dim 0 of every input, None keeps it."""
    import onnx
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    from edged.compile.modelinfo import io_specs

    model = onnx.load(str(model_path))
    shape_dict = None
    if batch is not None:
        ins, _ = io_specs(model_path)
        shape_dict = {s["name"]: [batch, *[max(d, 1) for d in s["shape"][1:]]] for s in ins}
    mod = from_onnx(model, shape_dict=shape_dict)
    return relax.transform.DecomposeOpsForInference()(mod)


def export(ex: Any, out: Path, choice: TargetChoice) -> Path:
    """Write the shared library; cross targets need their C++ cross compiler."""
    tmp = out.with_name(out.name + ".tmp.so")
    if choice.cc:
        if shutil.which(choice.cc) is None:
            raise RuntimeError(
                f"cross compiler {choice.cc!r} not found on PATH (needed to link a "
                f"{choice.spec.get('mtriple')} .so); install it (Debian: "
                "g++-aarch64-linux-gnu) or pass --cc"
            )
        ex.export_library(str(tmp), cc=choice.cc)
    else:
        ex.export_library(str(tmp))
    tmp.replace(out)
    return out


def build_dynamic(model_path: Path, out: Path, choice: TargetChoice) -> Path:
    """One untuned library with a symbolic batch dimension."""
    import tvm

    mod = import_onnx(model_path, None)
    ex = tvm.compile(mod, target=tvm_target(choice))
    return export(ex, out, choice)


def has_symbolic_batch(model_path: Path) -> bool:
    from edged.compile.modelinfo import io_specs

    ins, _ = io_specs(model_path)
    return all(s["shape"] and s["shape"][0] == -1 for s in ins)


def build_static(
    model_path: Path, out: Path, choice: TargetChoice, batch: int,
    db_dir: Path | None = None, tune: tvm_tune.TuneSettings | None = None,
) -> tuple[Path, dict[str, Any]]:
    """One library for a fixed batch size, tuned when ``tune`` asks for trials.

    Returns the path and the tuning summary recorded in the sidecar.
    """
    import tvm
    from tvm import relax

    tgt = tvm_target(choice)
    mod = import_onnx(model_path, batch)
    summary: dict[str, Any] = {}
    if tune is not None and db_dir is not None:
        with tgt:
            fused = relax.get_pipeline("zero")(mod)  # extract_tasks only sees PrimFuncs
        db, summary = tvm_tune.tune(fused, tgt, db_dir, tune, label=f"b{batch}")
        # Apply to the SAME fused module; compile_relax on a fused module applies nothing.
        with tgt, db:
            mod = relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(fused)
    ex = tvm.compile(mod, target=tgt)
    return export(ex, out, choice), summary
