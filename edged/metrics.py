"""Prometheus metrics, kept in the single daemon process (no multiprocess mode).

Names follow Prometheus practice: ``edged_`` prefix, base units, ``_total`` on counters,
labels bounded to model/variant/status (never request ids). The governor registers
its own sensor and level metrics on the same registry (edged/governor/metrics.py).
docs/metrics.md lists every metric.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    start_http_server,
)

from edged import __version__

#: how often the lifecycle applies the request path's pending metric updates at the latest
FLUSH_S = 1.0

#: an update the request path leaves for later: a series' method and its argument
Update = tuple[Callable[[Any], None], Any]


class Later:
    """Metric updates made on a request's path, applied after its reply is sent.

    Why: a prometheus_client ``inc``/``observe``/``set`` takes a lock and costs a few
    Python calls; a lone request made ~15 of them between its receipt and its reply, on
    the thread that replies (docs/architecture.md, "The hot path"). The request path
    appends ``(series method, value)`` here instead (``add``: ``deque.append``, one C
    call, no lock), and the updates are applied in bulk: before every scrape (``Flush``
    is the registry's first collector), before the daemon reads a series itself
    (``Metrics.flush``), and every ``FLUSH_S`` by the lifecycle. A scrape right after a
    reply therefore still counts it. ``deque.append`` and ``popleft`` are atomic, so the
    loop may add while the scrape thread flushes; the lock keeps two flushes from
    interleaving one series' updates (a gauge's last ``set`` wins, in order)."""

    def __init__(self) -> None:
        self._updates: deque[Update] = deque()
        self.add: Callable[[Update], None] = self._updates.append
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._updates)

    def flush(self) -> None:
        updates = self._updates
        pop = updates.popleft
        with self._lock:
            while updates:
                fn, value = pop()
                fn(value)


class Flush:
    """The registry's first collector: applies the updates ``Later`` holds, yields nothing."""

    def __init__(self, later: Later) -> None:
        self.later = later

    def describe(self) -> Iterable[Any]:
        return []

    def collect(self) -> Iterable[Any]:
        self.later.flush()
        return []

# Edge inference latencies: ~exponential from 100 µs to 10 s, with extra resolution
# around common frame budgets (33 ms = 30 fps, 50 ms = 20 fps).
LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.033, 0.05, 0.1, 0.25,
    0.5, 1.0, 2.5, 5.0, 10.0,
)
BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        #: updates from the request path, applied after the reply (``Later``)
        self.later = Later()
        r.register(Flush(self.later))  # first: every scrape sees what was answered
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        Info("edged_build", "edged version", registry=r).info({"version": __version__})
        self.requests = Counter(
            "edged_requests", "Requests answered, by model, variant and status",
            ["model", "variant", "status"], registry=r)
        self.request_duration = Histogram(
            "edged_request_duration_seconds", "Time from receipt to reply (OK replies)",
            ["model"], buckets=LATENCY_BUCKETS, registry=r)
        self.queue_duration = Histogram(
            "edged_queue_duration_seconds", "Time a request waited before its batch ran",
            ["model"], buckets=LATENCY_BUCKETS, registry=r)
        self.compute_duration = Histogram(
            "edged_compute_duration_seconds", "Backend compute time per batch",
            ["model", "variant"], buckets=LATENCY_BUCKETS, registry=r)
        self.postprocess_duration = Histogram(
            "edged_postprocess_duration_seconds",
            "Detector post-processing (decode, NMS, box mapping) per batch", ["model"],
            buckets=LATENCY_BUCKETS, registry=r)
        self.detections_per_frame = Histogram(
            "edged_detections_per_frame", "Detections returned per frame", ["model"],
            buckets=(0, 1, 2, 3, 5, 10, 20, 50, 100, 300), registry=r)
        self.variant_checks = Counter(
            "edged_variant_checks", "Checks of a variant against the model's reference on "
            "this device before it goes live, by result (ok|refused|unverified)",
            ["model", "variant", "result"], registry=r)
        self.batch_size = Histogram(
            "edged_batch_size", "Rows per computed batch", ["model"],
            buckets=BATCH_BUCKETS, registry=r)
        self.queue_depth = Gauge(
            "edged_queue_depth", "Requests waiting in the model's queue", ["model"], registry=r)
        self.queue_capacity = Gauge(
            "edged_queue_capacity", "The model's max_queue", ["model"], registry=r)
        self.model_loads = Counter(
            "edged_model_loads", "Variant loads, by result (ok|error)",
            ["model", "variant", "result"], registry=r)
        self.model_load_duration = Gauge(
            "edged_model_load_duration_seconds", "Duration of the last load incl. warm-up",
            ["model", "variant"], registry=r)
        self.model_ready = Gauge(
            "edged_model_ready", "1 when the model serves requests", ["model"], registry=r)
        self.active_variant = Gauge(
            "edged_active_variant_info", "1 for the variant that computes the model's requests",
            ["model", "variant", "backend"], registry=r)
        # One series per model: the sha256 of the bytes the live variant was opened from,
        # so a file replaced in place (and reloaded) shows as a new digest.
        self.live_artifact = Gauge(
            "edged_live_artifact_info",
            "1 for the artifact the model's live variant was opened from, by its sha256",
            ["model", "variant", "sha256"], registry=r)
        self.swaps = Counter(
            "edged_variant_swaps", "Variant swaps, by reason",
            ["model", "from_variant", "to_variant", "reason"], registry=r)
        self.reloads = Counter(
            "edged_config_reloads", "Config reloads, by result (ok|error)", ["result"],
            registry=r)
        self.energy = Counter(
            "edged_energy_joules", "Energy attributed to the model's inference "
            "(measured power × compute time)", ["model"], registry=r)
        # Endpoint kind: requests of [[server.frigate]] endpoints are counted here as
        # well as in edged_requests_total (native = requests_total - frigate).
        self.frigate_requests = Counter(
            "edged_frigate_requests", "Requests of Frigate detector endpoints, by endpoint, "
            "model and status (errors are answered with an all-zero result)",
            ["endpoint", "model", "status"], registry=r)
        self.frigate_label_fallbacks = Counter(
            "edged_frigate_label_fallbacks", "Rows of a Frigate endpoint's pipeline replies "
            "that do not carry its label_from stage's class: the detector's class instead, by "
            "why the stage gave none (failed|shed|not_selected|unlabelled), or left out (clash)",
            ["endpoint", "stage", "reason"], registry=r)
        self.frigate_duration = Histogram(
            "edged_frigate_request_duration_seconds", "Frigate endpoint: receipt to reply",
            ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)
        self.kserve_requests = Counter(
            "edged_kserve_requests", "KServe v2 infer requests, by protocol (grpc|http), model "
            "and status (also counted in edged_requests_total)",
            ["protocol", "model", "status"], registry=r)
        self.kserve_duration = Histogram(
            "edged_kserve_request_duration_seconds", "KServe v2 infer: receipt to reply",
            ["protocol"], buckets=LATENCY_BUCKETS, registry=r)
        self.offload_requests = Counter(
            "edged_offload_requests", "Requests handed to the [offload] server, by model, why "
            "(governor|deadline) and outcome (remote: answered there; fallen_back: the remote "
            "failed and it was computed here; failed: no time left to)",
            ["model", "reason", "outcome"], registry=r)
        self.offload_remote = Histogram(
            "edged_offload_remote_duration_seconds", "Remote infer call, send to answer",
            ["model"], buckets=LATENCY_BUCKETS, registry=r)
        self.offload_up = Gauge("edged_offload_remote_up", "1 while the remote's health check "
                                "passes for the model", ["model"], registry=r)
        self.stream_frames = Counter(
            "edged_stream_frames", "Frames of requests with a stream id, by model and outcome "
            "(received, served, dropped_stale, dropped_rate); per-stream figures are in "
            "edged status", ["model", "outcome"], registry=r)
        self.streams_tracked = Gauge(
            "edged_streams", "Stream ids the model currently remembers (bounded)", ["model"],
            registry=r)
        self.pipeline_untracked = Counter(
            "edged_pipeline_untracked_boxes", "Boxes of a pipeline's tracked frames that no "
            "track took (track_id -1): read afresh on every frame, so the exception",
            ["pipeline"], registry=r)
        self.pipeline_boxes = Counter(
            "edged_pipeline_boxes", "Boxes of pipeline answers, by pipeline, stage and the "
            "box's state for the stage (fresh|carried|not_selected|failed|shed)",
            ["pipeline", "stage", "state"], registry=r)
        # The model store (edged.delivery.store): one for every version that arrives.
        self.store_bytes = Gauge(
            "edged_store_bytes", "Bytes the model store uses (versions, their rungs, partial "
            "downloads)", registry=r)
        self.store_quota = Gauge(
            "edged_store_quota_bytes", "The model store's quota ([server] max_store_bytes)",
            registry=r)
        self.store_versions = Gauge(
            "edged_store_versions", "Model versions stored", registry=r)
        self.store_evictions = Counter(
            "edged_store_evictions", "Versions evicted to keep the store within its bounds",
            registry=r)
        self.frigate_transfers = Counter(
            "edged_frigate_transfers", "Model files Frigate sent, by endpoint and outcome "
            "(stored, same: bytes stored already, refused_pace, refused_quota, refused_disk, "
            "refused_check)", ["endpoint", "outcome"], registry=r)
        # Model delivery (docs/delivery.md): which version serves, and every update's fate.
        self.model_version = Gauge(
            "edged_model_version_info", "1 for the version a delivered model serves, by "
            "model, version label and digest (the bundle manifest's sha256)",
            ["model", "version", "digest"], registry=r)
        self.model_updates = Counter(
            "edged_model_updates", "New versions of delivered models and of models Frigate "
            "sends, by model, outcome (promoted, refused, rolled_back) and reason "
            "(poll|operator|frigate for a promotion; the refusal's reason: signature, digest, "
            "accuracy, contract, ...)",
            ["model", "outcome", "reason"], registry=r)
        self.inflight = Gauge(
            "edged_inflight_requests", "Requests received and not yet answered", registry=r)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def flush(self) -> None:
        """Apply the request path's pending updates (before reading a series in-process)."""
        self.later.flush()

    def set_active(self, model: str, variant: str, backend: str,
                   sha256: str | None = None) -> None:
        # Clear the model's previous series so exactly one variant reads 1.
        for gauge in (self.active_variant, self.live_artifact):
            for labels in list(gauge._metrics):
                if labels[0] == model:
                    gauge.remove(*labels)
        self.active_variant.labels(model, variant, backend).set(1)
        if sha256:
            self.live_artifact.labels(model, variant, sha256).set(1)

    def serve(self, host: str, port: int) -> None:
        """Start the HTTP exposition thread; OSError (port in use) propagates."""
        self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)

    @property
    def port(self) -> int | None:
        return self._server.server_port if self._server else None

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def quantile_ms(counts: list[tuple[float, float]], frac: float) -> float | None:
    """The ``frac`` quantile in ms of a latency histogram from its cumulative bucket counts
    ``(le in seconds, count)``, interpolated within the bucket as Prometheus's
    ``histogram_quantile`` does (None: nothing counted). One reading for the status reply
    and the watch window, so both say the same p99 for the same requests."""
    if not counts or counts[-1][1] <= 0:
        return None
    want = frac * counts[-1][1]
    prev_b, prev_c = 0.0, 0.0
    for b, c in counts:
        if c >= want:
            if b == float("inf"):
                return prev_b * 1000
            span = c - prev_c
            return (prev_b + (b - prev_b) * ((want - prev_c) / span if span else 1)) * 1000
        prev_b, prev_c = b, c
    return prev_b * 1000
