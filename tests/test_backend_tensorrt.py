"""TensorRT backend, engine builder and scripts/ops/device-check.

Most CI machines (and this project's) have no GPU and cannot install TensorRT (its
wheels come from NVIDIA's index), so the tests split in two:

* Everywhere: the error paths an operator meets on such a machine: TensorRT not
  installed, no CUDA device (with the real cuda-python when it is installed),
  missing/empty/truncated plans, sidecars from another TensorRT version or GPU,
  option validation, ``build_engine`` refusing with a reason, and device-check
  running to a clean exit with SKIP lines.
* With TensorRT and a GPU (``probe()`` says so): build a plan from a small ONNX
  model, serve it through the backend and compare with ONNX Runtime on CPU.

To simulate "TensorRT not installed" on a machine where it is, a test sets
``sys.modules["tensorrt"] = None``, which makes ``import tensorrt`` raise ImportError
exactly as a missing package does.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edged.backends import backend_module
from edged.backends.base import run_batch
from edged.backends.support.sidecar import read_sidecar, sidecar_path, write_sidecar
from edged.backends.tensorrt import backend as trtb
from edged.backends.tensorrt import cuda as trts
from edged.backends.tensorrt import plan as trtp
from edged.compile.tensorrt_build import (
    EngineBuildError,
    GpuUnavailable,
    build_engine,
    onnx_precision,
)
from edged.config.runtimes import TensorRTOptions
from edged.config.schema import Table, raise_if_problems
from edged.errors import ArtifactError, ConfigError

REPO = Path(__file__).resolve().parent.parent
DEVICE_CHECK = REPO / "scripts" / "ops" / "device-check"


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


HAS_TRT = _has("tensorrt")
HAS_CUDA_PYTHON = _has("cuda.bindings") or _has("cuda.cudart")
HAS_ONNX = _has("onnx")
GPU_OK, GPU_WHY = trts.probe()
gpu = pytest.mark.skipif(not GPU_OK, reason=GPU_WHY)
no_gpu_with_cuda_python = pytest.mark.skipif(
    not HAS_CUDA_PYTHON or GPU_OK,
    reason="needs cuda-python installed on a machine without a usable GPU",
)


# -- small ONNX models built here, so the tests do not depend on shipped files ----------


def _digits_like_onnx(path: Path, *, batch: int | str = "N", kind: str = "fp32") -> Path:
    """input[N,1,28,28] float32 -> Flatten -> Gemm(784x10) -> logits[N,10]."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((784, 10)) * 0.05).astype(np.float32)
    b = rng.standard_normal(10).astype(np.float32)
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 1, 28, 28])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10])
    if kind == "fp32":
        inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")]
        nodes = [
            helper.make_node("Flatten", ["input"], ["flat"], axis=1),
            helper.make_node("Gemm", ["flat", "W", "B"], ["logits"]),
        ]
    elif kind == "fp16":
        inits = [
            numpy_helper.from_array(w.astype(np.float16), "W"),
            numpy_helper.from_array(b.astype(np.float16), "B"),
        ]
        nodes = [
            helper.make_node("Cast", ["input"], ["x16"], to=TensorProto.FLOAT16),
            helper.make_node("Flatten", ["x16"], ["flat"], axis=1),
            helper.make_node("Gemm", ["flat", "W", "B"], ["y16"]),
            helper.make_node("Cast", ["y16"], ["logits"], to=TensorProto.FLOAT),
        ]
    elif kind == "int8":
        inits = [
            numpy_helper.from_array(w, "W"),
            numpy_helper.from_array(b, "B"),
            numpy_helper.from_array(np.array(0.05, np.float32), "s"),
            numpy_helper.from_array(np.array(0, np.int8), "zp"),
        ]
        nodes = [
            helper.make_node("Flatten", ["input"], ["flat"], axis=1),
            helper.make_node("QuantizeLinear", ["flat", "s", "zp"], ["q"]),
            helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["dq"]),
            helper.make_node("Gemm", ["dq", "W", "B"], ["logits"]),
        ]
    else:
        raise ValueError(kind)
    graph = helper.make_graph(nodes, "digits_like", [x], [y], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _plan_with_sidecar(tmp_path: Path, data: bytes, **overrides: Any) -> Path:
    plan = tmp_path / "m.engine"
    plan.write_bytes(data)
    meta: dict[str, Any] = {
        "backend": "tensorrt",
        "target": {"gpu": "Orin", "compute_capability": "8.7", "arch": "aarch64"},
        "tools": {"tensorrt": "10.3.0"},
        "plan": {"bytes": len(data)},
    }
    meta.update(overrides)
    write_sidecar(plan, meta)
    return plan


# -- importing never touches TensorRT or CUDA -------------------------------------------


def test_modules_import_without_loading_tensorrt_or_cuda() -> None:
    code = (
        "import sys, edged.backends.tensorrt.backend, edged.compile.tensorrt_build;"
        "bad = [m for m in ('tensorrt', 'cuda.bindings', 'cuda.cudart') if m in sys.modules];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=60)
    mod = backend_module("tensorrt")
    assert mod.open_backend is trtb.open_backend


# -- TensorRT not installed -----------------------------------------------------------------


def test_missing_tensorrt_names_the_extra_and_the_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # import tensorrt -> ImportError
    plan = tmp_path / "model.engine"
    plan.write_bytes(b"\x00" * 64)
    with pytest.raises(ArtifactError) as ei:
        trtb.open_backend(plan, TensorRTOptions(), 8)
    msg = str(ei.value)
    assert str(plan) in msg
    assert "TensorRT is not installed" in msg
    assert "edged[tensorrt]" in msg and "NVIDIA's package index" in msg
    ok, why = trts.probe()
    assert not ok and "edged[tensorrt]" in why


@pytest.mark.skipif(HAS_TRT, reason="TensorRT is installed here")
def test_really_missing_tensorrt_probe_says_install() -> None:
    ok, why = trts.probe()
    assert ok is False
    assert why.startswith("TensorRT is not installed") and "edged[tensorrt]" in why


# -- no GPU (real cuda-python, no driver) --------------------------------------------------


@no_gpu_with_cuda_python
def test_cuda_probe_without_gpu_says_no_usable_device() -> None:
    with pytest.raises(trts.GpuUnavailableError) as ei:
        trts.cuda_device_info(0)
    msg = str(ei.value)
    assert msg.startswith("no usable CUDA device")
    assert "cudaGetDeviceCount" in msg and "cudaError" in msg


@pytest.mark.skipif(not HAS_CUDA_PYTHON, reason="cuda-python not installed")
def test_check_cuda_raises_with_the_error_name() -> None:
    cudart = trts.import_cudart()
    # Device 9999 never exists: InvalidDevice with a driver, InsufficientDriver without.
    with pytest.raises(RuntimeError, match=r"cudaSetDevice\(9999\) failed: cudaError\w+ \(\d+\)"):
        trts.check_cuda(cudart.cudaSetDevice(9999), "cudaSetDevice(9999)")
    assert trts.check_cuda(cudart.cudaRuntimeGetVersion()) > 0


@no_gpu_with_cuda_python
def test_open_backend_without_gpu_names_file_and_cause(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Only the import is stood in for (TensorRT cannot be installed here); the CUDA
    # probe that produces the message is the real cuda-python against no driver.
    if not HAS_TRT:
        stand_in = types.ModuleType("tensorrt")
        stand_in.__version__ = "10.3.0"  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "tensorrt", stand_in)
    plan = tmp_path / "model.engine"
    plan.write_bytes(b"\x00" * 64)
    with pytest.raises(ArtifactError) as ei:
        trtb.open_backend(plan, TensorRTOptions(), 8)
    assert str(plan) in str(ei.value)
    assert "no usable CUDA device" in str(ei.value)


# -- plan files ----------------------------------------------------------------------------


def test_missing_plan_names_the_file(tmp_path: Path) -> None:
    plan = tmp_path / "nope.engine"
    with pytest.raises(ArtifactError, match="TensorRT plan not found") as ei:
        trtb.open_backend(plan, TensorRTOptions(), 8)
    assert str(plan) in str(ei.value)


def test_empty_plan_names_the_file(tmp_path: Path) -> None:
    plan = tmp_path / "empty.engine"
    plan.write_bytes(b"")
    with pytest.raises(ArtifactError, match="empty") as ei:
        trtb.open_backend(plan, TensorRTOptions(), 8)
    assert str(plan) in str(ei.value)


def test_directory_instead_of_plan(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="not a file"):
        trtb.open_backend(tmp_path, TensorRTOptions(), 8)


def test_truncated_plan_is_caught_by_the_sidecar(tmp_path: Path) -> None:
    plan = _plan_with_sidecar(tmp_path, b"p" * 1000)
    plan.write_bytes(b"p" * 600)  # e.g. an interrupted scp
    with pytest.raises(ArtifactError) as ei:
        trtb.open_backend(plan, TensorRTOptions(), 8)
    msg = str(ei.value)
    assert str(plan) in msg and "truncated" in msg and "600" in msg and "1000" in msg


def test_replaced_plan_is_caught_by_the_sidecar_hash(tmp_path: Path) -> None:
    import hashlib

    plan = _plan_with_sidecar(
        tmp_path, b"a" * 100, plan={"bytes": 100, "sha256": hashlib.sha256(b"b" * 100).hexdigest()}
    )
    with pytest.raises(ArtifactError, match="sha256") as ei:
        trtb.open_backend(plan, TensorRTOptions(), 8)
    assert str(plan) in str(ei.value)


def test_unreadable_sidecar_names_the_sidecar(tmp_path: Path) -> None:
    plan = tmp_path / "m.engine"
    plan.write_bytes(b"x" * 10)
    sidecar_path(plan).write_text("{not json")
    with pytest.raises(ArtifactError) as ei:
        trtb.open_backend(plan, TensorRTOptions(), 8)
    assert str(sidecar_path(plan)) in str(ei.value)


# -- sidecar compatibility rules (pure function, no TensorRT needed) -----------------------


def _compat(sidecar: dict[str, Any] | None, **here: Any) -> None:
    args: dict[str, Any] = {
        "trt_version": "10.3.0",
        "compute_capability": "8.7",
        "gpu_name": "Orin",
        "arch": "aarch64",
    }
    args.update(here)
    trtp.check_plan_compat(Path("/models/m.engine"), sidecar, **args)


SIDECAR = {
    "backend": "tensorrt",
    "target": {"gpu": "Orin", "compute_capability": "8.7", "arch": "aarch64"},
    "tools": {"tensorrt": "10.3.0"},
}


def _side(target: dict[str, Any] | None = None, tools: dict[str, Any] | None = None) -> dict:
    return {
        "backend": "tensorrt",
        "target": {**SIDECAR["target"], **(target or {})},
        "tools": {**SIDECAR["tools"], **(tools or {})},
    }


def test_compat_same_device_and_version_passes() -> None:
    _compat(SIDECAR)
    _compat(None)  # no sidecar: TensorRT's own check is all there is
    _compat(SIDECAR, trt_version="10.3.0.30")  # pip adds a build number; JetPack does not


def test_compat_other_tensorrt_version_is_refused() -> None:
    with pytest.raises(ArtifactError) as ei:
        _compat(SIDECAR, trt_version="10.7.0")
    msg = str(ei.value)
    assert "/models/m.engine" in msg and "10.3.0" in msg and "10.7.0" in msg
    assert "exact TensorRT version" in msg and "rebuild" in msg


def test_compat_other_sm_is_refused_with_both_gpus() -> None:
    with pytest.raises(ArtifactError) as ei:
        _compat(SIDECAR, compute_capability="8.6", gpu_name="NVIDIA GeForce RTX 3080")
    msg = str(ei.value)
    assert "compute capability 8.7 (Orin)" in msg and "8.6 (NVIDIA GeForce RTX 3080)" in msg


def test_compat_ampere_plus_plan_runs_on_later_sm_only() -> None:
    side = _side({"compute_capability": "8.0", "hardware_compatibility": "ampere_plus"})
    _compat(side, compute_capability="8.9")
    with pytest.raises(ArtifactError, match=r"compute capability 8\.0"):
        _compat(side, compute_capability="7.5")


def test_compat_version_compatible_plan_rules() -> None:
    side = _side({"version_compatible": True}, {"tensorrt": "10.3.0"})
    _compat(side, trt_version="11.1.0", allow_host_code=True)  # later runtime: fine
    with pytest.raises(ArtifactError, match="version_compatible = true"):
        _compat(side, trt_version="10.3.0")  # host code not allowed by the options
    with pytest.raises(ArtifactError, match="newer than this TensorRT"):
        _compat(side, trt_version="10.0.1", allow_host_code=True)


def test_compat_other_platform_and_backend_are_refused() -> None:
    with pytest.raises(ArtifactError, match="not portable across platforms"):
        _compat(SIDECAR, arch="x86_64")
    with pytest.raises(ArtifactError, match="backend 'tvm'"):
        _compat({**SIDECAR, "backend": "tvm"})


def test_sidecar_mismatch_refused_before_tensorrt_is_imported(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The file checks run first, so a wrong copy is reported even where TensorRT is not.
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    plan = _plan_with_sidecar(tmp_path, b"p" * 10, plan={"bytes": 11})
    with pytest.raises(ArtifactError, match="truncated"):
        trtb.open_backend(plan, TensorRTOptions(), 8)


# -- options ---------------------------------------------------------------------------------


def _options(data: dict[str, Any]) -> tuple[TensorRTOptions, list[str]]:
    t = Table(data, "models[0].variants[0].options", "/etc/edged/config.toml")
    opts = TensorRTOptions.from_table(t)
    return opts, t.problems


def test_options_defaults_and_values() -> None:
    opts, problems = _options({})
    assert problems == [] and opts == TensorRTOptions(device=0, version_compatible=False)
    opts, problems = _options({"device": 1, "version_compatible": True})
    assert problems == [] and opts.device == 1 and opts.version_compatible is True


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"device": -1}, "device: must be >= 0"),
        ({"device": "0"}, "device: expected an integer"),
        ({"device": True}, "device: expected an integer"),
        ({"version_compatible": "yes"}, "version_compatible: expected true or false"),
        ({"devcie": 0}, "unknown key (did you mean 'device'?)"),
    ],
)
def test_options_problems_name_file_and_key(data: dict[str, Any], expected: str) -> None:
    _, problems = _options(data)
    assert len(problems) == 1
    assert problems[0].startswith("/etc/edged/config.toml: models[0].variants[0].options.")
    assert expected in problems[0]
    with pytest.raises(ConfigError):
        raise_if_problems(problems)


# -- build_engine without TensorRT/GPU -----------------------------------------------------


@pytest.mark.skipif(GPU_OK, reason="a GPU is usable here")
def test_build_engine_raises_gpu_unavailable_with_reason(tmp_path: Path) -> None:
    onnx_path = _digits_like_onnx(tmp_path / "m.onnx")
    with pytest.raises(GpuUnavailable) as ei:
        build_engine(onnx_path, tmp_path / "m.engine", min_batch=1, opt_batch=4, max_batch=8)
    assert isinstance(ei.value, Exception)
    why = str(ei.value)
    assert why.startswith(("TensorRT is not installed", "no usable CUDA device", "cuda-python"))
    assert not (tmp_path / "m.engine").exists()


def test_build_engine_without_tensorrt_says_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    onnx_path = tmp_path / "m.onnx"
    onnx_path.write_bytes(b"not really onnx")  # never read: TensorRT is checked first
    with pytest.raises(GpuUnavailable, match=r"edged\[tensorrt\]"):
        build_engine(onnx_path, tmp_path / "m.engine", min_batch=1, opt_batch=1, max_batch=1)


@pytest.mark.parametrize(("mn", "opt", "mx"), [(0, 1, 1), (2, 1, 4), (1, 8, 4)])
def test_build_engine_rejects_bad_batch_range(tmp_path: Path, mn: int, opt: int, mx: int) -> None:
    with pytest.raises(ValueError, match="1 <= min <= opt <= max"):
        build_engine(
            tmp_path / "m.onnx", tmp_path / "m.engine", min_batch=mn, opt_batch=opt, max_batch=mx
        )


def test_build_engine_missing_onnx(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="ONNX model not found"):
        build_engine(
            tmp_path / "m.onnx", tmp_path / "m.engine", min_batch=1, opt_batch=1, max_batch=1
        )


@pytest.mark.skipif(not HAS_ONNX, reason="onnx not installed")
@pytest.mark.parametrize("kind", ["fp32", "fp16", "int8"])
def test_onnx_precision(tmp_path: Path, kind: str) -> None:
    assert onnx_precision(_digits_like_onnx(tmp_path / f"{kind}.onnx", kind=kind)) == kind


def test_onnx_precision_of_unreadable_file_is_unknown(tmp_path: Path) -> None:
    # TensorRT's parser, not onnx, must be the one to report a broken model.
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"this is not an onnx model")
    assert onnx_precision(bad) == "unknown"


# -- scripts/ops/device-check -------------------------------------------------------------------


def _device_check(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, str(DEVICE_CHECK), "--seconds", "0.5", "--items", "16", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env=env,
    )


def test_device_check_is_an_executable_python_script() -> None:
    assert os.access(DEVICE_CHECK, os.X_OK)
    assert DEVICE_CHECK.read_text().startswith("#!/usr/bin/env python3\n")


def test_device_check_serves_through_the_daemon_and_prints_a_table(tmp_path: Path) -> None:
    missing = tmp_path / "mobilenetv2-fp32.onnx"
    keep = tmp_path / "keep"
    # A path relative to the working directory, as an operator types it.
    proc = _device_check("--model", "digits=models/digits/cnn-fp32.onnx",
                         "--model", f"mobilenetv2={missing}", "--max-batch", "4",
                         "--keep", str(keep))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    status = {ln[6:41].strip(): ln[:5].strip() for ln in out.splitlines() if ln[:4].strip()
              and ln[:5].strip() in ("PASS", "SKIP", "FAIL", "INFO")}
    assert status["numpy"] == "PASS" and status["onnxruntime"] == "PASS"
    assert status["digits onnxruntime-cpu fp32"] == "PASS"
    assert status["digits onnxruntime-cpu int8"] == "PASS"  # cnn-int8.onnx beside it
    assert status["mobilenetv2 model"] == "SKIP" and "make_bench_models.py" in out
    # Served by a real daemon: its generated config and log are kept.
    daemon_dir = keep / "daemons" / "digits-onnxruntime-cpu-fp32"
    assert 'backend = "onnxruntime"' in (daemon_dir / "edged.toml").read_text()
    assert (daemon_dir / "daemon.log").stat().st_size > 0
    table = out[out.index("digits: cnn-fp32.onnx, through the daemon"):]
    header, cpu = table.splitlines()[1:3]
    assert header.split()[:4] == ["backend", "precision", "p50", "ms"]
    assert cpu.split()[:2] == ["onnxruntime-cpu", "fp32"]
    assert "100.00%" in cpu and cpu.rstrip().endswith("ok")
    if not GPU_OK:
        for p in ("fp32", "fp16", "int8"):
            assert status[f"digits tensorrt {p}"] == "SKIP"
        assert status["cuda device"] == "SKIP" or HAS_CUDA_PYTHON is False
        assert "tensorrt              fp16" in table and "SKIP: " in table
    assert out.rstrip().splitlines()[-1].startswith("OK: ")


def test_device_check_json_and_fail_exit(tmp_path: Path) -> None:
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"this is not an onnx model")
    proc = _device_check("--json", "--model", f"broken={bad}")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    status = {c["name"]: c["status"] for c in doc["checks"]}
    assert doc["ok"] is False and status["broken model"] == "FAIL"
    assert status["onnxruntime"] == "PASS"
    assert doc["facts"]["arch"] and "cpus" in doc["facts"]
    assert doc["tables"] == []


# -- with TensorRT and a GPU ------------------------------------------------------------


@pytest.fixture(scope="module")
def built_plan(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("trt")
    onnx_path = _digits_like_onnx(d / "digits.onnx")
    plan = build_engine(
        onnx_path,
        d / "digits.engine",
        min_batch=1,
        opt_batch=4,
        max_batch=8,
        timing_cache=d / "timing.cache",
    )
    return onnx_path, plan


@gpu
def test_gpu_sidecar_records_what_the_daemon_checks(built_plan: tuple[Path, Path]) -> None:
    _, plan = built_plan
    side = read_sidecar(plan)
    assert side is not None
    assert side["backend"] == "tensorrt" and side["precision"] == "fp32"
    assert side["tools"]["tensorrt"] and side["target"]["compute_capability"]
    assert side["batch_profile"] == {"min": 1, "opt": 4, "max": 8}
    assert side["batch_sizes"] is None
    assert side["plan"]["bytes"] == plan.stat().st_size
    assert side["inputs"] == [{"name": "input", "dtype": "float32", "shape": [-1, 1, 28, 28]}]


@gpu
def test_gpu_backend_matches_onnxruntime(built_plan: tuple[Path, Path]) -> None:
    import onnxruntime as ort

    onnx_path, plan = built_plan
    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    be = trtb.open_backend(plan, TensorRTOptions(), 8)
    try:
        assert be.batch_sizes is not None and be.batch_sizes[0] == 1  # the profile's range
        assert [s.to_json() for s in be.inputs] == [
            {"name": "input", "dtype": "float32", "shape": [-1, 1, 28, 28]}
        ]
        assert be.info.device == "cuda:0"
        be.warmup(1)
        rng = np.random.default_rng(1)
        for n in (1, 3, 8, 11):  # 11 > profile max: runs in two chunks
            x = rng.standard_normal((n, 1, 28, 28)).astype(np.float32)
            got = run_batch(be, {"input": x})["logits"]
            ref = sess.run(None, {"input": x})[0]
            assert got.shape == (n, 10)
            np.testing.assert_allclose(got, ref, atol=1e-2, rtol=1e-2)  # TF32 on Ampere+
    finally:
        be.close()
        be.close()  # idempotent


@gpu
def test_gpu_plan_for_another_sm_is_refused(built_plan: tuple[Path, Path], tmp_path: Path) -> None:
    _, plan = built_plan
    copy = tmp_path / "copy.engine"
    copy.write_bytes(plan.read_bytes())
    side = read_sidecar(plan)
    assert side is not None
    side["target"]["compute_capability"] = "1.0"
    side.pop("format"), side.pop("created")
    write_sidecar(copy, side)
    with pytest.raises(ArtifactError, match=r"compute capability 1\.0"):
        trtb.open_backend(copy, TensorRTOptions(), 8)


@gpu
def test_gpu_garbage_plan_names_file(tmp_path: Path) -> None:
    plan = tmp_path / "garbage.engine"
    plan.write_bytes(os.urandom(4096))
    with pytest.raises(ArtifactError, match="cannot deserialize") as ei:
        trtb.open_backend(plan, TensorRTOptions(), 8)
    assert str(plan) in str(ei.value)


@gpu
def test_gpu_static_batch_plan_reports_its_batch(tmp_path: Path) -> None:
    onnx_path = _digits_like_onnx(tmp_path / "static.onnx", batch=4)
    plan = build_engine(
        onnx_path, tmp_path / "static.engine", min_batch=1, opt_batch=1, max_batch=1
    )
    be = trtb.open_backend(plan, TensorRTOptions(), 4)
    try:
        assert be.batch_sizes == (4,)
        out = run_batch(be, {"input": np.zeros((2, 1, 28, 28), np.float32)})["logits"]
        assert out.shape == (2, 10)  # padded to 4 by run_batch, sliced back
    finally:
        be.close()


@gpu
def test_gpu_parser_errors_are_reported(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage")
    with pytest.raises(EngineBuildError, match="could not parse"):
        build_engine(bad, tmp_path / "bad.engine", min_batch=1, opt_batch=1, max_batch=1)


@gpu
def test_gpu_compile_step_builds_keyed_fp32_fp16_int8_plans(tmp_path: Path) -> None:
    import onnxruntime as ort

    from edged.backends.tensorrt.keys import plan_file_name, timing_cache_name
    from edged.compile.data import Dataset
    from edged.compile.tensorrt_build import device_key
    from edged.compile.tensorrt_steps import build_plans

    src = _digits_like_onnx(tmp_path / "m-fp32.onnx")
    rng = np.random.default_rng(2)
    x = rng.random((64, 1, 28, 28), dtype=np.float32)
    res = build_plans(src, tmp_path, "m", precisions=["fp32", "fp16", "int8"], max_batch=8,
                      input_name="input", calib=Dataset(x, None, "random"))
    assert not res.failed and not res.skipped, (res.failed, res.skipped)
    key = device_key()
    assert [p.name for p in res.made] == [plan_file_name("m", p, key)
                                          for p in ("fp32", "fp16", "int8")]
    assert (tmp_path / timing_cache_name(key)).stat().st_size > 0
    ref = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(
        None, {"input": x})[0]
    for plan, precision in zip(res.made, ("fp32", "fp16", "int8"), strict=True):
        side = read_sidecar(plan)
        assert side is not None and side["precision"] == precision
        assert side["target"]["key"] == key.slug() and "l4t" in side["target"]
        assert side["name"] == f"m-trt-{precision}"
        be = trtb.open_backend(plan, TensorRTOptions(), 8)
        try:
            got = run_batch(be, {"input": x})["logits"]
        finally:
            be.close()
        agree = float(np.mean(got.argmax(1) == ref.argmax(1)))
        assert agree >= (0.99 if precision != "int8" else 0.9), (precision, agree)
    # A rebuild on the same device reuses the timing cache.
    again = build_plans(src, tmp_path, "m", precisions=["fp32"], max_batch=8, input_name="input")
    assert (read_sidecar(again.made[0]) or {})["build"]["timing_cache_reused"] is True
