"""What the model builders beside this file share: the ONNX export of a torch network,
its size and cost for the model card, and the atomic publish of a finished build.

Why here and not in ``edged``: only the builders use it, and they run in throwaway
venvs with torch; the daemon never imports torch. Each builder imports it as a
sibling module (Python puts a script's own folder first on ``sys.path``).
"""

from __future__ import annotations

import os
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx


def export_torch(net: Any, path: Path, example_shape: tuple[int, ...], input_name: str,
                 output_name: str, batch_dim: str, opset: int, doc: str) -> onnx.ModelProto:
    """Export ``net`` with a symbolic batch dim ``batch_dim``; BatchNorm folded (eval mode).

    Why the TorchScript exporter (``dynamo=False``): the default torch.export-based
    exporter needs onnxscript, and the legacy one folds BatchNorm into Conv and writes
    plain graphs every backend reads. Returns the loaded model, ``doc`` as its doc
    string, for the caller to add to and :func:`save_checked`.
    """
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            net, (torch.zeros(*example_shape),), str(path), dynamo=False,
            input_names=[input_name], output_names=[output_name],
            dynamic_axes={input_name: {0: batch_dim}, output_name: {0: batch_dim}},
            opset_version=opset, do_constant_folding=True,
        )  # fmt: skip
    model = onnx.load(str(path))
    model.doc_string = doc
    return model


def cost(net: Any, example_shape: tuple[int, ...]) -> tuple[int, int]:
    """(parameters, multiply-accumulates per image) of ``net`` on an input of
    ``example_shape`` (batch 1), counting Conv2d and Linear layers, for a model card."""
    import torch
    from torch import nn

    macs = 0

    def hook(mod: nn.Module, _inp: tuple, out: torch.Tensor) -> None:
        nonlocal macs
        if isinstance(mod, nn.Conv2d):
            k = mod.kernel_size[0] * mod.kernel_size[1] * mod.in_channels // mod.groups
            macs += out.numel() * k
        elif isinstance(mod, nn.Linear):
            macs += out.numel() * mod.in_features

    handles = [m.register_forward_hook(hook) for m in net.modules()]
    with torch.no_grad():
        net.eval()(torch.zeros(*example_shape))
    for h in handles:
        h.remove()
    return sum(p.numel() for p in net.parameters()), macs


def save_checked(model: onnx.ModelProto, path: Path) -> None:
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def publish(build_dir: Path, out: Path, stale: str | None) -> None:
    """Move the built files into ``out`` one atomic rename at a time; files under
    ``out/samples`` matching ``stale`` that this build did not write are removed.

    Why: the daemon and the tests may be reading ``out`` while it is rebuilt; a
    rename never shows a reader a half-written model.
    """
    new = {p.relative_to(build_dir) for p in build_dir.rglob("*") if p.is_file()}
    for rel in sorted(new):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        os.replace(build_dir / rel, out / rel)
    for old in (out / "samples").glob(stale) if stale else ():
        if old.relative_to(out) not in new:
            old.unlink()


def build_and_publish(out: Path, build: Callable[[Path], int], stale: str | None) -> int:
    """``build`` into a temporary folder beside ``out`` (same file system, so the
    renames are atomic), then :func:`publish`; nothing is published when it fails."""
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}-build-") as tmp:
        rc = build(Path(tmp))
        if rc != 0:
            print(f"nothing published; {out} unchanged")
            return rc
        publish(Path(tmp), out, stale)
    print(f"done in {time.perf_counter() - t0:.1f} s -> {out}")
    return 0
