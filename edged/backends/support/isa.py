"""The CPU's INT8 instructions, and whether an INT8 artifact's weights suit them.

Why: ONNX Runtime multiplies U8 activations by S8 weights with VPMADDUBSW on an x86
CPU without VNNI, and its int16 pair sums saturate: on the digits CNN on an AVX2-only
AMD EPYC that moved logits by up to 1.45 from fp32 (0.15 with 7-bit weights,
``reduce_range``). VNNI x86 (``avx512_vnni``, ``avx_vnni``, ``amx_int8``) and ARM
(``dotprod``/``i8mm`` or plain NEON widening multiplies) do not saturate. So
``edged compile`` records the build CPU here, chooses 7-bit weights where they are
needed, and the daemon warns when an artifact with 8-bit weights lands on a CPU that
saturates them.

The CPU is read from a file in ``/proc/cpuinfo``'s format (``EDGED_CPUINFO`` names
another, as the governor's ``sysfs_root`` does for sysfs): tests and replays feed the
cpuinfo of a CPU they do not run on. The architecture comes from the file itself
(x86 lists ``flags``, ARM ``Features``), so a replayed file means the same anywhere.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edged.backends.support.sidecar import read_sidecar

CPUINFO_ENV = "EDGED_CPUINFO"
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
#: /proc/cpuinfo's names on aarch64 -> the names people use
ARM_INT8 = {"asimddp": "dotprod", "i8mm": "i8mm"}
#: the ``edged compile`` flag that forces 7-bit weights
SEVEN_BIT_FLAG = "--int8-reduce-range on"


@dataclass(frozen=True)
class CpuIsa:
    """What an INT8 kernel cares about: the architecture and its int8 dot products."""

    arch: str  # "x86_64", "aarch64", or platform.machine() when the file says neither
    #: VNNI_FLAGS present on x86, dotprod / i8mm on aarch64; None: flags unreadable
    int8: tuple[str, ...] | None

    @property
    def vnni(self) -> bool:
        return self.arch == "x86_64" and bool(self.int8)

    @property
    def saturates_u8s8(self) -> bool:
        """x86 known to lack VNNI: 8-bit weights overflow VPMADDUBSW's int16 sums."""
        return self.arch == "x86_64" and self.int8 == ()

    def to_json(self) -> dict[str, Any]:
        int8 = None if self.int8 is None else list(self.int8)
        return {"arch": self.arch, "int8": int8, "vnni": self.vnni}


def cpuinfo_path() -> Path:
    return Path(os.environ.get(CPUINFO_ENV) or "/proc/cpuinfo")


def cpu_isa(cpuinfo: Path | None = None) -> CpuIsa:
    """This CPU's ISA from ``cpuinfo`` (default: ``$EDGED_CPUINFO`` or /proc/cpuinfo).

    An unreadable file or one without a flags/Features line gives the machine's
    architecture and ``int8`` None: unknown, so never called saturating.
    """
    try:
        lines = (cpuinfo or cpuinfo_path()).read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    fields = {k.strip().lower(): v.split() for k, _, v in (ln.partition(":") for ln in lines)
              if k.strip().lower() in ("flags", "features")}
    if "flags" in fields:
        return CpuIsa("x86_64", tuple(f for f in VNNI_FLAGS if f in fields["flags"]))
    if "features" in fields:
        return CpuIsa("aarch64", tuple(v for k, v in ARM_INT8.items() if k in fields["features"]))
    machine = platform.machine().lower()
    return CpuIsa({"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine), None)


def cpu_name(cpuinfo: Path | None = None) -> str:
    """The CPU's name as the kernel gives it: x86's ``model name``, else an ARM board's
    ``Model`` or its ``CPU part``; ``platform`` when the file names none (its
    ``processor()`` is empty on Linux). Reports and the ORT cache key use this one."""
    try:
        lines = (cpuinfo or cpuinfo_path()).read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    fields = {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in lines)}
    for key in ("model name", "Model", "CPU part"):
        if fields.get(key):
            return fields[key]
    return platform.processor() or platform.machine()


def int8_weights_warning(artifact: Path, here: CpuIsa | None = None) -> str | None:
    """Why this INT8 ONNX artifact's outputs will drift on this CPU, or None.

    Only artifacts whose sidecar says 8-bit weights (``target.reduce_range`` false) and
    only on a CPU that saturates them; an artifact without a sidecar (or an unreadable
    one) is not judged here: its loader reports that.
    """
    try:
        meta = read_sidecar(artifact)
    except ValueError:
        return None
    target = (meta or {}).get("target") or {}
    if not meta or meta.get("precision") != "int8" or target.get("reduce_range") is not False:
        return None
    here = here or cpu_isa()
    if not here.saturates_u8s8:
        return None
    built = meta.get("build_cpu") or {}
    on = f" (built on {built.get('arch')}{' with VNNI' if built.get('vnni') else ''})" \
        if built else ""
    return (f"{artifact}: INT8 with 8-bit weights{on} runs on an x86 CPU without VNNI, "
            "where ONNX Runtime's U8S8 kernels saturate and outputs drift; rebuild it with "
            f"7-bit weights: {rebuild_command(artifact, meta)}")


def rebuild_command(artifact: Path, meta: dict[str, Any]) -> str:
    """The ``edged compile`` line that rebuilds ``artifact`` with 7-bit weights."""
    source = Path((meta.get("source") or {}).get("path") or "MODEL.onnx")
    prefix = artifact.name.removesuffix(".onnx").removesuffix("-int8")
    name = "" if prefix == source.stem.removesuffix("-fp32") else f" --name {prefix}"
    return (f"edged compile {source} --out {artifact.parent} --steps int8{name} "
            f"{SEVEN_BIT_FLAG} (with the --val/--calib/--postprocess it was built with)")
