"""``[models.variants.options]``: what a config may say about each runtime, by name.

Why here and not in each backend file: the config is read and checked once, in one pass,
before any runtime is imported (``edged check`` on a device without TensorRT still
reports a misspelt TensorRT option), and ``edged.config`` sits below the backends, which
read the options object they are handed. ``RUNTIMES`` is the one list of runtime names:
``edged.backends`` finds each runtime's module by it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from edged.config.schema import Table, non_negative, positive

#: runtime name in config -> pip extra that provides it (``edged.backends.<name>`` runs it)
RUNTIMES: dict[str, str] = {
    "onnxruntime": "edged (core)",
    "tvm": "edged[tvm]",
    "tensorrt": "edged[tensorrt]",
    "openvino": "edged[openvino]",
    "null": "edged (core)",  # computes nothing: for tests
}


class BackendOptions:
    """Base for per-backend option objects parsed from ``[models.variants.options]``."""

    @classmethod
    def from_table(cls, t: Table) -> BackendOptions:  # pragma: no cover - overridden
        t.done()
        return cls()


def read_options(backend: str, t: Table) -> BackendOptions:
    """``t`` read as runtime ``backend``'s options (problems go to ``t.problems``)."""
    return OPTIONS[backend].from_table(t)


# -- onnxruntime -------------------------------------------------------------------------

PROVIDERS = {
    "tensorrt": "TensorrtExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "cpu": "CPUExecutionProvider",
}
OPT_LEVELS = ("disable", "basic", "extended", "layout", "all")


@dataclass(frozen=True)
class OnnxRuntimeOptions(BackendOptions):
    """``[models.variants.options]`` for backend = "onnxruntime"."""

    threads: int = 0  # intra-op threads; 0 = ORT's default (one per physical core)
    inter_op_threads: int = 1
    graph_optimization_level: str = "all"
    optimized_model_path: Path | None = None  # optimized-graph cache (.onnx/.ort), ort_cache.py
    providers: tuple[str, ...] = ("cpu",)  # tried in order; "auto" = tensorrt, cuda, cpu
    #: None = the thread plan's choice (spin during Run); False = never; True = as asked
    allow_spinning: bool | None = None
    #: keep spinning after Run returns (ORT's default; burns a core between requests)
    spin_between_runs: bool | None = None
    provider_options: dict[str, dict[str, str]] = field(default_factory=dict)
    #: ORT's CPU memory arena (ORT's default): keeps the activations of the largest batch
    #: ever run (the person detector after batches of 4: +50-70 MB for good). Off, every Run maps
    #: and faults its buffers afresh: 5-6 ms of kernel time per reply, 25-35 % less throughput
    #: for the person detector at 8 clients (docs/benchmarks.md, "ONNX Runtime's CPU memory arena")
    cpu_mem_arena: bool = True

    @classmethod
    def from_table(cls, t: Table) -> OnnxRuntimeOptions:
        providers = t.get_list("providers", str, ["cpu"]) or ["cpu"]
        if providers == ["auto"]:
            providers = ["tensorrt", "cuda", "cpu"]
        for i, p in enumerate(providers):
            if p not in PROVIDERS:
                t.problem(f"providers[{i}]",
                          f"unknown provider {p!r}; known: {', '.join(PROVIDERS)} or ['auto']")
        po_t = t.table("provider_options")
        po: dict[str, dict[str, str]] = {}
        for key in list(po_t.data):
            sub = po_t.table(key)
            if key not in PROVIDERS:
                po_t.problem(key, f"unknown provider; known: {', '.join(PROVIDERS)}")
                continue
            po[key] = {k: str(v).lower() if isinstance(v, bool) else str(v)
                       for k, v in sub.data.items()}
        opts = cls(
            threads=t.get("threads", int, 0, check=non_negative),
            inter_op_threads=t.get("inter_op_threads", int, 1, check=non_negative),
            graph_optimization_level=t.get("graph_optimization_level", str, "all",
                                           choices=OPT_LEVELS),
            optimized_model_path=t.get_path("optimized_model_path", None),
            providers=tuple(p for p in providers if p in PROVIDERS) or ("cpu",),
            allow_spinning=t.get("allow_spinning", bool, None),
            spin_between_runs=t.get("spin_between_runs", bool, None),
            provider_options=po,
            cpu_mem_arena=t.get("cpu_mem_arena", bool, True),
        )
        t.done()
        return opts


# -- openvino ----------------------------------------------------------------------------

PRECISIONS = ("f32", "bf16", "f16", "auto")  # auto: the plugin's default (bf16/f16 if native)
HINTS = ("auto", "latency", "throughput")


@dataclass(frozen=True)
class OpenVinoOptions(BackendOptions):
    """``[models.variants.options]`` for backend = "openvino" (docs/configuration.md)."""

    device: str = "CPU"  # "CPU", "GPU", "GPU.1", "NPU", "AUTO:GPU,CPU", ...
    precision: str = "f32"
    performance_hint: str = "auto"  # auto: latency when max_batch_size is 1, else throughput
    threads: int = 0  # CPU threads for all streams; 0 = the thread plan (every usable core)
    streams: int = 0  # parallel infer requests; 0 = what the hint picks
    cache: bool = True
    cache_dir: Path | None = None  # None: default_cache_dir()

    @classmethod
    def from_table(cls, t: Table) -> OpenVinoOptions:
        device = t.get("device", str, "CPU", check=_openvino_device_problem)
        opts = cls(
            device=(device or "CPU").strip(),
            precision=t.get("precision", str, "f32", choices=PRECISIONS) or "f32",
            performance_hint=t.get("performance_hint", str, "auto", choices=HINTS) or "auto",
            threads=t.get("threads", int, 0, check=non_negative) or 0,
            streams=t.get("streams", int, 0, check=non_negative) or 0,
            cache=bool(t.get("cache", bool, True)),
            cache_dir=t.get_path("cache_dir", None),
        )
        t.done()
        return opts


def _openvino_device_problem(device: str) -> str | None:
    if not re.fullmatch(r"[A-Z][A-Z0-9_]*(\.\d+)?(:[A-Z0-9_.,]+)?", device.strip()):
        return ("expected an OpenVINO device name such as \"CPU\", \"GPU\", \"GPU.1\", "
                "\"NPU\" or \"AUTO:GPU,CPU\"")
    return None


# -- tvm ---------------------------------------------------------------------------------

@dataclass
class TvmOptions(BackendOptions):
    """``[models.variants.options]`` for a TVM variant.

    threads: size of TVM's CPU thread pool. TVM reads ``TVM_NUM_THREADS`` once, at its
    first import; a later change is attempted through ``runtime.config_threadpool``
    (best effort: the pool is process-wide, so variants loaded later share it).
    device: "auto" (from the sidecar's target), "cpu" or "cuda".
    """

    threads: int | None = None
    device: str = "auto"

    @classmethod
    def from_table(cls, t: Table) -> TvmOptions:
        threads = t.get("threads", int, None, check=positive)
        device = t.get("device", str, "auto", choices=("auto", "cpu", "cuda"))
        t.done()
        return cls(threads=threads, device=device)


# -- tensorrt ----------------------------------------------------------------------------

@dataclass(frozen=True)
class TensorRTOptions(BackendOptions):
    """``[models.variants.options]`` for ``backend = "tensorrt"``.

    device: CUDA device index the plan is loaded on (plans are per-SM, so on a box
        with mixed GPUs this must be a GPU like the one the plan was built on).
    version_compatible: trust host code embedded in a version-compatible plan
        (sets ``runtime.engine_host_code_allowed``). Off by default because that
        code runs in the daemon's process: only enable it for plans you built.
    """

    device: int = 0
    version_compatible: bool = False

    @classmethod
    def from_table(cls, t: Table) -> TensorRTOptions:
        device = t.get("device", int, 0, check=non_negative)
        version_compatible = t.get("version_compatible", bool, False)
        t.done()
        return cls(device=device, version_compatible=version_compatible)


# -- null --------------------------------------------------------------------------------

#: the null backend's tensor dtypes (numpy names)
NULL_DTYPES = ("bool", "float16", "float32", "float64", "int8", "int16", "int32", "int64",
               "uint8", "uint16", "uint32", "uint64")


@dataclass(frozen=True)
class NullOptions(BackendOptions):
    """``[models.variants.options]`` for backend = "null" (tests): its one input and output."""

    shape: tuple[int, ...] = (-1, 4)
    dtype: str = "float32"
    batch_sizes: tuple[int, ...] | None = None
    delay_ms: float = 0.0

    @classmethod
    def from_table(cls, t: Table) -> NullOptions:
        shape = t.get_list("shape", int, [-1, 4]) or [-1, 4]
        if not shape or shape[0] != -1 or any(d < 1 for d in shape[1:]):
            t.problem("shape", f"expected [-1, d1, ...] with every d >= 1; got {shape}")
            shape = [-1, 4]
        dtype = t.get("dtype", str, "float32", choices=NULL_DTYPES)
        sizes = t.get_list("batch_sizes", int, None)
        if sizes is not None and (not sizes or sorted(set(sizes)) != sizes or sizes[0] < 1):
            t.problem("batch_sizes", f"expected ascending sizes >= 1; got {sizes}")
            sizes = None
        delay = t.get("delay_ms", float, 0.0, check=non_negative)
        t.done()
        return cls(tuple(shape), dtype or "float32", tuple(sizes) if sizes else None,
                   delay or 0.0)


OPTIONS: dict[str, type[BackendOptions]] = {
    "onnxruntime": OnnxRuntimeOptions,
    "tvm": TvmOptions,
    "tensorrt": TensorRTOptions,
    "openvino": OpenVinoOptions,
    "null": NullOptions,
}
