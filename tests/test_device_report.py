"""The device-check table, formatted from recorded results (no GPU ran here).

The GPU figures below are made up to exercise the formatting only; they are not
measurements.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

# device_report.py lives beside its only user, scripts/ops/device-check; load it by path.
_PATH = Path(__file__).resolve().parent.parent / "scripts" / "ops" / "device_report.py"
_spec = importlib.util.spec_from_file_location("device_report", _PATH)
assert _spec is not None and _spec.loader is not None
device_report = importlib.util.module_from_spec(_spec)
sys.modules["device_report"] = device_report  # dataclasses look their module up by name
_spec.loader.exec_module(device_report)
FAIL, SKIP, Row = device_report.FAIL, device_report.SKIP, device_report.Row
agreement, format_table = device_report.agreement, device_report.format_table

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
