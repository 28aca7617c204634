"""ONNX Runtime backend: one InferenceSession per loaded variant.

Why these defaults: a daemon on a battery-powered device must not burn idle CPU, yet
per-operator wake-ups of the intra-op pool cost about 1 ms per MobileNetV2 inference;
so where there are cores to spare the pool spins while ``Run`` computes and stops the
moment it returns, and on small devices it does not spin (``edged.host.threadplan``).
Execution providers are tried in the configured order and we log (and report) the one
that *actually* runs, because ORT silently falls back to CPU when a GPU provider is unavailable.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from edged.backends.base import Backend, BackendInfo, TensorSpec, require_file
from edged.backends.support import isa, ort_cache
from edged.config.runtimes import PROVIDERS, OnnxRuntimeOptions
from edged.errors import ArtifactError
from edged.host import threadplan

log = logging.getLogger("edged.backends.onnxruntime")

# ONNX tensor element type strings (as ORT reports them) -> numpy
_ORT_TYPES = {
    "tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
    "tensor(uint8)": np.uint8, "tensor(int8)": np.int8, "tensor(uint16)": np.uint16,
    "tensor(int16)": np.int16, "tensor(int32)": np.int32, "tensor(uint32)": np.uint32,
    "tensor(int64)": np.int64, "tensor(uint64)": np.uint64, "tensor(bool)": np.bool_,
}


def _spec(arg: Any) -> TensorSpec:
    dtype = _ORT_TYPES.get(arg.type)
    if dtype is None:
        raise ArtifactError(f"unsupported tensor type {arg.type} for {arg.name!r}")
    shape = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in arg.shape)
    return TensorSpec(arg.name, np.dtype(dtype), shape)


class OnnxRuntimeBackend(Backend):
    kind = "onnxruntime"

    def __init__(self, path: Path, options: OnnxRuntimeOptions) -> None:
        import onnxruntime as ort

        require_file(path, "ONNX model")
        so = ort.SessionOptions()
        so.graph_optimization_level = {
            "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "layout": getattr(ort.GraphOptimizationLevel, "ORT_ENABLE_LAYOUT",
                              ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED),
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }[options.graph_optimization_level]
        so.intra_op_num_threads = options.threads
        so.inter_op_num_threads = options.inter_op_threads
        so.log_severity_level = 3
        so.enable_cpu_mem_arena = options.cpu_mem_arena
        plan = threadplan.current()
        spinning = plan.ort_spinning if options.allow_spinning is None else options.allow_spinning
        between = (plan.ort_spin_between_runs if options.spin_between_runs is None
                   else options.spin_between_runs)
        spin = "1" if spinning else "0"
        so.add_session_config_entry("session.intra_op.allow_spinning", spin)
        so.add_session_config_entry("session.inter_op.allow_spinning", spin)
        if spinning and not between:
            so.add_session_config_entry("session.force_spinning_stop", "1")

        available = set(ort.get_available_providers())
        wanted = [PROVIDERS[p] for p in options.providers]
        chosen: list[Any] = []
        for p in wanted:
            if p not in available:
                log.info("provider %s not available in this onnxruntime build; skipping", p)
                continue
            short = next(k for k, v in PROVIDERS.items() if v == p)
            opts = options.provider_options.get(short)
            chosen.append((p, opts) if opts else p)
        if not chosen:
            chosen = ["CPUExecutionProvider"]
        if options.optimized_model_path is None:
            self.session = _session(ort, path, so, chosen)
        else:
            settings = {k: v for k, v in vars(options).items() if k != "optimized_model_path"}
            self.session = ort_cache.cached_session(
                ort, path, options.optimized_model_path, {**settings, "providers": chosen},
                so, lambda model: _session(ort, model, so, chosen))
        actual = self.session.get_providers()
        self.inputs = [_spec(a) for a in self.session.get_inputs()]
        self.outputs = [_spec(a) for a in self.session.get_outputs()]
        self._output_names = [o.name for o in self.outputs]
        self.batch_sizes = None
        self.info = BackendInfo(
            backend=self.kind,
            device=actual[0],
            details={"providers": actual, "onnxruntime": ort.__version__,
                     "threads": options.threads, "spinning": spinning,
                     "spin_between_runs": spinning and between},
        )
        if wanted[0] != actual[0]:
            log.warning("asked for %s but %s runs %s", wanted[0], path.name, actual[0])
        saturating = isa.int8_weights_warning(path) if actual[0] == PROVIDERS["cpu"] else None
        if saturating:
            log.warning("%s", saturating)
            self.info.details["warning"] = saturating

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        outs = self.session.run(self._output_names, feeds)
        return dict(zip(self._output_names, outs, strict=True))

    def close(self) -> None:
        self.session = None  # type: ignore[assignment]


def _session(ort: Any, path: Path, so: Any, providers: list[Any]) -> Any:
    try:
        return ort.InferenceSession(str(path), sess_options=so, providers=providers)
    except Exception as e:  # ORT raises its own Fail/InvalidGraph/... types
        raise ArtifactError(f"onnxruntime cannot load {path}: {_short(e)}") from None


def _short(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[-1] if text else type(e).__name__


def open_backend(path: Path, options: OnnxRuntimeOptions,
                 max_batch_size: int) -> OnnxRuntimeBackend:
    return OnnxRuntimeBackend(path, options)
