"""``qemu-x86_64`` user-mode emulation for ``edged isa-check``: find it, run a child under it.

Why apart from the steps: finding (or installing) qemu and telling its own warnings from
the program's output is the same for every step. qemu warns once per CPU-model feature
its TCG leaves out; those names are how ``isa-check`` knows a model with AVX-512 would in
fact run AVX2 kernels, so they are collected, not printed.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

QEMU_NAMES = ("qemu-x86_64-static", "qemu-x86_64")
#: qemu's own warnings about CPU-model features TCG leaves out (not the program's output)
TCG_WARNING = re.compile(r"^qemu-x86_64\S*: warning: TCG doesn't support requested feature: "
                         r"(\S+)")
NICE = ["nice", "-n", "10"]


def find_qemu(install: bool) -> str | None:
    """The qemu-x86_64 binary; apt-get installs qemu-user-static once when allowed."""
    for name in QEMU_NAMES:
        found = shutil.which(name)
        if found:
            return found
    if not install or os.geteuid() != 0 or shutil.which("apt-get") is None:
        return None
    print("isa-check: installing qemu-user-static (apt-get)", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-q"],
                ["apt-get", "install", "-y", "-q", "--no-install-recommends",
                 "qemu-user-static"]):
        if subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL).returncode != 0:
            return None
    return next((p for p in map(shutil.which, QEMU_NAMES) if p), None)


@dataclass
class Ran:
    rc: int
    stdout: str
    dropped: list[str]  # CPU features qemu's TCG left out of the model
    seconds: float
    cpu_seconds: float


def _child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(argv: list[str], cwd: Path, timeout: float, first_on_path: Path) -> Ran:
    """Run niced with ``first_on_path`` (the checkout's edged) first on PYTHONPATH. stderr
    goes to ours, less qemu's feature warnings (collected in ``dropped``)."""
    pythonpath = f"{first_on_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    env = {**os.environ, "PYTHONPATH": pythonpath}
    t0, c0 = time.monotonic(), _child_cpu()
    try:
        p = subprocess.run([*NICE, *argv], cwd=cwd, env=env, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return Ran(124, out + f"\n(timed out after {timeout:.0f} s)", [],
                   time.monotonic() - t0, 0.0)
    dropped: list[str] = []
    for line in p.stderr.splitlines():
        m = TCG_WARNING.match(line)
        if m:
            dropped.append(m.group(1))
        elif line.strip():
            print(f"    | {line}", file=sys.stderr)
    return Ran(p.returncode, p.stdout, sorted(set(dropped)), time.monotonic() - t0,
               _child_cpu() - c0)
