"""Who may publish a model version: OpenSSF ``model-signing`` signatures, offline.

Why this library: a version is a folder of files (artifacts, sidecars, the ladder, golden
files, the contract, a validation set), and ``model-signing`` signs a folder at once: its
signature is a Sigstore bundle (a DSSE envelope over an in-toto statement listing every
file's SHA-256), so a file added, removed or changed fails it.

Two identities, both checked with no network, which is what a device in a fleet can count
on: an EC key pair (the device holds the public key, ``public_key``), or a certificate (the
publisher signs with a private key and its certificate, the bundle carries that certificate
and the chain above it, and the device holds the root(s) the chain must lead to,
``certificate_chain``: a fleet trusts its CA and publishers' certificates can change
without touching a device). Keyless Sigstore identities (an OIDC login, a Fulcio
certificate, a Rekor log entry) need the public trust root and the network to be checked,
so they are not offered here.

What a certificate check is, as the library does it: the chain is verified by OpenSSL
against the configured roots *as of the signing certificate's own start of validity* (an
offline signature carries no trusted timestamp), so an expired publisher certificate still
verifies and nothing is revoked by a list; a compromised publisher is cut off by replacing
the root on the devices. The signing certificate must allow signatures (KeyUsage
digitalSignature, or ExtendedKeyUsage codeSigning), and an intermediate CA must be a CA
(BasicConstraints).

Why the signature is checked *first*: the device fetches the signature alone (a small
JSON document), verifies it against the configured public key or certificate roots, and
takes from it the list of files and their digests; every file is then fetched and hashed
against that list before a byte of it is read as anything (even edged's own
``manifest.json``). So an unsigned or wrongly signed bundle is refused before the device
has downloaded, let alone parsed, a model.

The library's verifier returns the signed statement from ``_verifier.verify`` (what its own
``Config.verify`` calls before hashing a folder); that call is its one private use here,
and the version is pinned in pyproject.toml for it.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: the signature file of a bundle, beside the files it signs (never itself signed)
SIGNATURE = "manifest.sig"
MAX_SIGNATURE_BYTES = 1 << 20


class TrustRefused(Exception):
    """A bundle whose signature is missing, malformed or not by a trusted signer;
    ``reason`` is ``signature`` or, for a certificate that is not trusted here,
    ``certificate``."""

    def __init__(self, message: str, reason: str = "signature") -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Signed:
    """What a verified signature says: the files it signs and who signed them."""

    #: ``{name: sha256}``
    files: dict[str, str]
    #: the signing certificate's subject and issuer, or "the key <file>"
    signer: str


@dataclass(frozen=True)
class Trust:
    """Whose signatures a source's versions must carry (``[models.source]``)."""

    public_key: Path | None = None
    #: the root (and any intermediate) certificates a signing certificate must chain to
    certificate_chain: tuple[Path, ...] = ()
    #: no signature at all (a ``file://`` source only, and said loudly at load)
    allow_unsigned: bool = False

    def describe(self) -> str:
        if self.public_key is not None:
            return f"signed by the key {self.public_key}"
        if self.certificate_chain:
            return ("signed by a certificate that chains to "
                    + ", ".join(map(str, self.certificate_chain)))
        return "UNSIGNED (allow_unsigned = true)"

    def signed_files(self, signature: bytes) -> Signed:
        """Verify ``signature`` (the bytes of ``manifest.sig``) and return the files it
        signs and its signer. ``TrustRefused`` says why not."""
        if len(signature) > MAX_SIGNATURE_BYTES:
            raise TrustRefused(f"{SIGNATURE} is {len(signature)} bytes; a signature is at "
                               f"most {MAX_SIGNATURE_BYTES}")
        try:
            json.loads(signature)
        except ValueError:
            raise TrustRefused(f"{SIGNATURE} is not a signature (not JSON)") from None
        from model_signing import verifying
        from model_signing._signing import sign_sigstore_pb

        with tempfile.NamedTemporaryFile(suffix=".sig") as f:
            f.write(signature)
            f.flush()
            try:
                sig = sign_sigstore_pb.Signature.read(Path(f.name))
            except Exception as e:  # the library's parser raises KeyError, ValueError, ...
                raise TrustRefused(f"{SIGNATURE} is not a model-signing signature: "
                                   f"{type(e).__name__}: {e}"[:500]) from None
        leaf = _signing_certificate(sig)
        cfg = verifying.Config()
        if self.public_key is not None:
            if leaf is not None:
                raise TrustRefused(
                    f"signed with a certificate ({_who(leaf)}), not a bare key; this source "
                    f"takes versions {self.describe()} (public_key): give the device the "
                    "publisher's root as certificate_chain instead", "certificate")
            cfg.use_elliptic_key_verifier(public_key=self.public_key)
            signer = f"the key {self.public_key}"
        elif self.certificate_chain:
            if leaf is None:
                raise TrustRefused(f"signed with a bare key, not a certificate; this source "
                                   f"takes versions {self.describe()}", "certificate")
            cfg.use_certificate_verifier(certificate_chain=self.certificate_chain)
            signer = _who(leaf)
        else:
            raise TrustRefused("no public_key or certificate_chain to verify against")
        try:
            statement = cfg._verifier.verify(sig)  # type: ignore[union-attr]
        except Exception as e:  # the library raises ValueError, OpenSSL's errors and others
            raise _refusal(e, leaf, self) from None
        files: dict[str, str] = {}
        for rd in statement.resource_descriptors():
            if rd.digest.algorithm != "sha256":
                raise TrustRefused(f"{rd.identifier}: signed with {rd.digest.algorithm}; "
                                   "edged checks sha256 (model_signing's default)")
            files[str(rd.identifier)] = rd.digest.digest_hex
        if not files:
            raise TrustRefused("the signature signs no files")
        return Signed(files, signer)


def _signing_certificate(sig: Any) -> Any:
    """The certificate a signature was made with (``cryptography``'s), or None for a key."""
    from cryptography import x509

    chain = sig.bundle.verification_material.x509_certificate_chain
    if chain is None or not chain.certificates:
        return None
    try:
        return x509.load_der_x509_certificate(chain.certificates[0].raw_bytes)
    except ValueError as e:
        raise TrustRefused(f"the signing certificate in {SIGNATURE} is not a certificate: "
                           f"{e}", "certificate") from None


def _who(cert: Any) -> str:
    return f"{cert.subject.rfc4514_string()}, issued by {cert.issuer.rfc4514_string()}"


def _refusal(e: Exception, leaf: Any, trust: Trust) -> TrustRefused:
    """The library's error as the reason an operator can act on."""
    text = f"{type(e).__name__}: {e}"
    if leaf is not None and type(e).__name__ == "X509StoreContextError":
        roots = ", ".join(map(str, trust.certificate_chain))
        return TrustRefused(f"the signing certificate ({_who(leaf)}) does not chain to a "
                            f"root in certificate_chain ({roots}): {e}"[:500], "certificate")
    if leaf is not None and "cannot be used for signing" in str(e):
        return TrustRefused(f"the signing certificate ({_who(leaf)}) allows neither "
                            "digital signatures (KeyUsage) nor code signing "
                            "(ExtendedKeyUsage)", "certificate")
    return TrustRefused(f"the signature does not verify {trust.describe()}: {text}"[:500])


def sign(folder: Path, private_key: Path, out: Path | None = None,
         certificate: Path | None = None, chain: tuple[Path, ...] = ()) -> Path:
    """Sign every file of ``folder`` with an EC private key (PEM), and with
    ``certificate`` its certificate (PEM) and ``chain`` the certificates above it (at
    least its issuer; the library needs one); the signature is written to ``out``
    (default ``folder/manifest.sig``, which is never itself signed). ``ValueError`` says
    what does not fit (a certificate of another key, no chain)."""
    from model_signing import hashing, signing

    out = out or folder / SIGNATURE
    hashing_cfg = hashing.Config().set_ignored_paths(paths=[SIGNATURE])
    cfg = signing.Config().set_hashing_config(hashing_cfg)
    if certificate is not None:
        if not chain:
            raise ValueError(f"{certificate}: give the certificates above it (its issuer, "
                             "up to the root the devices trust) with --cert-chain")
        cfg.use_certificate_signer(private_key=private_key, signing_certificate=certificate,
                                   certificate_chain=list(chain))
    else:
        cfg.use_elliptic_key_signer(private_key=private_key)
    cfg.sign(folder, out)
    return out
