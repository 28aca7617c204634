#!/usr/bin/env python3
"""Write MobileNetV2 and ResNet-18 ONNX models with *random* weights for speed benchmarks.

Why: edged's benchmarks need realistically sized vision models (224x224, 1000
classes) to measure the daemon's overhead against raw runtime calls, but no
pretrained weights can be downloaded here and torchvision cannot be installed
beside torch 2.13. Speed does not depend on the weights' values, so the standard
architectures are written out below and exported with random weights. Their
outputs are meaningless: never use these files for accuracy.

Per architecture two files land in the cache dir (default ``.cache/bench-models/``,
gitignored): ``<name>-fp32.onnx`` and ``<name>-int8.onnx`` (ORT static QDQ
quantization, per-channel S8 weights / U8 activations, calibrated on random data,
for speed only). Every model has input ``input`` float32 ``[N,3,224,224]`` with a
symbolic batch dim and output ``logits`` float32 ``[N,1000]``. BatchNorm is folded
into the convolutions by the exporter (eval mode).

Existing files are kept unless ``--force``. Torch is needed only to write missing
fp32 files; edged never imports it.

Usage::

    python3 -m venv /tmp/benchvenv      # a throwaway venv: torch never enters .venv
    /tmp/benchvenv/bin/pip install torch==2.13.0 onnx onnxruntime numpy \
        --extra-index-url https://download.pytorch.org/whl/cpu
    /tmp/benchvenv/bin/python scripts/models/make_bench_models.py [--out DIR] [--force]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from builder_support import export_torch, save_checked  # noqa: E402

from edged.backends.onnxruntime import OnnxRuntimeBackend  # noqa: E402
from edged.compile.bench import measure  # noqa: E402
from edged.compile.ort_steps import to_int8_static  # noqa: E402
from edged.config.runtimes import OnnxRuntimeOptions  # noqa: E402

DEFAULT_OUT = ROOT / ".cache" / "bench-models"
INPUT_NAME = "input"
OUTPUT_NAME = "logits"
BATCH_DIM = "N"
OPSET = 17
SHAPE = (3, 224, 224)
NUM_CLASSES = 1000
SEED = 0
ARCHS = ("mobilenetv2", "resnet18")


# ------------------------------------------------------------------- architectures


def _make_divisible(v: float, divisor: int = 8) -> int:
    """MobileNet's channel rounding (keeps every layer a multiple of 8, as published)."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


def mobilenet_v2(num_classes: int = NUM_CLASSES, width: float = 1.0):
    """MobileNetV2 (Sandler et al. 2018), width 1.0: the torchvision definition, rewritten.

    Inverted residual blocks: 1x1 expand (factor t) -> 3x3 depthwise -> 1x1 linear
    projection, with a residual connection when stride is 1 and channels match.
    """
    from torch import Tensor, nn

    def conv_bn(cin: int, cout: int, k: int, stride: int, groups: int = 1) -> nn.Sequential:
        return nn.Sequential(
            nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU6(inplace=True),
        )

    class InvertedResidual(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
            super().__init__()
            hidden = round(cin * expand)
            self.use_res = stride == 1 and cin == cout
            layers: list[nn.Module] = []
            if expand != 1:
                layers.append(conv_bn(cin, hidden, 1, 1))
            layers += [
                conv_bn(hidden, hidden, 3, stride, groups=hidden),
                nn.Conv2d(hidden, cout, 1, 1, 0, bias=False),
                nn.BatchNorm2d(cout),
            ]
            self.conv = nn.Sequential(*layers)

        def forward(self, x: Tensor) -> Tensor:
            return x + self.conv(x) if self.use_res else self.conv(x)

    # t (expansion), c (channels), n (repeats), s (first stride)
    settings = [
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ]
    cin = _make_divisible(32 * width)
    last = _make_divisible(1280 * max(1.0, width))
    features: list[nn.Module] = [conv_bn(3, cin, 3, 2)]
    for t, c, n, s in settings:
        cout = _make_divisible(c * width)
        for i in range(n):
            features.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
            cin = cout
    features.append(conv_bn(cin, last, 1, 1))
    net = nn.Sequential(
        nn.Sequential(*features),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Dropout(0.2),
        nn.Linear(last, num_classes),
    )
    _init(net)
    return net


def resnet18(num_classes: int = NUM_CLASSES):
    """ResNet-18 (He et al. 2016): BasicBlocks [2,2,2,2] at 64/128/256/512 channels."""
    from torch import Tensor, nn

    class BasicBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down: nn.Module = nn.Identity()
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(
                    nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
                )

        def forward(self, x: Tensor) -> Tensor:
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + self.down(x))

    layers: list[nn.Module] = [
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1),
    ]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, num_classes)]
    net = nn.Sequential(*layers)
    _init(net)
    return net


def _init(net) -> None:
    """torchvision's initialisation, plus random BatchNorm statistics.

    Why random BN stats: with the default (mean 0, var 1, scale 1) folding would
    leave the conv weights untouched; random statistics make the folded weights
    look like a trained model's, which is all a speed benchmark can ask for.
    """
    import torch
    from torch import nn

    for m in net.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.weight.uniform_(0.5, 1.0)
                m.bias.uniform_(-0.1, 0.1)
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(1.0, 2.0)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0, 0.01)
            nn.init.zeros_(m.bias)


BUILDERS = {"mobilenetv2": mobilenet_v2, "resnet18": resnet18}


# -------------------------------------------------------------------- export, int8


def export_fp32(arch: str, dst: Path) -> None:
    """Export one architecture with random weights (seeded) to ``dst``, atomically.

    The TorchScript exporter (``dynamo=False``) is used because the default
    torch.export-based one needs onnxscript (not installed) and the legacy one folds
    BatchNorm into Conv in eval mode.
    """
    import torch

    torch.manual_seed(SEED)
    net = BUILDERS[arch]().eval()
    tmp = dst.with_name(dst.name + ".tmp")
    model = export_torch(net, tmp, (1, *SHAPE), INPUT_NAME, OUTPUT_NAME, BATCH_DIM, OPSET,
                         f"{arch} with RANDOM weights, for edged speed benchmarks only")
    save_checked(model, tmp)
    os.replace(tmp, dst)


def quantize_int8(src: Path, dst: Path, calib_batches: int) -> None:
    """``edged compile``'s static INT8 (``to_int8_static``: QDQ, U8 activations,
    per-channel S8 weights) calibrated on random images, uniform in [0,1) (enough to
    pick scales for a speed benchmark); written atomically."""
    tmp = dst.with_name(dst.name + ".tmp")
    calib = np.random.default_rng(SEED).random((calib_batches, *SHAPE), dtype=np.float32)
    to_int8_static(src, tmp, INPUT_NAME, calib, batch=1, progress=False,
                   pre_process="no_symbolic")
    os.replace(tmp, dst)


# --------------------------------------------------------------------------- check


def check_and_time(path: Path, runs: int, threads: int) -> float:
    """Verify I/O names and the dynamic batch (1 and 2), return batch-1 p50 ms
    (``edged.compile.bench``)."""
    be = OnnxRuntimeBackend(path, OnnxRuntimeOptions(threads=threads))
    sess = be.session
    (inp,), (out,) = sess.get_inputs(), sess.get_outputs()
    if (inp.name, out.name) != (INPUT_NAME, OUTPUT_NAME) or not isinstance(inp.shape[0], str):
        raise RuntimeError(f"{path}: unexpected I/O {inp} -> {out}")
    x = np.random.default_rng(1).random((2, *SHAPE), dtype=np.float32)
    (y2,) = sess.run([OUTPUT_NAME], {INPUT_NAME: x})
    if y2.shape != (2, NUM_CLASSES):
        raise RuntimeError(f"{path}: batch 2 gave shape {y2.shape}")
    return measure(be, 1, runs=runs).latency_ms_p50


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"default {DEFAULT_OUT}")
    ap.add_argument("--force", action="store_true", help="rewrite files that already exist")
    ap.add_argument("--arch", choices=ARCHS, action="append", help="only these (repeatable)")
    ap.add_argument("--no-int8", action="store_true", help="skip the INT8 QDQ versions")
    ap.add_argument("--calib-batches", type=int, default=8, help="random calibration images")
    ap.add_argument("--runs", type=int, default=20, help="timed batch-1 runs per model")
    ap.add_argument("--threads", type=int, default=0, help="ORT intra-op threads (0: ORT's)")
    args = ap.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)

    rows = []
    for arch in args.arch or ARCHS:
        fp32 = out / f"{arch}-fp32.onnx"
        int8 = out / f"{arch}-int8.onnx"
        # int8 is derived from fp32: a rewritten fp32 must not leave a stale int8 behind.
        fresh_fp32 = args.force or not fp32.exists()
        if fresh_fp32:
            t0 = time.perf_counter()
            export_fp32(arch, fp32)
            print(f"wrote {fp32} in {time.perf_counter() - t0:.1f} s")
        else:
            print(f"kept  {fp32} (exists; --force to rewrite)")
        targets = [fp32]
        if not args.no_int8:
            if fresh_fp32 or not int8.exists():
                t0 = time.perf_counter()
                quantize_int8(fp32, int8, args.calib_batches)
                print(f"wrote {int8} in {time.perf_counter() - t0:.1f} s")
            else:
                print(f"kept  {int8} (exists; --force to rewrite)")
            targets.append(int8)
        for path in targets:
            ms = check_and_time(path, args.runs, args.threads)
            rows.append((path.name, path.stat().st_size, ms))

    threads = args.threads or "ORT default"
    print(f"\n{'model':26s} {'size':>9s} {'batch-1 median':>15s}  (threads: {threads})")
    for name, size, ms in rows:
        print(f"{name:26s} {size / 2**20:7.1f} MiB {ms:12.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
