"""What a TensorRT plan is tied to, as a key in its file name and its sidecar.

Why: a plan loads only on the TensorRT version and GPU (compute capability) that
built it, and on a Jetson the L4T/JetPack release decides the TensorRT, CUDA and
driver underneath. Putting those facts in the file name lets plans for several
devices sit side by side in one model directory (one ``edged compile`` per device),
so the daemon never has to rebuild a plan on the request path; putting them in the
sidecar lets the backend refuse a plan for another device before TensorRT tries.

Pure code: no TensorRT or CUDA import, so the compile step, the backend, the tests
and ``scripts/ops/device-check`` share it on any machine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

TEGRA_RELEASE = Path("/etc/nv_tegra_release")
PRECISIONS = ("fp32", "fp16", "int8")


def parse_l4t_release(text: str) -> str | None:
    """``# R36 (release), REVISION: 4.3, GCID: ...`` -> ``"36.4.3"``; None if not that format."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    m = re.match(r"#\s*R(\d+)\s*\(release\),\s*REVISION:\s*([0-9.]+)", first)
    if not m:
        return None
    return f"{m.group(1)}.{m.group(2).rstrip('.')}"


def l4t_release(path: Path = TEGRA_RELEASE) -> str | None:
    """This Jetson's L4T release (``"36.4.3"``), or None on any other machine."""
    try:
        return parse_l4t_release(path.read_text(errors="replace"))
    except OSError:
        return None


def _slug(text: str) -> str:
    """``NVIDIA GeForce RTX 3080`` -> ``geforce-rtx-3080`` (file-name safe, bounded)."""
    words = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-").split("-")
    words = [w for w in words if w and w != "nvidia"]
    return "-".join(words)[:32].strip("-") or "gpu"


@dataclass(frozen=True)
class DeviceKey:
    """The facts a plan depends on: GPU name and SM, L4T release, TensorRT version."""

    gpu: str
    compute_capability: str
    tensorrt: str
    l4t: str | None = None

    @property
    def sm(self) -> str:
        """``"8.7"`` -> ``"sm87"``."""
        return "sm" + "".join(re.findall(r"\d+", self.compute_capability)[:2])

    def slug(self) -> str:
        """``sm87-orin-l4t36.4.3-trt10.3.0``: the device part of every plan file name."""
        parts = [self.sm, _slug(self.gpu)]
        if self.l4t:
            parts.append(f"l4t{self.l4t}")
        parts.append(f"trt{self.tensorrt}")
        return "-".join(parts)

    def describe(self) -> str:
        """Human form for messages: ``Orin (SM 8.7), L4T 36.4.3, TensorRT 10.3.0``."""
        l4t = f"L4T {self.l4t}" if self.l4t else "no L4T (not a Jetson)"
        return f"{self.gpu} (SM {self.compute_capability}), {l4t}, TensorRT {self.tensorrt}"

    def to_json(self) -> dict[str, str | None]:
        return {"gpu": self.gpu, "compute_capability": self.compute_capability,
                "l4t": self.l4t, "tensorrt": self.tensorrt, "slug": self.slug()}


def plan_variant_name(model: str, precision: str) -> str:
    """The ladder name of a plan, the same on every device: ``cnn-trt-fp16``."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}; got {precision!r}")
    return f"{model}-trt-{precision}"


def plan_file_name(model: str, precision: str, key: DeviceKey) -> str:
    """``cnn-trt-fp16.sm87-orin-l4t36.4.3-trt10.3.0.engine``."""
    return f"{plan_variant_name(model, precision)}.{key.slug()}.engine"


def timing_cache_name(key: DeviceKey) -> str:
    """One timing cache per device and TensorRT version, shared by every precision.

    TensorRT refuses (or silently mistimes with ``ignore_mismatch``) a cache from
    another GPU or version, so the key is in the name and each device keeps its own.
    """
    return f"tensorrt-timing.{key.slug()}.cache"


def rebuild_command(source: str | None, out_dir: Path) -> str:
    """The command that rebuilds a directory's plans for the device it runs on."""
    return f"edged compile {source or 'MODEL.onnx'} --out {out_dir} --steps tensorrt"
