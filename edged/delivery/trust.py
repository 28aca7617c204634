"""Who may publish a model version: OpenSSF ``model-signing`` signatures, offline.

Why this library: a version is a folder of files (artifacts, sidecars, the ladder, golden
files, the contract, a validation set), and ``model-signing`` signs a folder at once: its
signature is a Sigstore bundle (a DSSE envelope over an in-toto statement listing every
file's SHA-256), so a file added, removed or changed fails it. With a key pair (or a
certificate chain) it signs and verifies with no network, which is what a device in a
fleet can count on; keyless Sigstore identities need the public trust root and, to be
checked, the network, so they are not offered here.

Why the signature is checked *first*: the device fetches the signature alone (a small
JSON document), verifies it against the configured public key or certificate chain, and
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

#: the signature file of a bundle, beside the files it signs (never itself signed)
SIGNATURE = "manifest.sig"
MAX_SIGNATURE_BYTES = 1 << 20


class TrustRefused(Exception):
    """A bundle whose signature is missing, malformed or not by a trusted signer."""


@dataclass(frozen=True)
class Trust:
    """Whose signatures a source's versions must carry (``[models.source]``)."""

    public_key: Path | None = None
    certificate_chain: tuple[Path, ...] = ()
    #: no signature at all (a ``file://`` source only, and said loudly at load)
    allow_unsigned: bool = False

    def describe(self) -> str:
        if self.public_key is not None:
            return f"signed by the key {self.public_key}"
        if self.certificate_chain:
            return "signed by a certificate of " + ", ".join(map(str, self.certificate_chain))
        return "UNSIGNED (allow_unsigned = true)"

    def signed_files(self, signature: bytes) -> dict[str, str]:
        """Verify ``signature`` (the bytes of ``manifest.sig``) and return the files it
        signs: ``{name: sha256}``. ``TrustRefused`` says why not."""
        if len(signature) > MAX_SIGNATURE_BYTES:
            raise TrustRefused(f"{SIGNATURE} is {len(signature)} bytes; a signature is at "
                               f"most {MAX_SIGNATURE_BYTES}")
        try:
            json.loads(signature)
        except ValueError:
            raise TrustRefused(f"{SIGNATURE} is not a signature (not JSON)") from None
        from model_signing import verifying
        from model_signing._signing import sign_sigstore_pb

        cfg = verifying.Config()
        if self.public_key is not None:
            cfg.use_elliptic_key_verifier(public_key=self.public_key)
        elif self.certificate_chain:
            cfg.use_certificate_verifier(certificate_chain=self.certificate_chain)
        else:
            raise TrustRefused("no public_key or certificate_chain to verify against")
        with tempfile.NamedTemporaryFile(suffix=".sig") as f:
            f.write(signature)
            f.flush()
            try:
                statement = cfg._verifier.verify(  # type: ignore[union-attr]
                    sign_sigstore_pb.Signature.read(Path(f.name)))
            except Exception as e:  # the library raises ValueError and others
                raise TrustRefused(f"the signature does not verify {self.describe()}: "
                                   f"{type(e).__name__}: {e}"[:500]) from None
        files: dict[str, str] = {}
        for rd in statement.resource_descriptors():
            if rd.digest.algorithm != "sha256":
                raise TrustRefused(f"{rd.identifier}: signed with {rd.digest.algorithm}; "
                                   "edged checks sha256 (model_signing's default)")
            files[str(rd.identifier)] = rd.digest.digest_hex
        if not files:
            raise TrustRefused("the signature signs no files")
        return files


def sign(folder: Path, private_key: Path, out: Path | None = None) -> Path:
    """Sign every file of ``folder`` with an EC private key (PEM); the signature is written
    to ``out`` (default ``folder/manifest.sig``, which is never itself signed)."""
    from model_signing import hashing, signing

    out = out or folder / SIGNATURE
    hashing_cfg = hashing.Config().set_ignored_paths(paths=[SIGNATURE])
    (signing.Config().set_hashing_config(hashing_cfg)
     .use_elliptic_key_signer(private_key=private_key).sign(folder, out))
    return out
