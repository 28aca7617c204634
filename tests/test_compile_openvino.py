"""`edged compile --steps openvino`: OpenVINO IR rungs in fp32 and INT8, validated, timed
and put on the ladder by the same rule as every other rung (real OpenVINO, real ORT)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
from support.paths import MODELS, ROOT

pytest.importorskip("onnx")

from edged.backends.support.sidecar import read_sidecar
from edged.compile import cli
from edged.compile.openvino_steps import bf16_missing
from edged.verify.golden import read_golden

needs_ov = pytest.mark.skipif(importlib.util.find_spec("openvino") is None,
                              reason="OpenVINO is not installed (pip install 'edged[openvino]')")
FAST = ["--bench-runs", "3", "--max-batch", "4", "--threads", "2", "--no-progress"]
DET = ROOT / "models" / "digits-det"


@pytest.fixture(scope="module")
def val64(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with np.load(MODELS / "validation.npz") as z:
        x, y = z["x"][:64], z["y"][:64]
    p = tmp_path_factory.mktemp("val") / "val64.npz"
    np.savez(p, x=x, y=y)
    shutil.copy(MODELS / "model.json", p.parent / "model.json")
    return p


@needs_ov
def test_fp32_and_int8_rungs_are_built_validated_timed_and_laddered(
        tmp_path: Path, val64: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    rc = cli.main([str(MODELS / "cnn-fp32.onnx"), "--out", str(out), "--val", str(val64),
                   "--name", "digits", "--steps", "int8,openvino", "--relative-to", str(out),
                   *FAST])
    log = capsys.readouterr().out
    assert rc == 0, log
    # bf16 where this CPU computes it natively (AVX-512 BF16, AMX, Arm BF16), else skipped
    bf16 = bf16_missing() is None
    precisions = ("fp32", "bf16", "int8") if bf16 else ("fp32", "int8")
    assert ("openvino: built " + ", ".join(f"digits-ov-{p}.xml" for p in precisions)) in log
    if not bf16:
        assert "openvino bf16: skipped — this CPU has no native bfloat16" in log
    for precision in precisions:
        xml = out / f"digits-ov-{precision}.xml"
        assert xml.with_suffix(".bin").is_file()
        meta = read_sidecar(xml)
        assert meta is not None and meta["backend"] == "openvino" and meta["step"] == "openvino"
        assert meta["precision"] == precision and meta["tools"]["openvino"]
        assert meta["options"] == {"precision": "bf16" if precision == "bf16" else "f32"}
        assert meta["validation"]["passed"] and meta["validation"]["samples"] == 64
        assert meta["speed"]["latency_ms_p50"] > 0 and meta["speed"]["throughput_per_s"] > 0
        g = read_golden(xml)  # OpenVINO's own outputs, never ORT's int8 golden
        assert g is not None and g.precision == precision
    fp32 = read_sidecar(out / "digits-ov-fp32.xml")
    assert fp32["validation"]["agreement_pct"] == 100.0
    assert fp32["validation"]["max_abs_diff"] < 1e-3  # f32, not the plugin's bf16 default
    assert "digits-ov-int8.xml: ok:" in log
    if bf16:  # one copy of the weights: the bf16 rung's .bin is the fp32 rung's
        assert (out / "digits-ov-bf16.bin").samefile(out / "digits-ov-fp32.bin")
        assert read_sidecar(out / "digits-ov-bf16.xml")["validation"]["agreement_pct"] >= 99.0
    text = (out / "variants.toml").read_text()
    # On the ladder or commented out with the reason; timing decides which, not this test.
    assert 'name = "digits-ov-fp32"' in text and 'name = "digits-ov-int8"' in text
    assert 'backend = "openvino"' in text
    for v in tomllib.loads(text)["models"]["variants"]:
        assert (out / v["path"]).exists(), v
        if v["backend"] == "openvino":
            assert v["options"]["precision"] in ("f32", "bf16") and v["path"].endswith(".xml")


@needs_ov
def test_openvino_alone_builds_fp32_and_says_why_not_int8(
        tmp_path: Path, val64: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main([str(MODELS / "cnn-fp32.onnx"), "--out", str(tmp_path), "--val", str(val64),
                   "--name", "digits", "--steps", "openvino", *FAST])
    log = capsys.readouterr().out
    assert rc == 0, log
    assert (tmp_path / "digits-ov-fp32.xml").is_file()
    assert not (tmp_path / "digits-ov-int8.xml").exists()
    assert "openvino int8: skipped — no digits-int8.onnx" in log and "--steps int8,openvino" in log


@needs_ov
def test_detector_rungs_are_validated_by_map(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The trained digit detector: the int8 rung comes from its shipped QDQ model."""
    shutil.copy(DET / "det-int8.onnx", tmp_path / "det-int8.onnx")
    post = tmp_path / "post.toml"
    post.write_text('[postprocess]\nkind = "detect"\ndecoder = "yolov8"\nconf = 0.001\n'
                    f'labels = {[str(i) for i in range(10)]!r}\n'.replace("'", '"'))
    rc = cli.main([str(DET / "det-fp32.onnx"), "--out", str(tmp_path), "--steps", "openvino",
                   "--val", str(DET / "val.npz"), "--postprocess", str(post), *FAST])
    log = capsys.readouterr().out
    assert rc == 0, log
    for precision in ("fp32", "int8"):
        v = read_sidecar(tmp_path / f"det-ov-{precision}.xml")["validation"]
        assert v["passed"] and v["map50_pct"] > 85.0, v
    fp32 = read_sidecar(tmp_path / "det-ov-fp32.xml")["validation"]
    assert abs(fp32["drop_pct"]) < 0.1  # fp32 OpenVINO finds what ORT finds


def compile_without(module: str, steps: str, out: Path) -> subprocess.CompletedProcess[str]:
    """``edged compile`` of the digits CNN with ``steps``, where ``module`` cannot be
    imported (as on a machine without it)."""
    code = (f"import sys; sys.modules[{module!r}] = None\n"
            "from edged.compile import cli\n"
            f"sys.exit(cli.main([{str(MODELS / 'cnn-fp32.onnx')!r}, '--out', "
            f"{str(out)!r}, '--steps', {steps!r}, '--bench-runs', '2', "
            "'--no-progress']))\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


def test_without_openvino_the_step_is_skipped_with_the_extra_named(tmp_path: Path) -> None:
    r = compile_without("openvino", "openvino", tmp_path)
    assert "openvino: skipped — OpenVINO is not installed" in r.stdout, r.stdout + r.stderr
    assert "pip install 'edged[openvino]'" in r.stdout
    assert r.returncode == 1  # the only step asked for could not run


def test_without_tvm_its_step_is_skipped_and_the_others_still_run(tmp_path: Path) -> None:
    """A device without TVM (the arm64 check's Debian root) compiles the other rungs."""
    r = compile_without("tvm", "ort-opt,tvm", tmp_path)
    assert "tvm: skipped — TVM is not installed here" in r.stdout, r.stdout + r.stderr
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "cnn-fp32-opt.onnx").exists()
