"""``edged device-check``'s parts that need no daemon and no GPU: the table, formatted from
recorded results; the rows it plans for a model; the config it serves each row with; the
CPU facts it prints. (The whole command through real daemons: tests/test_backend_tensorrt.py.)

The GPU figures below are made up to exercise the formatting only; they are not
measurements.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from support.paths import MODELS

from edged.backends.support.isa import cpu_isa
from edged.cli.main import main
from edged.config.file import load_config
from edged.device.candidates import ModelRun, load_model, openvino_candidates, ort_candidates
from edged.device.probe import int8_isa, platform_facts
from edged.device.report import Report
from edged.device.serve import daemon_config
from edged.device.table import FAIL, SKIP, Row, agreement, format_table

RECORDED = [
    Row("digits", "onnxruntime-cpu", "fp32", p50_ms=0.41, items_per_s=5120.4,
        top1_agree_pct=100.0, max_abs_diff=0.0, device="CPUExecutionProvider"),
    Row("digits", "tensorrt", "int8", p50_ms=0.18, items_per_s=21950.0, top1_agree_pct=99.61,
        max_abs_diff=0.0412, device="cuda:0"),
    Row("digits", "onnxruntime-cuda", "fp32", status=SKIP,
        note="CUDAExecutionProvider not in this onnxruntime build (install onnxruntime-gpu)"),
    Row("digits", "tensorrt", "fp16", status=FAIL,
        note="ArtifactError: plan was built on L4T 36.4.3; rebuild it on this device"),
]


def test_table_columns_line_up_and_carry_the_reasons() -> None:
    text = format_table("digits: cnn-fp32.onnx", RECORDED)
    lines = text.splitlines()
    assert lines[0] == "digits: cnn-fp32.onnx"
    header = lines[1]
    assert header.split() == ["backend", "precision", "p50", "ms", "items/s", "top-1", "agree",
                              "max", "|diff|", "device", "status"]
    cpu, trt, cuda, fp16 = lines[2:]
    assert cpu.split() == ["onnxruntime-cpu", "fp32", "0.41", "5,120", "100.00%", "0.0e+00",
                           "CPUExecutionProvider", "ok"]
    assert trt.split() == ["tensorrt", "int8", "0.18", "21,950", "99.61%", "4.1e-02", "cuda:0",
                           "ok"]
    assert cuda.split()[2:7] == ["-", "-", "-", "-", "-"]
    assert cuda.endswith("SKIP: CUDAExecutionProvider not in this onnxruntime build "
                         "(install onnxruntime-gpu)")
    # Only the first clause of a long reason goes in the table.
    assert fp16.endswith("FAIL: ArtifactError: plan was built on L4T 36.4.3")
    # Right-aligned numbers: every row's p50 ends in the same column as the header's.
    end = header.index("p50 ms") + len("p50 ms")
    assert all(line[end - 1] != " " for line in (cpu, trt))
    col = header.index("precision")
    assert cpu.index("fp32") == trt.index("int8") == cuda.index("fp32") == col


def test_rows_round_trip_to_json() -> None:
    doc = RECORDED[1].to_json()
    assert doc["backend"] == "tensorrt" and doc["precision"] == "int8"
    assert doc["items_per_s"] == 21950.0 and doc["status"] == "ok"


def test_agreement_top1_and_max_diff() -> None:
    ref = np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    got = ref.copy()
    got[3] = [0.4, 0.6]  # one row flips
    agree, diff = agreement(ref, got)
    assert agree == 75.0 and diff == pytest.approx(0.2)
    assert agreement(ref, ref) == (100.0, 0.0)
    with pytest.raises(ValueError, match=r"output shape \[4, 3\] differs from the reference"):
        agreement(ref, np.zeros((4, 3)))


# -- the rows planned for a model ----------------------------------------------------------


def _digits_copy(tmp: Path, with_int8: bool) -> ModelRun:
    """cnn-fp32 (and its int8 sibling) copied without validation data: random inputs."""
    shutil.copy(MODELS / "cnn-fp32.onnx", tmp / "cnn-fp32.onnx")
    if with_int8:
        shutil.copy(MODELS / "cnn-int8.onnx", tmp / "cnn-int8.onnx")
    return load_model("digits", tmp / "cnn-fp32.onnx", items=5)


def test_the_reference_is_onnxruntime_fp32_on_cpu_on_validation_data_when_there_is_some(
        tmp_path: Path) -> None:
    m = load_model("digits", MODELS / "cnn-fp32.onnx", items=7)
    assert m.source == "7 samples of validation.npz" and m.x.shape[0] == 7
    assert m.ref.shape == (7, 10) and m.output_name == "logits"
    bare = _digits_copy(tmp_path, with_int8=False)
    assert bare.source == "5 random inputs" and bare.ref.shape == (5, 10)


def test_every_onnxruntime_row_is_planned_served_or_skipped_with_the_reason(
        tmp_path: Path) -> None:
    m = _digits_copy(tmp_path, with_int8=True)
    rows = {(c.backend, c.precision): c for c in ort_candidates(m, ort, tmp_path, 8, 0)}
    assert set(rows) == {("onnxruntime-cpu", "fp32"), ("onnxruntime-cpu", "int8"),
                         ("onnxruntime-cuda", "fp32"), ("onnxruntime-tensorrt", "fp32"),
                         ("onnxruntime-tensorrt", "fp16")}
    int8 = rows["onnxruntime-cpu", "int8"]
    assert int8.variant is not None and int8.variant["path"] == tmp_path / "cnn-int8.onnx"
    providers = ort.get_available_providers()
    cuda = rows["onnxruntime-cuda", "fp32"]
    if "CUDAExecutionProvider" in providers:
        assert cuda.variant is not None and cuda.variant["options"]["providers"] == ["cuda"]
    else:
        assert cuda.variant is None and "install onnxruntime-gpu" in cuda.skip
    trt16 = rows["onnxruntime-tensorrt", "fp16"]
    if "TensorrtExecutionProvider" in providers:
        opts = trt16.variant["options"]["provider_options"]["tensorrt"]  # type: ignore[index]
        assert opts["trt_fp16_enable"] == "true"
        assert opts["trt_profile_max_shapes"] == "input:8x1x28x28"
    else:
        assert "TensorrtExecutionProvider not in this onnxruntime build" in trt16.skip

    (tmp_path / "alone").mkdir()
    alone = ort_candidates(_digits_copy(tmp_path / "alone", with_int8=False), ort, tmp_path,
                           8, 0)
    skip = next(c for c in alone if c.precision == "int8")
    assert skip.variant is None and skip.skip == ("no cnn-int8.onnx beside the model "
                                                  "(edged compile --steps int8 writes one)")


def test_openvino_rows_say_how_to_install_it_when_it_is_missing(tmp_path: Path) -> None:
    m = _digits_copy(tmp_path, with_int8=True)
    rows = openvino_candidates(m, None, tmp_path)
    assert [(c.precision, c.variant) for c in rows] == [("fp32", None), ("int8", None)]
    assert all("pip install 'edged[openvino]'" in c.skip for c in rows)


# -- the config each row is served with ------------------------------------------------------


def test_the_generated_config_is_one_edged_serve_reads_with_nested_provider_options(
        tmp_path: Path) -> None:
    variant = {"backend": "onnxruntime", "path": MODELS / "cnn-fp32.onnx",
               "options": {"providers": ["tensorrt", "cuda"], "provider_options": {
                   "tensorrt": {"device_id": "0", "trt_fp16_enable": "true",
                                "trt_profile_min_shapes": "input:1x1x28x28"}}}}
    cfg = load_config(daemon_config(tmp_path / "edged.toml", "digits", variant, 4))
    (m,) = cfg.models
    assert m.name == "digits" and m.max_batch_size == 4 and m.required
    (v,) = m.variants
    assert v.name == "digits-onnxruntime" and v.path == MODELS / "cnn-fp32.onnx"
    assert v.options.providers == ("tensorrt", "cuda")  # type: ignore[attr-defined]
    assert v.options.provider_options["tensorrt"] == {  # type: ignore[attr-defined]
        "device_id": "0", "trt_fp16_enable": "true", "trt_profile_min_shapes": "input:1x1x28x28"}


# -- facts and options -------------------------------------------------------------------------


CPUINFO_X86_AVX2 = """\
processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B12
flags\t\t: fpu sse sse2 avx avx2 fma
"""
CPUINFO_ARM = """\
processor\t: 0
Features\t: fp asimd evtstrm aes crc32 asimddp
CPU part\t: 0xd0b
Model\t\t: Raspberry Pi 5 Model B Rev 1.0
"""


def test_the_cpu_facts_name_the_cpu_and_what_its_int8_instructions_mean(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    x86 = tmp_path / "x86"
    x86.write_text(CPUINFO_X86_AVX2)
    monkeypatch.setenv("EDGED_CPUINFO", str(x86))
    r = Report(as_json=False)
    platform_facts(r)
    assert r.facts["cpu"] == "AMD EPYC 7B12"
    assert r.facts["cpu int8"].startswith("x86_64 without VNNI: ONNX Runtime's U8S8 kernels "
                                          "saturate 8-bit weights")
    assert "--int8-reduce-range on" in r.facts["cpu int8"]
    assert "INFO  cpu                                AMD EPYC 7B12" in capsys.readouterr().out

    arm = tmp_path / "arm"
    arm.write_text(CPUINFO_ARM)
    assert int8_isa(cpu_isa(arm)) == "aarch64 with dotprod (8-bit weights do not saturate)"
    assert "INT8 instructions unknown" in int8_isa(cpu_isa(tmp_path / "missing"))


@pytest.mark.parametrize("bad", [["--items", "0"], ["--max-batch", "-1"], ["--seconds", "0"]])
def test_bad_options_are_exit_2_naming_the_option(
        bad: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["device-check", *bad])
    assert e.value.code == 2
    assert f"argument {bad[0]}: must be" in capsys.readouterr().err
