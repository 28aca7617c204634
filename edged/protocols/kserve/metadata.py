"""KServe's health and metadata answers: is the server live and ready, what is a model.

Why apart from the infer path (``edged.protocols.kserve.core``): none of these admits a
request or touches a batcher; they describe the daemon and its registry in the protocol's
terms (Triton's model metadata and configuration, which tritonclient and perf_analyzer
read before their first infer, and its statistics, from the histograms edged keeps), and
both servers ask them the same way, the gRPC one from its handler threads through the loop.
A model has only version 1: edged's variants are not versions.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edged import __version__
from edged.errors import InvalidArgument, Unavailable
from edged.model.model import Model
from edged.model.registry import Served
from edged.protocols.kserve.tensors import datatype, triton_type
from edged.protocols.serving import Serving

#: the output a detector answers with (its boxes), beside its raw outputs
DETECTIONS = "detections"
EXTENSIONS = ["binary_tensor_data", "model_configuration", "statistics", "schedule_policy"]


class KServeMetadata:
    """Health, metadata, model configuration and statistics, in the protocol's terms."""

    def __init__(self, state: Serving) -> None:
        self.state = state

    @property
    def live(self) -> bool:
        return self.state.phase in ("starting", "serving", "draining")

    @property
    def ready(self) -> bool:
        st = self.state
        return st.ready and st.serving and all(m.ready for m in st.registry if m.cfg.required)

    def model_ready(self, name: str) -> bool:
        m = self.state.registry.find_served(name)
        return m is not None and m.ready and self.state.serving

    def server_metadata(self) -> dict[str, Any]:
        return {"name": "edged", "version": __version__, "extensions": EXTENSIONS}

    def model(self, name: str, version: str = "") -> Served:
        m = self.state.registry.served(name)  # NOT_FOUND for an unknown model or pipeline
        if version not in ("", "1"):
            raise InvalidArgument(f"model {m.name!r} has only version 1 (edged's variants "
                                  f"are not versions); got {version!r}")
        return m

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        m = self.model(name, version)
        self._require_loaded(m)
        outputs = [_tensor_meta(s.name, s.dtype, s.shape) for s in m.outputs]
        if m.detects:
            outputs.append(_tensor_meta(DETECTIONS, np.dtype(np.float32), (-1, _columns(m))))
        return {"name": m.name, "versions": ["1"], "platform": _platform(m),
                "inputs": [_tensor_meta(s.name, s.dtype, s.shape) for s in m.inputs],
                "outputs": outputs}

    def model_config(self, name: str, version: str = "") -> dict[str, Any]:
        """Triton's model configuration (what tritonclient and perf_analyzer read): dims
        without the batch dimension, ``max_batch_size`` from edged's config."""
        m = self.model(name, version)
        self._require_loaded(m)

        def tensor(name: str, dtype: np.dtype, shape: tuple[int, ...]) -> dict[str, Any]:
            return {"name": name, "data_type": triton_type(dtype), "dims": list(shape[1:])}

        outputs = [tensor(s.name, s.dtype, s.shape) for s in m.outputs]
        if m.detects:
            outputs.append({"name": DETECTIONS, "data_type": "TYPE_FP32",
                            "dims": [-1, _columns(m)]})
        served = m if isinstance(m, Model) else m.detector  # a pipeline: its detector's
        assert served is not None  # _require_loaded
        cfg: dict[str, Any] = {
            "name": m.name, "platform": _platform(m), "backend": _backend(m),
            "max_batch_size": served.cfg.max_batch_size,
            "input": [tensor(s.name, s.dtype, s.shape) for s in m.inputs],
            "output": outputs,
            "dynamic_batching": {"max_queue_delay_microseconds":
                                 int(served.cfg.max_delay_ms * 1000)},
        }
        return cfg

    def statistics(self, name: str = "", version: str = "") -> list[dict[str, Any]]:
        """Triton's ModelStatistics from the histograms edged keeps (since start)."""
        models = [self.model(name, version)] if name else list(self.state.registry)
        out = []
        met = self.state.metrics
        for m in models:
            req_n, req_s = _hist(met.request_duration.labels(m.name))
            q_n, q_s = _hist(met.queue_duration.labels(m.name))
            _, rows = _hist(met.batch_size.labels(m.name))
            exec_n = exec_s = 0.0
            for v in (m.variant_names if isinstance(m, Model) else []):  # a pipeline: none
                n, s = _hist(met.compute_duration.labels(m.name, v))
                exec_n, exec_s = exec_n + n, exec_s + s
            fail = sum(c._value.get() for labels, c in _children(met.requests)
                       if labels[0] == m.name and labels[2] != "OK")
            out.append({
                "name": m.name, "version": "1", "last_inference": 0,
                "inference_count": int(rows), "execution_count": int(exec_n),
                "inference_stats": {
                    "success": {"count": int(req_n), "ns": int(req_s * 1e9)},
                    "fail": {"count": int(fail), "ns": 0},
                    "queue": {"count": int(q_n), "ns": int(q_s * 1e9)},
                    "compute_infer": {"count": int(exec_n), "ns": int(exec_s * 1e9)},
                },
                "batch_stats": [],
            })
        return out

    def _require_loaded(self, m: Served) -> None:
        if not m.inputs:
            detail = f": {m.error}" if m.error else ""
            raise Unavailable(f"model {m.name!r} is {m.state}{detail}")


def _columns(m: Served) -> int:
    """The detections' columns: 6 for a detector (7 with track ids); a pipeline's vary
    with its stages and the request's tracking (-1)."""
    return 6 if isinstance(m, Model) else -1


def _backend(m: Served) -> str:
    if not isinstance(m, Model):
        return "pipeline"
    return m.live.loaded.config.backend if m.live.loaded is not None else ""


def _tensor_meta(name: str, dtype: np.dtype, shape: tuple[int, ...]) -> dict[str, Any]:
    return {"name": name, "datatype": datatype(dtype), "shape": list(shape)}


def _platform(m: Served) -> str:
    backend = _backend(m)
    return {"onnxruntime": "onnxruntime_onnx", "tensorrt": "tensorrt_plan"}.get(
        backend, f"edged_{backend}")


def _children(metric: Any) -> list[tuple[tuple[str, ...], Any]]:
    return list(metric._metrics.items())


def _hist(h: Any) -> tuple[float, float]:
    """(count, sum) of one histogram child."""
    return sum(b.get() for b in h._buckets), h._sum.get()
