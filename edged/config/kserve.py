"""``[server.kserve]`` and ``[offload]``: read and checked at load, every problem naming its key.

Why loopback by default: the KServe endpoint has no authentication of its own (neither has
Triton's); ``allow_remote = true`` is the operator saying a proxy or firewall in front
does that job (docs/kserve.md shows TLS termination in front).
"""

from __future__ import annotations

import importlib.util
import ipaddress
from dataclasses import dataclass

from edged.config.schema import Table, positive

EXTRA_HINT = "pip install 'edged[kserve]'"


@dataclass(frozen=True)
class KServeConfig:
    """``[server.kserve]``: where the KServe v2 gRPC and HTTP/REST endpoints listen."""

    grpc: str | None = None  # "HOST:PORT"
    http: str | None = None
    allow_remote: bool = False
    #: which gRPC server runs the endpoint: grpc's handler threads, or ``grpc.aio`` on the
    #: daemon's loop (``GRPC_SERVERS``; docs/kserve.md says when each is the better)
    grpc_server: str = "threads"

    @property
    def enabled(self) -> bool:
        return bool(self.grpc or self.http)


#: ``grpc_server`` -> the module and class that implement it
GRPC_SERVERS = {
    "threads": ("edged.protocols.kserve.grpc_server", "KServeGrpcServer"),
    "loop": ("edged.protocols.kserve.grpc_loop_server", "KServeGrpcLoopServer"),
}


def split_hostport(value: str) -> tuple[str, int] | None:
    """``HOST:PORT`` (``[::1]:8001`` for IPv6) -> (host, port), or None when malformed."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        return None
    return host.strip("[]"), int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def missing_extra() -> str | None:
    """Which of the extra's modules cannot be imported (None: all there)."""
    gone = [m for m in ("grpc", "aiohttp", "tritonclient.grpc")
            if _find(m) is None]
    return ", ".join(gone) or None


def _find(module: str) -> object | None:
    try:
        return importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None


def parse_kserve(t: Table) -> KServeConfig:
    allow_remote = t.get("allow_remote", bool, False)
    grpc_server = t.get("grpc_server", str, "threads", choices=tuple(GRPC_SERVERS))
    addrs: dict[str, str | None] = {}
    for key in ("grpc", "http"):
        value = t.get(key, str, None)
        addrs[key] = None
        if value is None:
            continue
        hp = split_hostport(value)
        if hp is None:
            t.problem(key, f"expected HOST:PORT (e.g. 127.0.0.1:8001); got {value!r}")
        elif not allow_remote and not is_loopback(hp[0]):
            t.problem(key, f"{value} is reachable from other hosts and the KServe endpoint has "
                      "no authentication; use 127.0.0.1 (or put a TLS proxy in front and set "
                      "allow_remote = true)")
        else:
            addrs[key] = value
    t.done()
    cfg = KServeConfig(grpc=addrs["grpc"], http=addrs["http"], allow_remote=allow_remote,
                       grpc_server=grpc_server)
    if t.data and cfg.grpc and cfg.grpc == cfg.http:
        t.problem("http", f"{cfg.http} is also the grpc address")
    if cfg.enabled:
        missing = missing_extra()
        if missing:
            t.problem(None, f"the KServe endpoint needs the kserve extra ({missing} missing): "
                      f"{EXTRA_HINT}")
    return cfg


@dataclass(frozen=True)
class OffloadModel:
    """``[[offload.models]]``: one local model a remote server can compute."""

    model: str  # the local model's name
    remote_model: str  # its name on the remote server
    #: the local variant the remote model counts as (its outputs are post-processed and
    #: checked as that variant's would be); None: the model's first (reference) variant
    variant: str | None = None


@dataclass(frozen=True)
class OffloadConfig:
    """``[offload]``: a remote KServe v2 server (Triton, KServe, another edged) to hand
    requests to when this device is hot or its queue would miss a request's deadline."""

    url: str = ""  # grpc://HOST:PORT or http(s)://HOST:PORT
    models: tuple[OffloadModel, ...] = ()
    timeout_ms: float = 1000.0
    #: send a request there when its predicted queue wait would miss its deadline
    on_deadline: bool = True
    health_interval_s: float = 2.0
    #: remote calls outstanding at once; beyond this, requests are computed here
    max_inflight: int = 64
    tls: bool = False
    ca_file: str | None = None
    token: str | None = None  # sent as "authorization: Bearer <token>"
    token_header: str = "authorization"

    @property
    def enabled(self) -> bool:
        return bool(self.url and self.models)

    @property
    def scheme(self) -> str:
        return self.url.split("://", 1)[0]

    @property
    def address(self) -> str:
        return self.url.split("://", 1)[1].rstrip("/")

    def for_model(self, name: str) -> OffloadModel | None:
        if not self.models:  # asked for every request: nothing to search, nearly always
            return None
        return next((m for m in self.models if m.model == name), None)


def parse_offload(t: Table) -> OffloadConfig:
    if not t.data:
        t.done()
        return OffloadConfig()
    url = t.get("url", str, check=_check_url)
    tls = t.get("tls", bool, False)
    if url and url.startswith("https://"):
        tls = True
    models = []
    for mt in t.tables("models", required=True):
        name = mt.get("model", str)
        remote = mt.get("remote_model", str, name)
        variant = mt.get("variant", str, None)
        mt.done()
        if name:
            models.append(OffloadModel(model=name, remote_model=remote or name, variant=variant))
    cfg = OffloadConfig(
        url=url or "", models=tuple(models),
        timeout_ms=t.get("timeout_ms", float, 1000.0, check=positive),
        on_deadline=t.get("on_deadline", bool, True),
        health_interval_s=t.get("health_interval_s", float, 2.0, check=positive),
        max_inflight=t.get("max_inflight", int, 64, check=positive),
        tls=tls,
        ca_file=(str(p) if (p := t.get_path("ca_file", None, must_exist=True)) else None),
        token=t.get("token", str, None),
        token_header=t.get("token_header", str, "authorization",
                           check=lambda h: None if h and h == h.lower() and " " not in h
                           else "must be a lower-case header name"),
    )
    t.done()
    if cfg.enabled:
        missing = missing_extra()
        if missing:
            t.problem(None, f"offload needs the kserve extra ({missing} missing): {EXTRA_HINT}")
    return cfg


def _check_url(url: str) -> str | None:
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("grpc", "http", "https") or split_hostport(rest.rstrip("/")) \
            is None:
        return "expected grpc://HOST:PORT, http://HOST:PORT or https://HOST:PORT"
    return None


def check_offload_models(t: Table, cfg: OffloadConfig, variants: dict[str, list[str]]) -> None:
    """Each ``[[offload.models]]`` names a configured model and one of its variants."""
    seen: set[str] = set()
    for i, m in enumerate(cfg.models):
        key = f"models[{i}]"
        if m.model not in variants:
            t.problem(f"{key}.model", f"no model named {m.model!r}; models: "
                      f"{', '.join(variants) or 'none'}")
        elif m.variant is not None and m.variant not in variants[m.model]:
            t.problem(f"{key}.variant", f"model {m.model!r} has no variant {m.variant!r}; "
                      f"its variants: {', '.join(variants[m.model])}")
        if m.model in seen:
            t.problem(f"{key}.model", f"model {m.model!r} is mapped twice")
        seen.add(m.model)
