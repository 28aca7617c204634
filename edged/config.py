"""The daemon's configuration: parsed from TOML once into frozen, validated objects.

Every problem names the file, the dotted key path and what was expected, and all
problems are reported together (``edged check``). Paths in the file are relative to
the file's own folder, so a config and its models can move together.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from edged.backends import BACKENDS, backend_module
from edged.backends.base import BackendOptions
from edged.detect.config import PostprocessConfig
from edged.errors import ConfigError
from edged.frigate_config import FrigateConfig, check_frigate, read_frigate
from edged.governor.config import GovernorConfig
from edged.kserve.config import (
    KServeConfig,
    OffloadConfig,
    check_offload_models,
    parse_kserve,
    parse_offload,
)
from edged.overload_config import OverloadConfig
from edged.preprocess_config import PreprocessConfig
from edged.schema import Table, non_negative, positive, raise_if_problems, zmq_endpoint
from edged.verify.config import BY_PRECISION, ModelVerify, VariantVerify

DEFAULT_ENDPOINTS = ("ipc://edged.sock", "tcp://127.0.0.1:5555")
DEFAULT_CONTROL = "ipc://control.sock"
LOG_LEVELS = ("debug", "info", "warning", "error")


@dataclass(frozen=True)
class CurveConfig:
    """ZeroMQ CURVE on the inference endpoints (see docs/security.md)."""

    server_secret_key: Path  # zmq.auth certificate file holding the server's secret key
    clients_dir: Path  # directory of allowed client public-key certificates (*.key)


@dataclass(frozen=True)
class Limits:
    """``[server.limits]``: bounds on what one message may make the daemon read or allocate.

    Built once at load (``_limits`` names the key of any bad value); the request parser
    (``edged.protocol.request``) and the models take it as a parameter."""

    max_message_bytes: int = 64 << 20
    #: ZMQ_MAXMSGSIZE: a frame above it makes libzmq drop the connection unread. Between
    #: max_message_bytes and this, a message is read and answered RESOURCE_EXHAUSTED.
    #: 0 = twice max_message_bytes.
    hard_message_bytes: int = 0
    max_header_bytes: int = 64 << 10
    max_inputs: int = 16
    max_rank: int = 8
    max_dim: int = 1 << 20
    max_elements: int = 1 << 26
    max_id_length: int = 256
    max_image_pixels: int = 1 << 25  # decoded image area (e.g. 8K x 4K)

    @property
    def hard_cap(self) -> int:
        return self.hard_message_bytes or 2 * self.max_message_bytes


@dataclass(frozen=True)
class ShmConfig:
    """``[server.shm]``: shared-memory frames for clients on this host (docs/protocol.md).

    Why these bounds: a ring is tmpfs memory the client fills, so a client may hold
    only a few, the daemon only so many bytes in all, and a ring nobody uses (or whose
    process is gone) is unlinked after ``idle_s`` (checked every ``check_s``)."""

    enabled: bool = True
    max_segments_per_client: int = 4
    max_bytes_per_client: int = 64 << 20
    max_bytes: int = 512 << 20
    max_slots: int = 64
    idle_s: float = 60.0
    check_s: float = 1.0


@dataclass(frozen=True)
class ServerConfig:
    endpoints: tuple[str, ...] = DEFAULT_ENDPOINTS
    control: str = DEFAULT_CONTROL
    runtime_dir: Path | None = None
    #: where sent models are kept (None: $STATE_DIRECTORY, else ~/.local/state/edged)
    state_dir: Path | None = None
    drain_timeout_s: float = 10.0
    stall_timeout_s: float = 30.0
    swap_memory_headroom_mb: float = 64.0
    log_level: str = "info"
    insecure: bool = False
    max_inflight_per_client: int = 1024
    limits: Limits = field(default_factory=Limits)
    curve: CurveConfig | None = None
    frigate: tuple[FrigateConfig, ...] = ()
    shm: ShmConfig = field(default_factory=ShmConfig)
    kserve: KServeConfig = field(default_factory=KServeConfig)


@dataclass(frozen=True)
class MetricsConfig:
    host: str | None = "127.0.0.1"
    port: int = 9464

    @property
    def enabled(self) -> bool:
        return self.host is not None


@dataclass(frozen=True)
class VariantConfig:
    name: str
    backend: str
    path: Path
    options: BackendOptions
    #: the variant others are checked against on this device (default: the first)
    reference: bool = False
    verify: VariantVerify = field(default_factory=VariantVerify)
    #: fp32 / fp16 / int8 (default: the artifact's sidecar, else its name)
    precision: str | None = None


@dataclass(frozen=True)
class ModelConfig:
    name: str
    variants: tuple[VariantConfig, ...]  # heaviest first: the governor's ladder
    required: bool = False
    max_batch_size: int = 8
    max_queue: int = 256
    max_delay_ms: float = 0.0
    auto_batch: bool = False
    #: after a batch, hold a short queue for this fraction of a batch's compute time (0: off)
    batch_window: float = 0.0
    #: a lone request on an idle model computes on the event loop below this (0: off)
    inline_max_ms: float = 0.0
    preprocess: PreprocessConfig | None = None
    postprocess: PostprocessConfig | None = None  # a detector: answer with boxes
    #: frames per second one stream may send (0: no limit); a request's max_fps may lower it
    max_stream_fps: float = 0.0
    #: stream ids remembered at most (least recently seen forgotten first)
    max_streams: int = 4096
    #: a stream not seen for this long is forgotten
    stream_idle_s: float = 60.0
    verify: ModelVerify = field(default_factory=ModelVerify)
    #: stepping down the ladder while requests come too close to their deadlines
    overload: OverloadConfig = field(default_factory=OverloadConfig)


@dataclass(frozen=True)
class Config:
    file: Path
    server: ServerConfig
    metrics: MetricsConfig
    models: tuple[ModelConfig, ...]
    governor: GovernorConfig
    offload: OffloadConfig = field(default_factory=OffloadConfig)

    def model(self, name: str) -> ModelConfig | None:
        return next((m for m in self.models if m.name == name), None)

    def with_overrides(
        self, endpoints: list[str] | None = None, metrics: str | None = None,
        runtime_dir: str | None = None, control: str | None = None,
    ) -> Config:
        """Apply CLI flags (they win over the file) so daemons can run side by side."""
        server = self.server
        if endpoints:
            server = replace(server, endpoints=tuple(endpoints))
        if runtime_dir:
            server = replace(server, runtime_dir=Path(runtime_dir))
        if control:
            server = replace(server, control=control)
        m = self.metrics
        if metrics is not None:
            m = parse_listen(metrics, "--metrics")
        return replace(self, server=server, metrics=m)


def parse_listen(value: str, where: str) -> MetricsConfig:
    """``host:port``, ``:port`` (all interfaces) or ``""``/``off`` (disabled)."""
    if value in ("", "off", "none"):
        return MetricsConfig(host=None)
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigError([f"{where}: expected HOST:PORT (e.g. 127.0.0.1:9464) or 'off'; "
                           f"got {value!r}"])
    host = host.strip("[]") or "0.0.0.0"
    return MetricsConfig(host=host, port=int(port))


def _limits(t: Table) -> Limits:
    d = Limits()
    kw: dict[str, Any] = {}
    for key in d.__dataclass_fields__:
        if key == "hard_message_bytes":
            kw[key] = t.get(key, int, 0, check=non_negative)
            continue
        kw[key] = t.get(key, int, getattr(d, key), check=positive)
    if kw["hard_message_bytes"] and kw["hard_message_bytes"] < kw["max_message_bytes"]:
        t.problem("hard_message_bytes", f"must be >= max_message_bytes "
                  f"({kw['max_message_bytes']}) or 0; got {kw['hard_message_bytes']}")
        kw["hard_message_bytes"] = 0
    t.done()
    return Limits(**kw)


def _shm(t: Table) -> ShmConfig:
    d = ShmConfig()
    cfg = ShmConfig(
        enabled=t.get("enabled", bool, d.enabled),
        max_segments_per_client=t.get("max_segments_per_client", int,
                                      d.max_segments_per_client, check=positive),
        max_bytes_per_client=t.get("max_bytes_per_client", int, d.max_bytes_per_client,
                                   check=positive),
        max_bytes=t.get("max_bytes", int, d.max_bytes, check=positive),
        max_slots=t.get("max_slots", int, d.max_slots, check=positive),
        idle_s=t.get("idle_s", float, d.idle_s, check=positive),
        check_s=t.get("check_s", float, d.check_s, check=positive),
    )
    t.done()
    return cfg


def _server(t: Table) -> ServerConfig:
    endpoints = t.get_list("endpoints", str, list(DEFAULT_ENDPOINTS))
    for i, e in enumerate(endpoints or []):
        err = zmq_endpoint(e)
        if err:
            t.problem(f"endpoints[{i}]", f"{err}; got {e!r}")
    if endpoints is not None and not endpoints:
        t.problem("endpoints", "needs at least one endpoint")
    control = t.get("control", str, DEFAULT_CONTROL,
                    check=lambda c: None if c.startswith("ipc://") else
                    "the control endpoint must be ipc:// (never tcp: operator actions stay local)")
    runtime_dir = t.get_path("runtime_dir", None)
    state_dir = t.get_path("state_dir", None)
    if state_dir is not None and state_dir.exists() and not state_dir.is_dir():
        t.problem("state_dir", f"{state_dir} exists and is not a directory")
    curve_t = t.table("curve")
    curve = None
    if curve_t.data:
        curve = CurveConfig(
            server_secret_key=curve_t.get_path("server_secret_key", must_exist=True),
            clients_dir=curve_t.get_path("clients_dir", must_exist=True),
        )
        curve_t.done()
    cfg = ServerConfig(
        endpoints=tuple(endpoints or DEFAULT_ENDPOINTS),
        control=control or DEFAULT_CONTROL,
        runtime_dir=runtime_dir,
        state_dir=state_dir,
        drain_timeout_s=t.get("drain_timeout_s", float, 10.0, check=non_negative),
        stall_timeout_s=t.get("stall_timeout_s", float, 30.0, check=positive),
        swap_memory_headroom_mb=t.get("swap_memory_headroom_mb", float, 64.0,
                                      check=non_negative),
        log_level=t.get("log_level", str, "info", choices=LOG_LEVELS),
        insecure=t.get("insecure", bool, False),
        max_inflight_per_client=t.get("max_inflight_per_client", int, 1024, check=positive),
        limits=_limits(t.table("limits")),
        curve=curve,
        frigate=tuple(f for f in (read_frigate(ft) for ft in t.tables("frigate")) if f),
        shm=_shm(t.table("shm")),
        kserve=parse_kserve(t.table("kserve")),
    )
    t.done()
    return cfg


def _metrics(t: Table) -> MetricsConfig:
    listen = t.get("listen", str, "127.0.0.1:9464")
    t.done()
    if listen is None:
        return MetricsConfig()
    try:
        return parse_listen(listen, t.key_path("listen"))
    except ConfigError as e:
        t.problems.append(f"{t.file}: {e.problems[0]}")
        return MetricsConfig()


def _variant(t: Table) -> VariantConfig | None:
    name = t.get("name", str)
    backend = t.get("backend", str, choices=tuple(BACKENDS))
    path = t.get_path("path")  # existence is checked at load: one bad file fails one model
    opts_t = t.table("options")
    reference = t.get("reference", bool, False)
    verify = VariantVerify.from_value(t)
    precision = t.get("precision", str, None, choices=tuple(BY_PRECISION))
    options: BackendOptions | None = None
    if backend is not None:
        try:
            options = backend_module(backend).Options.from_table(opts_t)
        except ImportError as e:  # the module itself must import without its runtime
            t.problem("backend", f"backend {backend!r} cannot be imported: {e}")
    t.done()
    if name is None or backend is None or path is None or options is None:
        return None
    return VariantConfig(name=name, backend=backend, path=path, options=options,
                         reference=reference, verify=verify, precision=precision)


def _model(t: Table) -> ModelConfig | None:
    name = t.get("name", str, check=lambda n: None if n.strip() else "must not be empty")
    variants = [v for v in (_variant(vt) for vt in t.tables("variants", required=True)) if v]
    seen: set[str] = set()
    for v in variants:
        if v.name in seen:
            t.problem("variants", f"variant name {v.name!r} is used twice")
        seen.add(v.name)
    refs = [v.name for v in variants if v.reference]
    if len(refs) > 1:
        t.problem("variants", f"only one variant may be the reference; {', '.join(refs)} say "
                  "reference = true")
    verify_t = t.table("verify")
    verify = ModelVerify.from_table(verify_t)
    pre_t = t.table("preprocess")
    pre = PreprocessConfig.from_table(pre_t) if pre_t.data else None
    post_t = t.table("postprocess")
    post = PostprocessConfig.from_table(post_t) if post_t.data else None
    if post_t.data and not pre_t.data:
        t.problem("postprocess", "a detector needs [models.preprocess] (its width and height "
                  "are what frames are letterboxed or stretched to)")
    batching = t.table("batching")  # batching keys may sit in [models.batching] or inline
    src = batching if batching.data else t
    cfg = ModelConfig(
        name=name or "",
        variants=tuple(variants),
        required=t.get("required", bool, False),
        max_batch_size=src.get("max_batch_size", int, 8, check=positive),
        max_queue=src.get("max_queue", int, 256, check=positive),
        max_delay_ms=src.get("max_delay_ms", float, 0.0, check=non_negative),
        auto_batch=src.get("auto_batch", bool, False),
        batch_window=src.get("batch_window", float, 0.0, check=_fraction),
        inline_max_ms=src.get("inline_max_ms", float, 0.0, check=non_negative),
        preprocess=pre,
        postprocess=post,
        max_stream_fps=t.get("max_stream_fps", float, 0.0, check=non_negative),
        max_streams=t.get("max_streams", int, 4096, check=positive),
        stream_idle_s=t.get("stream_idle_s", float, 60.0, check=positive),
        verify=verify,
        overload=OverloadConfig.from_table(t.table("overload")),
    )
    if batching.data:
        batching.done()
    t.done()
    return cfg if name and variants else None


def _fraction(v: float) -> str | None:
    return None if 0.0 <= v <= 1.0 else "must be a fraction from 0 to 1 (of a batch's compute time)"


def parse_config(data: dict[str, Any], file: Path | str) -> Config:
    """Build a Config from already-parsed TOML (``file`` anchors relative paths)."""
    file = Path(file).resolve()
    root = Table(data, "", file)
    server = _server(root.table("server"))
    metrics = _metrics(root.table("metrics"))
    models = [m for m in (_model(mt) for mt in root.tables("models", required=True)) if m]
    names = [m.name for m in models]
    for n in {n for n in names if names.count(n) > 1}:
        root.problem("models", f"model name {n!r} is used twice")
    check_frigate(root, server, models)
    frigate_models = {f.model for f in server.frigate}
    models = [replace(m, overload=m.overload.resolved(m.name in frigate_models))
              for m in models]
    gov_t = root.table("governor")
    governor = GovernorConfig.from_table(gov_t)
    off_t = root.table("offload")
    offload = parse_offload(off_t)
    check_offload_models(off_t, offload, {m.name: [v.name for v in m.variants] for m in models})
    for lv in governor.levels or ():
        for name in lv.offload:
            if offload.for_model(name) is None:
                root.problem("governor.levels", f"level {lv.name!r}: offload {name!r} has no "
                             "[[offload.models]] entry (where would its requests go?)")
    root.done()
    raise_if_problems(root.problems)
    return Config(file=file, server=server, metrics=metrics, models=tuple(models),
                  governor=governor, offload=offload)


def load_config(path: str | Path) -> Config:
    """Read and validate a config file; raises ConfigError listing every problem."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise ConfigError([f"{p}: cannot read config file: {e.strerror or e}"]) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ConfigError([f"{p}: not UTF-8 text: {e}"]) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError([f"{p}: invalid TOML: {e}"]) from None
    return parse_config(data, p)
