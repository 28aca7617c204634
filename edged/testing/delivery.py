"""Real parts of model delivery for tests and benchmarks: an EC key pair made here, and an
OCI registry (Debian's ``docker-registry``, the CNCF distribution registry) on loopback.

Why in the package: the delivery tests and ``scripts/bench/bench_delivery.py`` both need
them, and one copy means one way a registry is started and found ready.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from edged.testing.harness import free_port

REGISTRY = shutil.which("docker-registry")


class NoRegistry(RuntimeError):
    """``docker-registry`` is not installed (a test skips with this reason)."""


def keypair(folder: Path, name: str = "publisher") -> tuple[Path, Path]:
    """An EC P-256 key pair (PEM): the private key and the public key."""
    from cryptography.hazmat.primitives import serialization as s
    from cryptography.hazmat.primitives.asymmetric import ec

    k = ec.generate_private_key(ec.SECP256R1())
    key, pub = folder / f"{name}.pem", folder / f"{name}.pub"
    key.write_bytes(k.private_bytes(s.Encoding.PEM, s.PrivateFormat.PKCS8, s.NoEncryption()))
    pub.write_bytes(k.public_key().public_bytes(s.Encoding.PEM,
                                                s.PublicFormat.SubjectPublicKeyInfo))
    return key, pub


@contextlib.contextmanager
def registry(root: Path) -> Iterator[str]:
    """``docker-registry serve`` on a free loopback port; its ``HOST:PORT``."""
    if REGISTRY is None:
        raise NoRegistry("docker-registry is not installed (Debian package "
                         "docker-registry; .ci/run installs it)")
    port = free_port()
    cfg = root / "registry.yml"
    cfg.write_text(f"version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
                   f"    rootdirectory: {root / 'registry'}\nhttp:\n  addr: 127.0.0.1:{port}\n")
    log = (root / "registry.log").open("wb")
    proc = subprocess.Popen([REGISTRY, "serve", str(cfg)], stdout=log, stderr=log)
    try:
        end = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None:
                raise RuntimeError("docker-registry exited: "
                                   + (root / "registry.log").read_text()[-2000:])
            if time.monotonic() >= end:
                raise RuntimeError("the registry did not answer /v2/ in 20 s")
            time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
