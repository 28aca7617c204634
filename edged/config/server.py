"""``[server]`` and ``[metrics]``: endpoints, limits, shared memory, CURVE, where metrics listen.

Why together: these are the daemon's own tables (not a model's, not a protocol's), read
once at start and on reload; every bound a message is checked against is ``Limits``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edged.config.frigate import FrigateConfig, read_frigate
from edged.config.kserve import KServeConfig, parse_kserve
from edged.config.schema import Table, non_negative, positive, zmq_endpoint
from edged.errors import ConfigError

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
    (``edged.protocols.native.request``) and the models take it as a parameter."""

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
    #: where model versions are kept (None: $STATE_DIRECTORY, else ~/.local/state/edged)
    state_dir: Path | None = None
    #: the model store's total quota (``STATE_DIR/store``; edged.delivery.store): a small
    #: SD card shares its space with the OS and the logs
    max_store_bytes: int = 2 << 30
    #: versions kept per model: the one serving, its fallback and the newest others
    max_store_versions: int = 4
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

    @property
    def swap_headroom_bytes(self) -> int:
        """Memory a swap must leave free beside the variant it opens."""
        return int(self.swap_memory_headroom_mb * (1 << 20))


@dataclass(frozen=True)
class MetricsConfig:
    host: str | None = "127.0.0.1"
    port: int = 9464

    @property
    def enabled(self) -> bool:
        return self.host is not None



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


def read_server(t: Table) -> ServerConfig:
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
        max_store_bytes=t.get("max_store_bytes", int, 2 << 30,
                              check=lambda v: None if v >= 1 << 20 else
                              "must be at least 1048576 (1 MiB)"),
        max_store_versions=t.get("max_store_versions", int, 4,
                                 check=lambda v: None if 2 <= v <= 100 else
                                 "must be 2..100 (the one serving and its fallback at least)"),
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


def read_metrics(t: Table) -> MetricsConfig:
    listen = t.get("listen", str, "127.0.0.1:9464")
    t.done()
    if listen is None:
        return MetricsConfig()
    try:
        return parse_listen(listen, t.key_path("listen"))
    except ConfigError as e:
        t.problems.append(f"{t.file}: {e.problems[0]}")
        return MetricsConfig()


