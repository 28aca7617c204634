"""``edged check --verify`` (the swap check of every variant against its reference, run in
process on this device) and ``edged isa-check`` (``scripts/ops/isa-check``: the same and the
model tests under an emulated AVX2-only CPU). The emulated run takes minutes: only with
EDGED_TEST_ISA=1; its parts (qemu's warnings, the kernel-path step, the detector config,
exit 2 when it cannot run) are checked here without emulation."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.configs import digits_config, digits_variants, variant
from support.paths import MODELS, ROOT

from edged.cli.main import main
from edged.config.file import load_config
from edged.device import isa_check, qemu


def check_verify(capsys: pytest.CaptureFixture[str], config: Path) -> tuple[int, dict[str, Any]]:
    rc = main(["check", "--verify", "--json", str(config)])
    return rc, json.loads(capsys.readouterr().out)


def by_name(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{v['model']}/{v['variant']}": v for v in doc["variants"]}


def test_every_shipped_variant_of_the_default_config_would_go_live_here(
        capsys: pytest.CaptureFixture[str]) -> None:
    rc, doc = check_verify(capsys, ROOT / "config.toml")
    assert rc == 0 and doc["ok"], doc
    v = by_name(doc)
    assert set(v) == {"digits/cnn-fp32", "digits/cnn-int8", "digits/small-fp32",
                      "person/ssdlite-fp32", "person/ssdlite-int8"}
    assert v["digits/cnn-fp32"]["role"] == v["person/ssdlite-fp32"]["role"] == "reference"
    int8 = v["digits/cnn-int8"]
    assert int8["role"] == "checked" and int8["precision"] == "int8"
    assert int8["inputs"] == "golden file cnn-int8.onnx.golden.npz"
    assert int8["measures"]["logits.top1"] >= 0.97
    assert "logits.vs_build_machine" in int8["measures"]
    det = v["person/ssdlite-int8"]["measures"]
    assert det["det.precision"] >= 0.9 and det["det.recall"] >= 0.9
    assert doc["cpu"]["machine"] and isinstance(doc["cpu"]["features"], list)


def noisy_copy(tmp: Path) -> Path:
    """cnn-fp32 with its weights replaced by noise, shipped with cnn-fp32's golden file."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(MODELS / "cnn-fp32.onnx")
    rng = np.random.default_rng(0)
    for init in model.graph.initializer:
        w = numpy_helper.to_array(init)
        if w.dtype == np.float32 and w.size > 16:
            init.CopyFrom(numpy_helper.from_array(
                rng.normal(0, float(w.std()) or 0.1, w.shape).astype(np.float32), init.name))
    out = tmp / "cnn-noisy.onnx"
    onnx.save(model, out)
    shutil.copy(MODELS / "cnn-fp32.onnx.golden.npz", tmp / "cnn-noisy.onnx.golden.npz")
    return out


def with_variant(tmp: Path, name: str, path: Path, **fields: Any) -> Path:
    """The digits model with cnn-fp32 and one more variant."""
    return digits_config(tmp, variant_tables=[*digits_variants(("cnn-fp32",)),
                                              variant(name, path, **fields)])


def test_a_variant_that_computes_something_else_fails_naming_the_measure(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = with_variant(tmp_path, "cnn-noisy", noisy_copy(tmp_path))
    rc = main(["check", "--verify", str(cfg)])
    out = capsys.readouterr().out
    assert rc == 1
    assert "ok   digits/cnn-fp32 fp32 reference" in out
    line = next(ln for ln in out.splitlines() if "digits/cnn-noisy" in ln)
    assert line.startswith("FAIL") and "top-1 agrees with the reference on" in line, out
    assert "1 FAILED" in out


def test_a_variant_without_check_inputs_fails_and_one_marked_unverified_passes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bare = tmp_path / "copy.onnx"  # no golden file, no model.json beside it
    shutil.copy(MODELS / "cnn-int8.onnx", bare)
    rc, doc = check_verify(capsys, with_variant(tmp_path, "copy-int8", bare))
    assert rc == 1 and not doc["ok"]
    copy = by_name(doc)["digits/copy-int8"]
    assert not copy["ok"] and "has no check inputs" in copy["error"]

    rc, doc = check_verify(capsys, with_variant(tmp_path, "copy-int8", bare, verify=False))
    assert rc == 0, doc
    copy = by_name(doc)["digits/copy-int8"]
    assert copy["ok"] and copy["role"] == "unverified" and not copy["measures"]


def test_a_reference_without_check_inputs_goes_live_and_the_others_are_checked_against_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bare = tmp_path / "copy.onnx"
    shutil.copy(MODELS / "cnn-fp32.onnx", bare)
    cfg = with_variant(tmp_path, "copy-fp32", bare, reference=True)
    rc, doc = check_verify(capsys, cfg)
    assert rc == 0, doc
    v = by_name(doc)
    assert v["digits/copy-fp32"]["role"] == "reference" and v["digits/copy-fp32"]["ok"]
    assert "no check inputs" in v["digits/copy-fp32"]["error"]
    assert v["digits/cnn-fp32"]["role"] == "checked"
    assert v["digits/cnn-fp32"]["measures"]["logits.top1"] == 1.0


def test_an_invalid_config_is_exit_4_with_its_problems(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[[models]]\nname = 3\n")
    assert main(["check", "--verify", str(bad)]) == 4  # the CLI's code for a bad config
    err = capsys.readouterr().err
    assert "models[0].name" in err and "fix the file" in err, err


# -- edged isa-check --------------------------------------------------------------------


QEMU_LIKE_CHILD = """\
import os, sys
import edged
w = "qemu-x86_64: warning: TCG doesn't support requested feature: "
sys.stderr.write(w + "CPUID.07H:EBX.avx512f [bit 16]\\n" + w + "CPUID.07H:EBX.avx512f [bit 16]\\n")
sys.stderr.write(w + "CPUID.07H:ECX.avx512-vnni [bit 11]\\n" + "a real warning\\n")
print(os.path.dirname(edged.__file__))
sys.exit(3)
"""


def test_qemus_feature_warnings_are_collected_and_the_programs_stderr_is_passed_on(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    child = tmp_path / "child.py"
    child.write_text(QEMU_LIKE_CHILD)
    ran = qemu.run([sys.executable, str(child)], tmp_path, 60, first_on_path=ROOT)
    assert ran.rc == 3
    assert ran.dropped == ["CPUID.07H:EBX.avx512f", "CPUID.07H:ECX.avx512-vnni"]
    assert Path(ran.stdout.strip()) == ROOT / "edged"  # this checkout's edged first
    err = capfd.readouterr().err
    assert "    | a real warning" in err and "TCG" not in err


def _verify_doc(drift: float) -> dict[str, Any]:
    """``edged check --verify --json``'s variants, as recorded: one fp32, one int8."""
    return {"variants": [
        {"model": "digits", "variant": "cnn-fp32", "precision": "fp32",
         "measures": {"logits.vs_build_machine": 0.0}},
        {"model": "digits", "variant": "cnn-int8", "precision": "int8",
         "measures": {"logits.top1": 1.0, "logits.vs_build_machine": drift}}]}


def _cpu_run(cpu: str, features: list[str], drift: float) -> isa_check.CpuRun:
    return isa_check.CpuRun(cpu, features, verify={"config.toml": _verify_doc(drift)})


def test_the_kernel_path_step_passes_only_when_int8_results_differ_from_native() -> None:
    assert isa_check.drift(_verify_doc(0.5)) == {
        "digits/cnn-int8": {"logits.vs_build_machine": 0.5}}
    native = _cpu_run("native", ["AVX2", "AVX512F", "AVX512_VNNI"], 0.02)
    differs = isa_check.kernel_path(native, _cpu_run("Haswell-v4", ["AVX2"], 0.4))
    assert differs.status == "PASS" and "native 0.02, emulated 0.4" in differs.detail
    same = isa_check.kernel_path(native, _cpu_run("Haswell-v4", ["AVX2"], 0.02))
    assert same.status == "FAIL" and "did not take another kernel path" in same.detail
    avx2_host = _cpu_run("native", ["AVX2"], 0.02)
    assert isa_check.kernel_path(avx2_host, _cpu_run("Haswell-v4", ["AVX2"], 0.02)).status \
        == "SKIP"


def test_the_detector_config_it_checks_is_valid_and_names_the_shipped_files(
        tmp_path: Path) -> None:
    path = tmp_path / "digits-det.toml"
    path.write_text(isa_check.det_config())
    (m,) = load_config(path).models
    assert m.name == "digits-det" and m.postprocess is not None
    assert [v.name for v in m.variants] == ["det-fp32", "det-int8", "det128-fp32"]
    assert all(v.path.is_file() for v in m.variants)


def test_isa_check_is_exit_2_with_the_reason_when_it_cannot_run_here(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no qemu-x86_64 on it
    assert main(["isa-check", "--no-install", "--quick"]) == 2
    err = capsys.readouterr().err
    if platform.machine() == "x86_64":
        assert "isa-check: qemu-x86_64 is missing: install Debian's qemu-user-static" in err
    else:
        assert "isa-check: this emulates x86-64 CPUs on an x86-64 host" in err


@pytest.mark.skipif(os.environ.get("EDGED_TEST_ISA") != "1",
                    reason="emulating an AVX2-only CPU with qemu takes minutes: set "
                           "EDGED_TEST_ISA=1 to run edged isa-check")
@pytest.mark.timeout(3600)
def test_isa_check_passes_on_an_emulated_avx2_only_cpu(tmp_path: Path) -> None:
    report = tmp_path / "isa.json"
    p = subprocess.run([sys.executable, "-m", "edged", "isa-check", "--json", str(report)],
                       cwd=tmp_path, capture_output=True, text=True, timeout=3500,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    print(p.stdout)  # the report, for pytest -rP
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    doc = json.loads(report.read_text())
    runs = {r["cpu"]: r for r in doc["runs"]}
    haswell = runs["Haswell-v4"]
    assert "AVX2" in haswell["features"] and "AVX512F" not in haswell["features"]
    steps = {s["name"]: s["status"] for s in haswell["steps"]}
    assert steps["verify config.toml"] == steps["verify digits-det"] == "PASS", steps
    assert any(k.startswith("tests") and v == "PASS" for k, v in steps.items()), steps
    for label in ("config.toml", "digits-det"):
        assert all(v["ok"] for v in haswell["verify"][label]["variants"])


def test_the_tests_it_runs_by_default_exist() -> None:
    """A renamed test file would make every ``edged isa-check`` stop at pytest's "file
    not found" before it checked anything."""
    from support.paths import ROOT

    from edged.device.isa_check import DEFAULT_TESTS

    assert [t for t in DEFAULT_TESTS if not (ROOT / t).is_file()] == []
