"""What the KServe gRPC and HTTP servers share: admission, the batcher hand-off, replies, metadata.

A KServe request becomes the same ``Request`` a native client would send (raw tensors, the
protocol's ``timeout``/``priority`` parameters mapped to edged's), is prepared by
``Model.prepare`` and queued in the model's batcher, so KServe, native and Frigate requests
batch together under the same governor, deadlines and metrics. ``begin`` is the one place
that hands a prepared request to ``Admission`` (which counts it once).

Parameters (Triton's, docs/kserve.md): ``timeout`` in microseconds (the gRPC deadline also
counts; the earlier wins), ``priority`` 1 = most important, 0 = default (edged: ``priority
- 1``, default 1), ``stream`` (a camera id: freshest frame wins, DROPPED -> ABORTED); a
detector also takes ``conf``, ``iou``, ``max_det``, ``classes`` ("0,2").
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edged import __version__
from edged.batching.queue import Result
from edged.errors import EdgedError, InvalidArgument, ResourceExhausted, Unavailable
from edged.host.thread_names import name_os_thread
from edged.model.model import Model
from edged.model.registry import Served
from edged.model.request import InputMeta, Request
from edged.model.status import describe_model
from edged.protocols.admission import Admission, Ticket
from edged.protocols.kserve.tensors import Tensor, datatype, triton_type
from edged.protocols.serving import Serving

log = logging.getLogger("edged.protocols.kserve")

DETECTIONS = "detections"
EXTENSIONS = ["binary_tensor_data", "model_configuration", "statistics", "schedule_policy"]
#: image decodes queued at once across both KServe servers (each holds a decoded frame)
MAX_PENDING_DECODES = 64
_OPTION_TYPES: dict[str, tuple[type, ...]] = {
    "conf": (float, int), "iou": (float, int), "max_det": (int,), "classes": (str,),
}


@dataclass
class InferCall:
    """One KServe infer request, protocol details removed."""

    model: str
    id: str
    inputs: list[Tensor]
    #: output names asked for (None: the default set)
    outputs: list[str] | None
    parameters: dict[str, Any] = field(default_factory=dict)
    #: seconds left before the client gives up (the gRPC deadline), if it said
    client_deadline_s: float | None = None
    received: float = field(default_factory=time.monotonic)


@dataclass
class InferAnswer:
    model: str
    variant: str
    outputs: list[tuple[str, np.ndarray]]
    timing: dict[str, int]
    #: more reply parameters: ``labels`` (JSON) when the answer has detections
    parameters: dict[str, str] = field(default_factory=dict)


class KServeCore:
    """Admission and replies for KServe requests; metadata in the protocol's terms."""

    def __init__(self, state: Serving) -> None:
        self.state = state
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="edged-kserve",
                                        initializer=name_os_thread)
        self._decoding = 0
        #: KServe calls admitted and not answered (both servers; counted on the loop)
        self._open = 0
        self.admission = Admission(state)
        self.m_requests = state.metrics.kserve_requests
        self.m_duration = state.metrics.kserve_duration

    def close(self) -> None:
        self._pool.shutdown(wait=False)

    # -- health and metadata ----------------------------------------------------------
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
        if _detector(m):
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
        if _detector(m):
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

    # -- inference ----------------------------------------------------------------------
    async def infer(self, call: InferCall, protocol: str) -> InferAnswer:
        """``begin`` awaited on the loop (the HTTP server): the answer, or the EdgedError
        for the reply."""
        fut: asyncio.Future[InferAnswer] = asyncio.get_running_loop().create_future()
        self.begin(call, protocol, functools.partial(_settle, fut))
        return await fut

    def begin(self, call: InferCall, protocol: str,
              done: Callable[[InferAnswer | EdgedError], None]) -> None:
        """Admit, prepare and queue one request on the loop; ``done`` gets its answer or
        the EdgedError for the reply, once, on the loop.

        Through ``Admission`` like every protocol: it counts the request once (and the
        KServe counters here say which protocol it came by)."""
        try:
            ticket = self.admission.admit(call.model, call.received, functools.partial(
                self._finish, call, protocol, done))
        except EdgedError as e:
            self.admission.reject(e, call.model)
            self._count(protocol, "", e.status, call.received)
            self.state.answered += 1
            done(e)
            return
        model = ticket.model
        self._open += 1
        try:
            req = self._request(model, call)
            if model.needs_thread(req):
                self._prepare_off_loop(ticket, req)
                return
            prepared = model.prepare(req)
        except EdgedError as e:
            self.admission.fail(ticket, e)
            return
        self.admission.submit(ticket, prepared, priority=req.priority, timeout_ms=req.timeout_ms,
                              quiet=self._alone)

    def _alone(self) -> bool:
        """No other KServe call is waiting here (asked only by a batcher that may compute
        inline, ``inline_max_ms``): calls still being parsed on grpc's threads may wait
        that long, as ZeroMQ messages do for a native request computed inline."""
        return self._open <= 1

    def _finish(self, call: InferCall, protocol: str,
                done: Callable[[InferAnswer | EdgedError], None], ticket: Ticket,
                outcome: Result | EdgedError) -> None:
        """The request's one outcome (``Admission`` has counted it already)."""
        self.state.answered += 1
        self._open -= 1
        model = ticket.model
        if isinstance(outcome, EdgedError):
            self._count(protocol, model.name, outcome.status, call.received)
            done(outcome)
            return
        self._count(protocol, model.name, "OK", call.received)
        try:
            answer = self._answer(model, call, outcome)
        except EdgedError as e:
            done(e)
            return
        done(answer)

    def refused(self, protocol: str, model: str, err: EdgedError, received: float) -> None:
        """Count a request the server could not even read (bad tensors, bad JSON)."""
        self.admission.reject(err, model)
        found = self.state.registry.find_served(model) is not None
        self._count(protocol, model if found else "", err.status, received)

    def _prepare_off_loop(self, ticket: Ticket, req: Request) -> None:
        """Decode and preprocess an image on the pool, then submit from the loop."""
        if self._decoding >= MAX_PENDING_DECODES:
            self.admission.fail(ticket, ResourceExhausted(
                f"{self._decoding} images are waiting to be preprocessed; try again shortly"))
            return
        self._decoding += 1
        loop = asyncio.get_running_loop()

        def work() -> None:
            outcome: Any
            try:
                outcome = ticket.model.prepare(req)
            except EdgedError as e:
                outcome = e
            except Exception as e:
                log.exception("preprocessing failed")
                outcome = EdgedError(f"preprocessing failed: {type(e).__name__}: {e}")
            with contextlib.suppress(RuntimeError):  # the loop closed: the daemon stopped
                loop.call_soon_threadsafe(prepared, outcome)

        def prepared(outcome: Any) -> None:
            self._decoding -= 1
            if isinstance(outcome, EdgedError):
                self.admission.fail(ticket, outcome)
            elif not self.state.serving:
                self.admission.fail(ticket, Unavailable("the daemon is shutting down"))
            else:
                self.admission.submit(ticket, outcome, priority=req.priority,
                                      timeout_ms=req.timeout_ms, quiet=self._alone)

        try:
            self._pool.submit(work)
        except RuntimeError:  # the pool is shut down: the daemon is stopping
            self._decoding -= 1
            self.admission.fail(ticket, Unavailable("the daemon is shutting down"))

    def _request(self, model: Served, call: InferCall) -> Request:
        """The native ``Request`` this KServe request stands for."""
        params = call.parameters
        timeout_ms = None
        t = params.get("timeout")
        if t is not None:
            if isinstance(t, bool) or not isinstance(t, int) or t < 0:
                raise InvalidArgument(f"parameter 'timeout' must be microseconds >= 0; got {t!r}")
            timeout_ms = t / 1000.0 if t > 0 else None
        if call.client_deadline_s is not None:
            left = max(call.client_deadline_s, 1e-6) * 1000.0
            timeout_ms = left if timeout_ms is None else min(timeout_ms, left)
        priority = 1
        p = params.get("priority")
        if p is not None:
            if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p <= 1001:
                raise InvalidArgument(f"parameter 'priority' must be 0 (default) or 1..1001 "
                                      f"(1 = most important); got {p!r}")
            priority = p - 1 if p > 0 else 1
        outputs, options = self._outputs(model, call.outputs)
        for k, types in _OPTION_TYPES.items():
            if k in params:
                v = params[k]
                if isinstance(v, bool) or not isinstance(v, types):
                    raise InvalidArgument(f"parameter {k!r} has the wrong type: {v!r}")
                options[k] = _classes(v) if k == "classes" else v
        if options and not _detector(model):
            raise InvalidArgument(f"{', '.join(sorted(options))}: detection parameters, but "
                                  f"model {model.name!r} is not a detection model")
        stream = params.get("stream")
        limit = self.state.config.server.limits.max_id_length
        if stream is not None and (not isinstance(stream, str) or not stream
                                   or len(stream) > limit):
            raise InvalidArgument(f"parameter 'stream' must be a non-empty string of at most "
                                  f"{limit} characters")
        inputs = [InputMeta(t.name, "raw", t.array.dtype, t.array.shape, t.array)
                  for t in call.inputs]
        return Request(op="infer", id=call.id, model=model.name, inputs=inputs,
                       timeout_ms=timeout_ms, priority=priority, outputs=outputs,
                       options=options, stream=stream)

    def _outputs(self, model: Served, asked: list[str] | None
                 ) -> tuple[list[str] | None, dict[str, Any]]:
        """A detector answers ``detections``; raw outputs only when asked by name."""
        if not _detector(model) or asked is None:
            return asked, {}
        raw = [o for o in asked if o != DETECTIONS]
        return (raw or None), ({"raw": True} if raw else {})

    def _answer(self, model: Served, call: InferCall, r: Result) -> InferAnswer:
        outputs = list(r.outputs)
        parameters: dict[str, str] = {}
        if r.detections is not None and (call.outputs is None or DETECTIONS in call.outputs):
            outputs.append((DETECTIONS, np.ascontiguousarray(r.detections, np.float32)))
            # the detections' columns and labels (a pipeline's: each stage's too), as the
            # native reply's header entry says them
            header = r.detections_header or model.detections_header(r.detections)
            parameters["labels"] = json.dumps(header, separators=(",", ":"))
        if _detector(model) and call.outputs is not None:
            order = {n: i for i, n in enumerate(call.outputs)}
            outputs.sort(key=lambda o: order.get(o[0], len(order)))
        timing = {"queue_us": int(r.queue_s * 1e6), "compute_us": int(r.compute_s * 1e6),
                  "batch": r.batch}
        return InferAnswer(model.name, r.variant, outputs, timing, parameters)

    def _count(self, protocol: str, model: str, status: str, received: float) -> None:
        self.m_requests.labels(protocol, model, status).inc()
        self.m_duration.labels(protocol).observe(time.monotonic() - received)


def _settle(fut: asyncio.Future[InferAnswer], outcome: InferAnswer | EdgedError) -> None:
    if fut.done():  # the client went away (cancelled)
        return
    if isinstance(outcome, EdgedError):
        fut.set_exception(outcome)
    else:
        fut.set_result(outcome)


def _detector(m: Served) -> bool:
    return m.detects


def _columns(m: Served) -> int:
    """The detections' columns: 6 for a detector (7 with track ids); a pipeline's vary
    with its stages and the request's tracking (-1)."""
    return 6 if isinstance(m, Model) else -1


def _backend(m: Served) -> str:
    return (describe_model(m).get("backend") or "") if isinstance(m, Model) else "pipeline"


def _classes(v: str) -> list[int]:
    try:
        return [int(c) for c in v.split(",") if c.strip()]
    except ValueError:
        raise InvalidArgument(f"parameter 'classes' must be class ids like \"0,2\"; got {v!r}"
                              ) from None


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
