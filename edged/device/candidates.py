"""What to serve for one model: a row per backend x precision, or the reason it cannot run.

Why a list decided before anything is served: every row of the table appears on every
device, so a SKIP says which package, provider or file is missing instead of the row
silently not being there. The inputs and the ONNX Runtime fp32 CPU reference every row
is compared with are made once per model (``load_model``). edged's TensorRT plans are
built here by the compile step's own ``build_plans``, imported only when a GPU is usable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edged.device.table import Row


@dataclass
class Candidate:
    """One table row to produce: a variant for the daemon, or the reason it cannot run."""

    backend: str
    precision: str
    variant: dict[str, Any] | None = None  # backend, path, options
    skip: str = ""
    note: str = ""


@dataclass
class ModelRun:
    name: str
    path: Path
    input_name: str
    output_name: str
    x: Any  # inputs for agreement, [items, ...]
    ref: Any  # ONNX Runtime fp32 CPU outputs for x
    source: str
    rows: list[Row] = field(default_factory=list)


def load_model(name: str, path: Path, items: int) -> ModelRun:
    """Inputs (validation data beside the model when there is some) and the CPU reference."""
    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    inp, out = sess.get_inputs()[0], sess.get_outputs()[0]
    shape = [d if isinstance(d, int) and d > 0 else items for d in inp.shape]
    x, source = None, f"{items} random inputs"
    val, meta = path.parent / "validation.npz", path.parent / "model.json"
    if val.is_file() and meta.is_file():
        from edged.compile.data import Preprocess, load_dataset

        spec = {"name": inp.name, "dtype": "float32", "shape": [-1, *shape[1:]]}
        x = load_dataset(val, spec, Preprocess.from_json(meta), limit=items).x
        source = f"{len(x)} samples of {val.name}"
    if x is None:
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    ref = sess.run([out.name], {inp.name: x})[0]
    return ModelRun(name, path, inp.name, out.name, x, ref, source)


def int8_sibling(path: Path) -> Path | None:
    """``NAME-int8.onnx`` beside ``NAME-fp32.onnx`` (what ``edged compile`` writes), if any."""
    int8 = path.with_name(path.name.replace("-fp32", "-int8"))
    return int8 if int8 != path and int8.is_file() else None


def ort_candidates(m: ModelRun, ort: Any, workdir: Path, max_batch: int,
                   device: int) -> list[Candidate]:
    """ONNX Runtime on CPU (fp32, int8 sibling) and its CUDA / TensorRT providers."""
    cands = [Candidate("onnxruntime-cpu", "fp32",
                       {"backend": "onnxruntime", "path": m.path, "options": {}})]
    int8 = int8_sibling(m.path)
    if int8 is not None:
        cands.append(Candidate("onnxruntime-cpu", "int8",
                               {"backend": "onnxruntime", "path": int8, "options": {}},
                               note=int8.name))
    else:
        wanted = m.path.with_name(m.path.name.replace("-fp32", "-int8")).name
        cands.append(Candidate("onnxruntime-cpu", "int8",
                               skip=f"no {wanted} beside the model "
                                    "(edged compile --steps int8 writes one)"))
    available = ort.get_available_providers()
    if "CUDAExecutionProvider" in available:
        cands.append(Candidate("onnxruntime-cuda", "fp32", {
            "backend": "onnxruntime", "path": m.path,
            "options": {"providers": ["cuda"],
                        "provider_options": {"cuda": {"device_id": str(device)}}}}))
    else:
        cands.append(Candidate("onnxruntime-cuda", "fp32", skip="CUDAExecutionProvider not in "
                               "this onnxruntime build (install onnxruntime-gpu)"))
    for precision in ("fp32", "fp16"):
        if "TensorrtExecutionProvider" not in available:
            cands.append(Candidate("onnxruntime-tensorrt", precision, skip="TensorrtExecution"
                                   "Provider not in this onnxruntime build (onnxruntime-gpu "
                                   "with TensorRT libraries)"))
            continue
        cands.append(Candidate("onnxruntime-tensorrt", precision, {
            "backend": "onnxruntime", "path": m.path,
            "options": {"providers": ["tensorrt", "cuda"],
                        "provider_options": {"tensorrt": _trt_ep_options(
                            m, workdir, max_batch, device, precision)}}},
            note="trt_fp16_enable" if precision == "fp16" else ""))
    return cands


def _trt_ep_options(m: ModelRun, workdir: Path, max_batch: int, device: int,
                    precision: str) -> dict[str, str]:
    """ONNX Runtime's TensorRT provider: a 1..max_batch profile and an engine cache."""
    rest = "x".join(str(d) for d in m.x.shape[1:])
    cache = workdir / "ort-trt-cache"
    opts = {"device_id": str(device), "trt_engine_cache_enable": "true",
            "trt_engine_cache_path": str(cache), "trt_timing_cache_enable": "true",
            "trt_timing_cache_path": str(cache),
            "trt_fp16_enable": str(precision == "fp16").lower()}
    for key, b in (("min", 1), ("opt", max_batch), ("max", max_batch)):
        opts[f"trt_profile_{key}_shapes"] = f"{m.input_name}:{b}x{rest}"
    return opts


def openvino_candidates(m: ModelRun, ov: Any, workdir: Path) -> list[Candidate]:
    """OpenVINO on CPU: fp32 from the ONNX, int8 from its QDQ sibling when there is one."""
    if ov is None:
        return [Candidate("openvino-cpu", p, skip="OpenVINO not installed or unusable "
                          "(pip install 'edged[openvino]')") for p in ("fp32", "int8")]
    opts = {"cache_dir": str(workdir / "openvino-cache")}
    cands = [Candidate("openvino-cpu", "fp32",
                       {"backend": "openvino", "path": m.path, "options": opts})]
    int8 = int8_sibling(m.path)
    if int8 is not None:
        cands.append(Candidate("openvino-cpu", "int8",
                               {"backend": "openvino", "path": int8, "options": opts},
                               note=int8.name))
    return cands


def plan_candidates(m: ModelRun, workdir: Path, max_batch: int, device: int,
                    gpu: tuple[bool, str]) -> list[Candidate]:
    """edged's TensorRT plans, built here by the compile step's own code."""
    ok, why = gpu
    precisions = ["fp32", "fp16", "int8"]
    if not ok:
        return [Candidate("tensorrt", p, skip=why) for p in precisions]
    from edged.backends.support.sidecar import read_sidecar
    from edged.compile.data import Dataset
    from edged.compile.tensorrt_build import GpuUnavailable
    from edged.compile.tensorrt_steps import build_plans

    out = workdir / "plans" / m.name
    out.mkdir(parents=True, exist_ok=True)
    calib = Dataset(m.x, None, m.source)
    try:
        res = build_plans(m.path, out, m.path.stem.removesuffix("-fp32"),
                          precisions=precisions, max_batch=max_batch,
                          input_name=m.input_name, calib=calib, device=device)
    except GpuUnavailable as e:
        return [Candidate("tensorrt", p, skip=str(e)) for p in precisions]
    cands = []
    for plan in res.made:
        side = read_sidecar(plan) or {}
        cands.append(Candidate("tensorrt", side.get("precision", "?"), {
            "backend": "tensorrt", "path": plan, "options": {"device": device}},
            note=f"{plan.name}; {(side.get('recipe') or {}).get('note', '')}"))
    cands += [Candidate("tensorrt", p, skip=w) for p, w in res.skipped.items()]
    cands += [Candidate("tensorrt", p, note=f"build failed: {e}") for p, e in res.failed.items()]
    order = {p: i for i, p in enumerate(precisions)}
    return sorted(cands, key=lambda c: order.get(c.precision, 9))
