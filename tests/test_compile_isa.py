"""INT8 across CPUs: the build CPU's ISA in the sidecar, and the warning at load.

ONNX Runtime's U8S8 kernels saturate with 8-bit weights on an x86 CPU without VNNI
(``edged.backends.support.isa``). The CPU is read from files in ``/proc/cpuinfo``'s own
format, here those of three real machines (an AVX2-only AMD EPYC, an AVX-512 VNNI
Xeon, a Raspberry Pi 5), so every assertion holds whatever CPU runs the suite.
Artifacts are built by the real pipeline on the shipped digits model and loaded by
``edged check`` and the daemon in subprocesses told which cpuinfo to read.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.configs import config, model_table, variant
from support.daemons import Daemon
from support.paths import MODELS, ROOT

from edged.backends.support.isa import CPUINFO_ENV, CpuIsa, cpu_isa, int8_weights_warning
from edged.backends.support.sidecar import read_sidecar
from edged.compile.options import CompileOptions
from edged.compile.run import Result, run

DIGITS = MODELS
MODEL = DIGITS / "cnn-fp32.onnx"

# /proc/cpuinfo of a GCP n2d VM (AMD EPYC 7B12, Zen 2: AVX2, no VNNI), one processor shown.
EPYC_AVX2 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 23
model\t\t: 49
model name\t: AMD EPYC 7B12
stepping\t: 0
microcode\t: 0x1000065
cpu MHz\t\t: 2249.998
cache size\t: 512 KB
physical id\t: 0
siblings\t: 2
core id\t\t: 0
cpu cores\t: 1
fpu\t\t: yes
fpu_exception\t: yes
cpuid level\t: 13
wp\t\t: yes
flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush \
mmx fxsr sse sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl \
nonstop_tsc cpuid extd_apicid tsc_known_freq pni pclmulqdq ssse3 fma cx16 sse4_1 sse4_2 x2apic \
movbe popcnt aes xsave avx f16c rdrand hypervisor lahf_lm cmp_legacy cr8_legacy abm sse4a \
misalignsse 3dnowprefetch osvw topoext ssbd ibrs ibpb stibp vmmcall fsgsbase tsc_adjust bmi1 \
avx2 smep bmi2 rdseed adx smap clflushopt clwb sha_ni xsaveopt xsavec xgetbv1 clzero \
xsaveerptr arat npt nrip_save umip rdpid
bugs\t\t: sysret_ss_attrs spectre_v1 spectre_v2 spec_store_bypass retbleed smt_rsb
bogomips\t: 4499.99
TLB size\t: 3072 4K pages
clflush size\t: 64
cache_alignment\t: 64
address sizes\t: 48 bits physical, 48 bits virtual
power management:

"""
# An AVX-512 VNNI Xeon (Cascade Lake), the flags line abridged to what matters around it.
XEON_VNNI = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 85
model name\t: Intel(R) Xeon(R) CPU @ 2.80GHz
flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep sse sse2 ssse3 fma sse4_1 sse4_2 \
avx f16c avx2 avx512f avx512dq avx512cd avx512bw avx512vl xsaveopt arat avx512_vnni md_clear
bogomips\t: 5600.00

"""
# Raspberry Pi 5 (Cortex-A76): dotprod is "asimddp" in /proc/cpuinfo.
PI5 = """processor\t: 0
BogoMIPS\t: 108.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm \
lrcpc dcpop asimddp
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x4
CPU part\t: 0xd0b
CPU revision\t: 1

Revision\t: d04170
Model\t\t: Raspberry Pi 5 Model B Rev 1.0
"""


@pytest.fixture(scope="module")
def cpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("cpuinfo")
    files = {"avx2": EPYC_AVX2, "vnni": XEON_VNNI, "pi5": PI5}
    for name, text in files.items():
        (d / name).write_text(text)
    return {name: d / name for name in files}


def test_the_isa_is_read_from_cpuinfo_files(cpus: dict[str, Path], tmp_path: Path) -> None:
    avx2, vnni, pi5 = (cpu_isa(cpus[n]) for n in ("avx2", "vnni", "pi5"))
    assert avx2 == CpuIsa("x86_64", ()) and avx2.saturates_u8s8 and not avx2.vnni
    assert vnni == CpuIsa("x86_64", ("avx512_vnni",)) and vnni.vnni and not vnni.saturates_u8s8
    assert pi5 == CpuIsa("aarch64", ("dotprod",)) and not pi5.saturates_u8s8
    assert avx2.to_json() == {"arch": "x86_64", "int8": [], "vnni": False}
    missing = cpu_isa(tmp_path / "absent")  # unknown flags: never called saturating
    assert missing.int8 is None and not missing.saturates_u8s8


def _int8(out: Path, name: str, cpuinfo: Path, reduce_range: str, val: Path) -> Result:
    return run(CompileOptions(model=MODEL, out=out, steps=("int8",), name=name, val=val,
                              int8_reduce_range=reduce_range, cpuinfo=cpuinfo,
                              bench_runs=3, max_batch=4, threads=1))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory,
          cpus: dict[str, Path]) -> dict[str, tuple[Path, Result]]:
    """``seven``: auto on the AVX2 EPYC (7-bit chosen); ``eight``: 8-bit on the VNNI Xeon."""
    d = tmp_path_factory.mktemp("isa")
    with np.load(DIGITS / "validation.npz") as z:
        np.savez(d / "val64.npz", x=z["x"][:64], y=z["y"][:64])
    seven = _int8(d / "seven", "seven", cpus["avx2"], "auto", d / "val64.npz")
    eight = _int8(d / "eight", "eight", cpus["vnni"], "auto", d / "val64.npz")
    return {"seven": (d / "seven" / "seven-int8.onnx", seven),
            "eight": (d / "eight" / "eight-int8.onnx", eight)}


def test_the_sidecar_records_the_build_cpu_and_the_weight_width(built) -> None:
    seven, r7 = built["seven"]
    eight, r8 = built["eight"]
    assert r7.exit_code == 0 and r8.exit_code == 0, r7.log + r8.log
    m7, m8 = read_sidecar(seven), read_sidecar(eight)
    assert m7 is not None and m8 is not None
    assert m7["build_cpu"] == {"arch": "x86_64", "int8": [], "vnni": False}
    assert m7["target"]["reduce_range"] is True
    assert "7-bit (reduce_range)" in m7["target"]["quantization"]
    assert any("int8: this CPU has no VNNI" in line for line in r7.log)
    assert m8["build_cpu"] == {"arch": "x86_64", "int8": ["avx512_vnni"], "vnni": True}
    assert m8["target"]["reduce_range"] is False and "S8 weights" in m8["target"]["quantization"]
    assert r7.outcomes == {"seven-int8.onnx": "ok"} and r8.outcomes == {"eight-int8.onnx": "ok"}


def test_the_warning_is_for_8_bit_weights_on_a_saturating_cpu(built, cpus) -> None:
    seven, _ = built["seven"]
    eight, _ = built["eight"]
    avx2, vnni, pi5 = (cpu_isa(cpus[n]) for n in ("avx2", "vnni", "pi5"))
    warning = int8_weights_warning(eight, avx2)
    assert warning is not None and warning.startswith(f"{eight}: INT8 with 8-bit weights")
    assert "(built on x86_64 with VNNI)" in warning and "without VNNI" in warning
    assert (f"edged compile {MODEL} --out {eight.parent} --steps int8 --name eight "
            "--int8-reduce-range on") in warning
    assert int8_weights_warning(eight, vnni) is None
    assert int8_weights_warning(eight, pi5) is None
    for cpu in (avx2, vnni, pi5):  # 7-bit weights run right everywhere
        assert int8_weights_warning(seven, cpu) is None
    assert int8_weights_warning(MODEL, avx2) is None  # no sidecar: not judged


def _config(tmp: Path, *variants: Path) -> Path:
    digits = model_table("digits", [variant(v.stem, v) for v in variants], max_batch_size=4)
    return config(tmp, models=[digits], server="drain_timeout_s = 2.0")


def _check(cfg: Path, cpuinfo: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), CPUINFO_ENV: str(cpuinfo)}
    return subprocess.run([sys.executable, "-m", "edged", "check", str(cfg)],
                          env=env, capture_output=True, text=True, timeout=120)


def test_edged_check_shows_the_warning_on_a_cpu_without_vnni(built, cpus, tmp_path) -> None:
    seven, _ = built["seven"]
    eight, _ = built["eight"]
    cfg = _config(tmp_path, eight, seven)
    r = _check(cfg, cpus["avx2"])
    text = r.stdout + r.stderr
    assert r.returncode == 0, text  # a warning, not a refusal: the artifact still loads
    assert text.count("INT8 with 8-bit weights") == 1, text
    assert f"{eight}: INT8 with 8-bit weights" in text and "--int8-reduce-range on" in text
    r = _check(cfg, cpus["vnni"])
    assert r.returncode == 0 and "8-bit weights" not in r.stdout + r.stderr


def test_the_daemon_logs_the_warning_once_at_load(built, cpus, tmp_path) -> None:
    eight, _ = built["eight"]
    d = Daemon(_config(tmp_path, eight), tmp_path, env={CPUINFO_ENV: str(cpus["avx2"])})
    try:
        with d.client() as c:
            assert c.infer("digits", np.zeros((1, 1, 28, 28), np.float32)).ok
    finally:
        d.stop()
    assert d.log().count("INT8 with 8-bit weights") == 1, d.log_tail()
