"""``[models.source]``: where a model's new versions come from, and whose signature they need.

Why a table of its own: a delivered model's versions arrive while the daemon runs
(docs/delivery.md), and what may arrive is decided here, once, at load: the source's URL
(``oci://``, ``http(s)://``, ``file://``), the key or certificate chain its signatures
must verify against, how often to look, how large a version may be. ``allow_unsigned``
is accepted for a ``file://`` source only (a folder the operator filled by hand) and is
logged loudly at every load.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edged.config.schema import Table, positive


@dataclass(frozen=True)
class SourceConfig:
    url: str
    #: an EC public key (PEM) every version must be signed with
    public_key: Path | None = None
    #: or the root (and any intermediate) certificates, PEM, a signing certificate carried
    #: in the signature must chain to
    certificate_chain: tuple[Path, ...] = ()
    #: look for a new version this often (0: only on ``edged ctl pull``)
    poll_s: float = 300.0
    #: a version larger than this is refused before it is fetched
    max_bytes: int = 1 << 30
    #: a ``file://`` source's versions need no signature (loud at load)
    allow_unsigned: bool = False
    #: plain HTTP to an OCI registry (a loopback test registry)
    insecure: bool = False

    @property
    def is_file(self) -> bool:
        return not self.url.startswith(("oci://", "http://", "https://"))


_SCHEMES = ("oci://", "http://", "https://", "file://", "/")


def read_source(t: Table) -> SourceConfig | None:
    """The table, or None when it is absent; every problem names its key."""
    if not t.data:
        return None
    url = t.get("url", str, check=lambda u: None if u.startswith(_SCHEMES) else
                "must be oci://HOST/REPO:TAG, http(s)://HOST/PATH or file:///PATH")
    public_key = t.get_path("public_key", None, must_exist=True)
    chain = t.get_list("certificate_chain", str, []) or []
    certs = []
    for i, c in enumerate(chain):
        p = Path(c).expanduser()
        p = p if p.is_absolute() else (t.base_dir / p).resolve()
        if not p.is_file():
            t.problem(f"certificate_chain[{i}]", f"file not found: {p}")
        certs.append(p)
    allow_unsigned = t.get("allow_unsigned", bool, False)
    cfg = SourceConfig(
        url=url or "", public_key=public_key, certificate_chain=tuple(certs),
        poll_s=t.get("poll_s", float, 300.0,
                     check=lambda v: None if v == 0 or v >= 1 else
                     "must be 0 (only edged ctl pull) or at least 1 second"),
        max_bytes=t.get("max_bytes", int, 1 << 30, check=positive),
        allow_unsigned=allow_unsigned,
        insecure=t.get("insecure", bool, False),
    )
    if public_key is not None and public_key.is_file():
        _check_pem(t, "public_key", public_key, certificates=False)
    for i, c in enumerate(certs):
        if c.is_file():
            _check_pem(t, f"certificate_chain[{i}]", c, certificates=True)
    if public_key is not None and certs:
        t.problem("certificate_chain", "give public_key or certificate_chain, not both")
    if allow_unsigned and url and not cfg.is_file:
        t.problem("allow_unsigned", f"is allowed for a file:// source only; {url} must "
                  "carry signed versions (public_key or certificate_chain)")
    elif not allow_unsigned and public_key is None and not certs and url:
        t.problem("public_key", "missing: versions from a source must be signed; give the "
                  "publisher's public_key (or certificate_chain), or for a file:// source "
                  "allow_unsigned = true")
    t.done()
    return cfg if url else None


def _check_pem(t: Table, key: str, path: Path, certificates: bool) -> None:
    """An EC public key, or PEM certificates, as model-signing will read them at the first
    pull: a wrong file is a config error now, not a refusal of every version later.
    Skipped without ``cryptography`` (the delivery extra: the daemon says so at a pull)."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.serialization import load_pem_public_key
    except ImportError:
        return
    try:
        data = path.read_bytes()
        if certificates:
            x509.load_pem_x509_certificates(data)
            return
        k = load_pem_public_key(data)
    except (OSError, ValueError) as e:
        what = "PEM certificates" if certificates else "a PEM public key"
        t.problem(key, f"{path}: not {what}: {e}")
        return
    if not isinstance(k, ec.EllipticCurvePublicKey):
        t.problem(key, f"{path}: a {type(k).__name__}; model-signing verifies EC keys "
                  "(e.g. openssl ecparam -name prime256v1)")
