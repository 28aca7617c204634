"""The TensorRT compile step's parts that run without a GPU.

Plan keys and file names, the L4T release, the timing-cache name, which ONNX and
builder flag make each precision, the symmetric Q/DQ model TensorRT parses (made and
run here with ONNX Runtime on the shipped digits model), the refusal of a plan from
another device with the rebuild command, and ``edged compile`` skipping the step
with its reason. Building and serving plans needs a GPU: tests/test_backend_tensorrt.py.
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edged.backends.support.sidecar import write_sidecar
from edged.backends.tensorrt import backend as trtb
from edged.backends.tensorrt import keys as keys
from edged.backends.tensorrt import plan as trtp
from edged.backends.tensorrt.cuda import probe
from edged.compile import tensorrt_build as trt_build
from edged.compile import tensorrt_steps as plans
from edged.compile.data import Preprocess, load_dataset
from edged.compile.options import CompileOptions, parse_precisions
from edged.compile.run import run
from edged.config.runtimes import TensorRTOptions
from edged.errors import ArtifactError

REPO = Path(__file__).resolve().parent.parent
DIGITS = REPO / "models" / "digits"
GPU_OK, GPU_WHY = probe()

ORIN = keys.DeviceKey(gpu="Orin", compute_capability="8.7", tensorrt="10.3.0", l4t="36.4.3")
RTX = keys.DeviceKey(gpu="NVIDIA GeForce RTX 3080", compute_capability="8.6",
                     tensorrt="10.7.0.23")

# Real first lines of /etc/nv_tegra_release (JetPack 6.2 and 5.1.3).
JP6 = ("# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, "
       "DATE: Wed Jan  8 01:49:37 UTC 2025\n# KERNEL_VARIANT: oot\nTARGET_USERSPACE_LIB_DIR=nvidia")
JP5 = "# R35 (release), REVISION: 5.0, GCID: 35550185, BOARD: t186ref, EABI: aarch64, DATE: x\n"


# -- keys -------------------------------------------------------------------------------


def test_l4t_release_is_parsed_from_the_tegra_file(tmp_path: Path) -> None:
    assert keys.parse_l4t_release(JP6) == "36.4.3"
    assert keys.parse_l4t_release(JP5) == "35.5.0"
    assert keys.parse_l4t_release("") is None
    assert keys.parse_l4t_release("Ubuntu 22.04") is None
    f = tmp_path / "nv_tegra_release"
    f.write_text(JP6)
    assert keys.l4t_release(f) == "36.4.3"
    assert keys.l4t_release(tmp_path / "absent") is None


def test_plan_file_names_carry_gpu_sm_l4t_tensorrt_and_precision() -> None:
    assert keys.plan_file_name("cnn", "fp16", ORIN) == \
        "cnn-trt-fp16.sm87-orin-l4t36.4.3-trt10.3.0.engine"
    assert keys.plan_file_name("cnn", "int8", RTX) == \
        "cnn-trt-int8.sm86-geforce-rtx-3080-trt10.7.0.23.engine"
    # The ladder name is the same on every device; only the file differs.
    assert keys.plan_variant_name("cnn", "int8") == "cnn-trt-int8"
    names = {keys.plan_file_name("cnn", p, k) for p in keys.PRECISIONS for k in (ORIN, RTX)}
    assert len(names) == 6
    with pytest.raises(ValueError, match="precision must be one of fp32, fp16, int8; got 'int4'"):
        keys.plan_file_name("cnn", "int4", ORIN)


def test_timing_cache_is_keyed_by_device_not_precision() -> None:
    assert keys.timing_cache_name(ORIN) == "tensorrt-timing.sm87-orin-l4t36.4.3-trt10.3.0.cache"
    newer = keys.DeviceKey(gpu="Orin", compute_capability="8.7", tensorrt="10.7.0", l4t="36.5.0")
    assert keys.timing_cache_name(newer) != keys.timing_cache_name(ORIN)
    assert ORIN.to_json()["slug"] == "sm87-orin-l4t36.4.3-trt10.3.0"


# -- recipes ----------------------------------------------------------------------------


def test_recipes_per_precision_and_tensorrt_major(tmp_path: Path) -> None:
    src, f16, q = tmp_path / "m.onnx", tmp_path / "m-fp16.onnx", tmp_path / "m-q.onnx"
    assert plans.recipe("fp32", 10, src) == plans.Recipe("fp32", src)
    assert plans.recipe("fp16", 10, src) == plans.Recipe("fp16", src, fp16_flag=True)
    assert plans.recipe("fp16", 11, src, fp16_onnx=f16) == plans.Recipe("fp16", f16)
    assert plans.recipe("int8", 10, src, int8_onnx=q) == plans.Recipe("int8", q)
    with pytest.raises(ValueError, match="no FP16 builder flag"):
        plans.recipe("fp16", 11, src)
    with pytest.raises(ValueError, match="symmetric Q/DQ"):
        plans.recipe("int8", 10, src)
    with pytest.raises(ValueError, match="got 'bf16'"):
        plans.recipe("bf16", 10, src)


def test_network_typing_follows_nvidia_advice() -> None:
    t = trt_build.network_typing
    assert t(10, "fp32", False) == (False, False)
    assert t(10, "fp32", True) == (False, True)  # FP16 flag: weakly typed
    assert t(10, "int8", False) == (True, False)  # explicit quantization: strongly typed
    assert t(10, "fp16", False) == (True, False)
    assert t(11, "fp32", False) == (True, False)
    with pytest.raises(trt_build.EngineBuildError, match="no FP16 builder flag"):
        t(11, "fp32", True)
    with pytest.raises(trt_build.EngineBuildError, match="already int8"):
        t(10, "int8", True)


def test_precision_list_parsing() -> None:
    assert parse_precisions("all") == ("fp32", "fp16", "int8")
    assert parse_precisions("int8, fp32") == ("fp32", "int8")
    for bad in ("", "fp8", "fp32,int4"):
        with pytest.raises(ValueError, match="comma list of fp32, fp16, int8"):
            parse_precisions(bad)


# -- Q/DQ models TensorRT parses ----------------------------------------------------------


def test_the_onnxruntime_int8_model_is_not_parseable_by_tensorrt() -> None:
    problems = plans.qdq_problems(DIGITS / "cnn-int8.onnx")
    text = " | ".join(problems)
    assert "non-zero zero points" in text and "uint8" in text and "int32" in text
    assert plans.qdq_problems(DIGITS / "cnn-fp32.onnx") == [
        "cnn-fp32.onnx has no QuantizeLinear/DequantizeLinear nodes"]


def test_symmetric_twin_is_made_parseable_and_agrees(tmp_path: Path) -> None:
    import onnxruntime as ort

    (tmp_path / "cnn-int8.onnx").write_bytes((DIGITS / "cnn-int8.onnx").read_bytes())
    spec = {"name": "input", "dtype": "float32", "shape": [-1, 1, 28, 28]}
    pre = Preprocess.from_json(DIGITS / "model.json")
    val = load_dataset(DIGITS / "validation.npz", spec, pre, limit=64)
    qdq, note = plans.int8_source(tmp_path, "cnn", DIGITS / "cnn-fp32.onnx", "input", val)
    assert qdq == tmp_path / "cnn-int8-s8s8.onnx" and qdq.is_file()
    assert "symmetric S8S8" in note and "non-zero zero points" in note
    assert plans.qdq_problems(qdq) == []
    assert not (tmp_path / "cnn-int8-s8s8.onnx.json").exists()  # no ladder variant of its own

    x = load_dataset(DIGITS / "validation.npz", spec, pre, limit=256).x
    ref = ort.InferenceSession(str(DIGITS / "cnn-fp32.onnx")).run(None, {"input": x})[0]
    # Q/DQ as written (what TensorRT implements): ORT with graph optimizations off runs
    # every DequantizeLinear -> float op -> QuantizeLinear literally. (With them on, ORT's
    # fused x86 S8S8 kernels saturate on this model: ~64% agreement. The twin is for
    # TensorRT only, which is why it gets no sidecar.)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    got = ort.InferenceSession(str(qdq), so).run(None, {"input": x})[0]
    agree = float(np.mean(ref.argmax(1) == got.argmax(1)))
    assert agree >= 0.97, agree

    # Now parseable: a second run parses it as is instead of quantizing again.
    (tmp_path / "cnn-int8.onnx").write_bytes(qdq.read_bytes())
    again, note = plans.int8_source(tmp_path, "cnn", DIGITS / "cnn-fp32.onnx", "input", None)
    assert again == tmp_path / "cnn-int8.onnx" and note.startswith("parsed cnn-int8.onnx")


def test_int8_without_calibration_data_is_skipped_with_the_reason(tmp_path: Path) -> None:
    qdq, why = plans.int8_source(tmp_path, "cnn", DIGITS / "cnn-fp32.onnx", "input", None)
    assert qdq is None and "--calib or --val" in why


# -- refusal of a plan for another device ---------------------------------------------------


def _sidecar(key: keys.DeviceKey, arch: str = "aarch64") -> dict[str, Any]:
    return {"backend": "tensorrt", "source": {"path": "models/digits/cnn-fp32.onnx"},
            "target": {"gpu": key.gpu, "compute_capability": key.compute_capability,
                       "arch": arch, "l4t": key.l4t, "key": key.slug()},
            "tools": {"tensorrt": key.tensorrt}}


def _here(key: keys.DeviceKey, arch: str = "aarch64") -> dict[str, Any]:
    return {"trt_version": key.tensorrt, "compute_capability": key.compute_capability,
            "gpu_name": key.gpu, "arch": arch, "l4t": key.l4t}


def test_same_device_passes_and_other_jetpack_is_refused() -> None:
    plan = Path("/models/digits/cnn-trt-fp16.sm87-orin-l4t36.4.3-trt10.3.0.engine")
    trtp.check_plan_compat(plan, _sidecar(ORIN), **_here(ORIN))
    upgraded = keys.DeviceKey(gpu="Orin", compute_capability="8.7", tensorrt="10.3.0",
                              l4t="36.4.0")
    with pytest.raises(ArtifactError) as ei:
        trtp.check_plan_compat(plan, _sidecar(ORIN), **_here(upgraded))
    msg = str(ei.value)
    assert "built on L4T 36.4.3 but this device is L4T 36.4.0" in msg
    assert "edged compile models/digits/cnn-fp32.onnx --out /models/digits --steps tensorrt" in msg


def test_every_difference_is_named_in_one_message() -> None:
    plan = Path("/m/cnn-trt-int8.sm87-orin-l4t36.4.3-trt10.3.0.engine")
    with pytest.raises(ArtifactError) as ei:
        trtp.check_plan_compat(plan, _sidecar(ORIN), **_here(RTX, arch="x86_64"))
    msg = str(ei.value)
    assert msg.startswith(str(plan))
    assert "built on aarch64, this machine is x86_64" in msg
    assert "TensorRT 10.3.0 but this is TensorRT 10.7.0.23" in msg
    assert "L4T 36.4.3 but this device is not a Jetson" in msg
    assert "compute capability 8.7 (Orin) but this GPU is 8.6 (NVIDIA GeForce RTX 3080)" in msg
    assert "--steps tensorrt" in msg and "never builds plans itself" in msg


def test_version_compatible_plan_ignores_the_l4t_and_old_sidecars_skip_it() -> None:
    side = _sidecar(ORIN)
    side["target"]["version_compatible"] = True
    newer = keys.DeviceKey(gpu="Orin", compute_capability="8.7", tensorrt="10.7.0", l4t="36.5.0")
    trtp.check_plan_compat(Path("/m/p.engine"), side, **_here(newer), allow_host_code=True)
    old = _sidecar(ORIN)
    del old["target"]["l4t"]  # written before plans were keyed: the L4T is unknown
    trtp.check_plan_compat(Path("/m/p.engine"), old, **{**_here(ORIN), "l4t": "36.4.0"})


def test_a_jetson_plan_is_refused_at_load_on_this_machine_without_tensorrt(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Arch and L4T need no GPU: the refusal comes before TensorRT is even imported.
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    other = "aarch64" if platform.machine() != "aarch64" else "x86_64"
    plan = tmp_path / keys.plan_file_name("cnn", "fp16", ORIN)
    plan.write_bytes(b"p" * 64)
    write_sidecar(plan, {**_sidecar(ORIN, arch=other), "plan": {"bytes": 64}})
    with pytest.raises(ArtifactError) as ei:
        trtb.open_backend(plan, TensorRTOptions(), 8)
    msg = str(ei.value)
    assert str(plan) in msg and f"built on {other}" in msg
    assert "L4T 36.4.3" in msg and f"--out {tmp_path} --steps tensorrt" in msg


# -- the step without a GPU -----------------------------------------------------------------


@pytest.mark.skipif(GPU_OK, reason="a GPU is usable here")
def test_build_plans_without_gpu_raises_and_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(trt_build.GpuUnavailable):
        plans.build_plans(DIGITS / "cnn-fp32.onnx", tmp_path, "cnn", precisions=["fp32"],
                          max_batch=8, input_name="input")
    assert list(tmp_path.iterdir()) == []


def test_compile_rejects_a_bad_precision_list(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from edged.compile import cli

    with pytest.raises(SystemExit) as ei:
        cli.main([str(DIGITS / "cnn-fp32.onnx"), "--out", str(tmp_path), "--steps", "tensorrt",
                  "--trt-precisions", "fp32,int4"])
    assert ei.value.code == 2
    assert "--trt-precisions: TensorRT precisions must be a comma list" in capsys.readouterr().err


@pytest.mark.skipif(GPU_OK, reason="a GPU is usable here")
def test_the_step_is_skipped_with_the_reason_and_the_others_still_run(tmp_path: Path) -> None:
    result = run(CompileOptions(model=DIGITS / "cnn-fp32.onnx", out=tmp_path,
                                steps=("tensorrt", "ort-opt"), trt_precisions=("fp32",),
                                bench_runs=3, max_batch=4, threads=1))
    assert result.exit_code == 0, result.log  # skipped beside another step: not a failure
    assert "tensorrt" in result.skipped and not result.only_step_skipped
    assert result.outcomes == {"cnn-fp32-opt.onnx": "ok"}
    assert not list(tmp_path.glob("*.engine"))
