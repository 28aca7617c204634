"""What the KServe gRPC and HTTP servers share: admission, the batcher hand-off, replies, metadata.

The metadata answers (health, model metadata and configuration, statistics) are
``edged.protocols.kserve.metadata``'s, reached as ``KServeCore.meta``; the rest is the infer
path.

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
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edged.batching.queue import Result
from edged.errors import EdgedError, InvalidArgument, ResourceExhausted, Unavailable
from edged.host.thread_names import name_os_thread
from edged.model.registry import Served
from edged.model.request import InputMeta, Request
from edged.protocols.admission import Admission, Ticket, prepare_outcome
from edged.protocols.kserve.metadata import DETECTIONS, KServeMetadata
from edged.protocols.kserve.tensors import Tensor
from edged.protocols.serving import Serving

log = logging.getLogger("edged.protocols.kserve")

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
    """Admission and replies for KServe requests; ``meta`` answers what the protocol asks
    of the server and its models."""

    def __init__(self, state: Serving) -> None:
        self.state = state
        #: health, metadata, configuration and statistics (admit nothing)
        self.meta = KServeMetadata(state)
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="edged-kserve",
                                        initializer=name_os_thread)
        self._decoding = 0
        #: KServe calls admitted and not answered (both servers; counted on the loop)
        self._open = 0
        #: gRPC calls parsed on a handler thread and handed to the loop, not begun yet (one
        #: item each; ``deque`` appends and pops are atomic across threads)
        self.arriving: deque[None] = deque()
        self.admission = Admission(state)
        self.m_requests = state.metrics.kserve_requests
        self.m_duration = state.metrics.kserve_duration

    def close(self) -> None:
        self._pool.shutdown(wait=False)

    # -- inference ----------------------------------------------------------------------
    async def infer(self, call: InferCall, protocol: str) -> InferAnswer:
        """``begin`` awaited on the loop (the HTTP server): the answer, or the EdgedError
        for the reply."""
        fut: asyncio.Future[InferAnswer] = asyncio.get_running_loop().create_future()
        self.begin(call, protocol, functools.partial(settle, fut))
        return await fut

    def begin(self, call: InferCall, protocol: str,
              done: Callable[[InferAnswer | EdgedError], None], lane: bool = False) -> None:
        """Admit, prepare and queue one request on the loop; ``done`` gets its answer or
        the EdgedError for the reply, once, on the loop. ``lane``: the call may take the
        express lane (``_alone``; only gRPC calls parsed on grpc's handler threads).

        Through ``Admission`` like every protocol: it counts the request once (and the
        KServe counters here say which protocol it came by)."""
        if lane and self.arriving:
            self.arriving.pop()
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
                              quiet=self._alone if lane else None)

    def _alone(self) -> bool:
        """No other gRPC call is open or on its way to the loop (asked only by a batcher
        that may compute inline, the express lane): calls still being parsed on grpc's
        threads may wait that long, as ZeroMQ messages do for a native request computed
        inline. HTTP calls and the loop gRPC server's never take the lane: aiohttp and
        grpc.aio read calls on the loop, so calls waiting in their sockets cannot be seen,
        and computing inline would keep them from ever forming a batch."""
        return self._open <= 1 and not self.arriving

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
            outcome = prepare_outcome(lambda: ticket.model.prepare(req), log)
            with contextlib.suppress(RuntimeError):  # the loop closed: the daemon stopped
                loop.call_soon_threadsafe(prepared, outcome)

        def prepared(outcome: Any) -> None:
            self._decoding -= 1
            self.admission.decoded(ticket, outcome, priority=req.priority,
                                   timeout_ms=req.timeout_ms)

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


def settle(fut: asyncio.Future[InferAnswer], outcome: InferAnswer | EdgedError) -> None:
    if fut.done():  # the client went away (cancelled)
        return
    if isinstance(outcome, EdgedError):
        fut.set_exception(outcome)
    else:
        fut.set_result(outcome)


def _detector(m: Served) -> bool:
    return m.detects


def _classes(v: str) -> list[int]:
    try:
        return [int(c) for c in v.split(",") if c.strip()]
    except ValueError:
        raise InvalidArgument(f"parameter 'classes' must be class ids like \"0,2\"; got {v!r}"
                              ) from None
