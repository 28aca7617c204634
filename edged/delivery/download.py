"""Fetching one version from a source into the store: signature first, every file hashed
against it, bounded, resumable.

Why in this order (docs/delivery.md, "What each stage checks"):

1. ``manifest.sig`` alone (at most 1 MiB) is fetched and verified against the configured
   key or certificate chain: the files it signs and their SHA-256 are now known from a
   trusted signer, before anything else is fetched;
2. ``manifest.json`` (at most 1 MiB) is fetched and must hash to what the signature says
   before it is parsed; it must name exactly the signed files, with the same digests;
3. the version's total size is held against the source's ``max_bytes`` and the store's
   quota (``StoreFull``) before a byte of a file is fetched;
4. each file is streamed into ``STATE_DIR/store/incoming/<manifest digest>/`` (a download
   stopped by a restart or a dropped connection resumes there), never past its size, and
   must hash to its digest; a file that does not is deleted and the version refused;
5. the complete folder becomes the version in one rename (``VersionStore.commit``).

A refusal raises ``Refused`` with the stage and the reason; nothing of the version is
served, and what serves goes on serving.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edged.backends.support.sidecar import sha256_file
from edged.delivery.atomic import atomic_write
from edged.delivery.bundle import MANIFEST, BundleRefused, Manifest, read_manifest
from edged.delivery.sources.base import Ref, Source, SourceError
from edged.delivery.store import Version, VersionStore
from edged.delivery.store_bounds import StoreFull
from edged.delivery.trust import MAX_SIGNATURE_BYTES, SIGNATURE, Signed, Trust, TrustRefused

log = logging.getLogger("edged.delivery")


#: refusals after which a partial download is kept for the next pull to resume
RESUMABLE = ("truncated", "source")


class Refused(Exception):
    """A version refused at ``stage`` (``reason`` is a short label for metrics)."""

    def __init__(self, stage: str, reason: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage
        self.reason = reason


@dataclass(frozen=True)
class Fetched:
    version: Version
    manifest: Manifest
    ref: Ref
    #: False: it was in the store already
    downloaded: bool


def _read_all(source: Source, ref: Ref, name: str, cap: int) -> bytes:
    _, chunks = source.stream(ref, name)
    out = bytearray()
    for b in chunks:
        out += b
        if len(out) > cap:
            raise Refused("downloading", "too_large",
                          f"{ref.where}/{name}: more than {cap} bytes")
    return bytes(out)


def fetch(source: Source, trust: Trust, store: VersionStore, model: str,
          version: str | None = None, max_bytes: int = 1 << 30,
          say: Callable[[str, str], None] = lambda stage, msg: None) -> Fetched:
    """Fetch ``version`` (None: the source's current one) of ``model`` into ``store``.

    ``say(stage, message)`` is told each stage (downloading, verifying) as it starts."""
    try:
        ref = source.resolve(model, version)
    except SourceError as e:
        raise Refused("downloading", "source", str(e)) from None
    say("downloading", f"{ref.where}: the signature")
    try:
        signed = _signed(source, trust, ref)
        raw = _read_all(source, ref, MANIFEST, 1 << 20)
    except SourceError as e:
        raise Refused("downloading", "source", str(e)) from None
    say("verifying", f"{ref.where}: manifest")
    digest = hashlib.sha256(raw).hexdigest()
    if signed is not None and signed.files.get(MANIFEST) != digest:
        raise Refused("verifying", "digest",
                      f"{ref.where}/{MANIFEST} does not match its signature (sha256 "
                      f"{digest[:12]}, signed {str(signed.files.get(MANIFEST))[:12]}): "
                      "changed after signing")
    if ref.manifest_digest is not None and ref.manifest_digest != digest:
        raise Refused("verifying", "digest",
                      f"{ref.where}/{MANIFEST} hashes to {digest[:12]}, the source's index "
                      f"says {ref.manifest_digest[:12]}")
    try:
        manifest = read_manifest(raw)
    except BundleRefused as e:
        raise Refused("verifying", "manifest", f"{ref.where}: {e}") from None
    if manifest.model != model:
        raise Refused("verifying", "manifest", f"{ref.where}: the bundle is of model "
                      f"{manifest.model!r}, not {model!r}")
    if signed is not None:
        _same_files(ref, signed.files, manifest)
    why = store.never_again(model, manifest.digest)
    if why:
        raise Refused("verifying", "rolled_back",
                      f"{model} {manifest.version} ({manifest.digest[:12]}) was rolled back "
                      f"here before ({why}); it is never taken again from this source")
    have = store.get(model, manifest.digest)
    if have is not None:
        return Fetched(have, manifest, ref, False)
    total = manifest.total_bytes
    if total > max_bytes:
        raise Refused("downloading", "too_large",
                      f"{ref.where}: the bundle is {total} bytes; this source takes at most "
                      f"{max_bytes} ([models.source] max_bytes)")
    try:
        store.admit(model, manifest.digest, total)
    except StoreFull as e:
        raise Refused("downloading", f"store_{e.reason}", str(e)) from None
    store.drop_incoming(keep=manifest.digest)  # older partial downloads are given up
    work = store.incoming(manifest.digest)
    try:
        for name, f in sorted(manifest.files.items()):
            say("downloading", f"{ref.where}/{name} ({f['bytes']} bytes)")
            _download(source, ref, name, int(f["bytes"]), str(f["sha256"]), work / name)
    except Refused as e:
        if e.reason not in RESUMABLE:  # kept only for a pull that can finish it
            shutil.rmtree(work, ignore_errors=True)
        raise
    atomic_write(work / MANIFEST, raw)
    if signed is not None:
        sig = _read_all(source, ref, SIGNATURE, MAX_SIGNATURE_BYTES)
        atomic_write(work / SIGNATURE, sig)
    v = store.commit(model, manifest.version, manifest.digest, work,
                     {"source": source.url, "where": ref.where,
                      "signed": signed.signer if signed is not None else trust.describe(),
                      "manifest": manifest.to_json()})
    log.info("delivery: %s %s (%s, %d bytes) stored from %s, signed by %s", model,
             manifest.version, manifest.digest[:12], total, ref.where,
             signed.signer if signed is not None else "no one (allow_unsigned)")
    return Fetched(v, manifest, ref, True)


def _signed(source: Source, trust: Trust, ref: Ref) -> Signed | None:
    if trust.allow_unsigned and trust.public_key is None and not trust.certificate_chain:
        return None
    try:
        sig = _read_all(source, ref, SIGNATURE, MAX_SIGNATURE_BYTES)
    except SourceError as e:
        raise Refused("verifying", "unsigned",
                      f"{ref.where}: no signature ({SIGNATURE}): {e}; edged takes only "
                      f"versions {trust.describe()}") from None
    try:
        return trust.signed_files(sig)
    except TrustRefused as e:
        raise Refused("verifying", e.reason, f"{ref.where}: {e}") from None


def _same_files(ref: Ref, signed: dict[str, str], manifest: Manifest) -> None:
    named = {n: str(f["sha256"]) for n, f in manifest.files.items()}
    unsigned = sorted(set(named) - set(signed))
    if unsigned:
        raise Refused("verifying", "signature",
                      f"{ref.where}: {MANIFEST} names files the signature does not sign: "
                      f"{', '.join(unsigned)[:300]}")
    extra = sorted(set(signed) - set(named) - {MANIFEST})
    if extra:
        raise Refused("verifying", "manifest",
                      f"{ref.where}: the signature signs files {MANIFEST} does not name: "
                      f"{', '.join(extra)[:300]}")
    for n, d in named.items():
        if signed[n] != d:
            raise Refused("verifying", "digest", f"{ref.where}: {MANIFEST} and the "
                          f"signature disagree on {n}'s sha256")


def _download(source: Source, ref: Ref, name: str, size: int, sha: str, dest: Path) -> None:
    """``name`` into ``dest``, resuming what an earlier try left there; refused when it is
    not exactly ``size`` bytes hashing to ``sha``."""
    have = dest.stat().st_size if dest.exists() else 0
    if have > size:
        dest.unlink()
        have = 0
    if have < size or not dest.exists():
        try:
            start, chunks = source.stream(ref, name, have)
        except SourceError as e:
            what = "missing" if "404" in str(e) or "No such file" in str(e) else "source"
            raise Refused("downloading", what, f"{e} (the manifest names it)") from None
        try:
            with dest.open("r+b" if start and dest.exists() else "wb") as f:
                f.seek(start)
                f.truncate()
                got = start
                for b in chunks:
                    if got + len(b) > size:
                        f.write(b[:size - got])
                        got = size + 1
                        break
                    f.write(b)
                    got += len(b)
                f.flush()
        except SourceError as e:
            raise Refused("downloading", "truncated",
                          f"{e}: the download stopped at {dest.stat().st_size} of {size} "
                          "bytes; the next pull resumes it") from None
        except OSError as e:
            dest.unlink(missing_ok=True)
            reason = "disk_full" if e.errno == errno.ENOSPC else "io"
            raise Refused("downloading", reason, f"writing {dest}: {e.strerror or e} "
                          f"(the disk holding the store is full)" if reason == "disk_full"
                          else f"writing {dest}: {e}") from None
        if got > size:  # not a limit: the file is not the one the manifest names
            dest.unlink(missing_ok=True)
            raise Refused("verifying", "digest",
                          f"{ref.where}/{name}: longer than the {size} bytes its signed "
                          "manifest says: the bundle is damaged or changed after signing; "
                          "publish it again")
        if got < size:
            raise Refused("downloading", "truncated",
                          f"{ref.where}/{name}: {got} of {size} bytes arrived (truncated); "
                          "the next pull resumes it")
    got_sha = sha256_file(dest)
    if got_sha != sha:
        dest.unlink(missing_ok=True)
        raise Refused("verifying", "digest",
                      f"{ref.where}/{name}: sha256 {got_sha[:12]} is not the signed "
                      f"{sha[:12]}: the file changed after signing")
