"""An OCI registry source (``oci://host/repo:tag``) through the ORAS Python SDK.

Why OCI: a fleet usually has a registry already (the CNCF distribution registry, Harbor,
a cloud's), it stores arbitrary files as artifacts (ORAS), and a pull by digest pins every
byte a device runs while tags move (KServe's "Modelcars" ship models as OCI images for the
same reason). Each bundle file is one layer, named by its ``org.opencontainers.image.title``
annotation (a base name: ORAS drops folders). A tag is resolved once to its manifest's
digest and every layer is then fetched from ``repo@sha256:...``; a layer's digest is the
file's SHA-256, which the signature names too. A download resumes with a ``Range``
request, which the distribution registry honours.

``insecure = true`` (``[models.source]``) speaks plain HTTP to the registry: what a
loopback test registry serves; the signature still decides what runs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from edged.delivery.sources.base import Ref, SourceError

CHUNK = 1 << 16
TITLE = "org.opencontainers.image.title"
MAX_MANIFEST_BYTES = 1 << 20


class OciSource:
    def __init__(self, url: str, insecure: bool = False) -> None:
        self.url = url
        rest = url[len("oci://"):]
        host, sep, path = rest.partition("/")
        if not sep or not host or not path:
            raise SourceError(f"{url!r}: an OCI source is oci://HOST[:PORT]/REPO[:TAG]")
        repo, _, tag = path.rpartition(":") if ":" in path.rsplit("/", 1)[-1] else (
            path, "", "latest")
        self.host, self.repo, self.tag = host, repo, tag
        self.insecure = insecure
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            try:
                import oras.client
            except ImportError:
                raise SourceError("an oci:// source needs the ORAS SDK: pip install "
                                  "'edged[delivery]'") from None
            self._client = oras.client.OrasClient(hostname=self.host, insecure=self.insecure)
        return self._client

    def _manifest(self, reference: str) -> tuple[dict[str, Any], str]:
        import oras.defaults

        c = self.client
        container = c.get_container(f"{self.host}/{self.repo}{reference}")
        url = f"{c.prefix}://{container.manifest_url()}"
        try:
            r = c.do_request(url, "GET", headers={
                "Accept": ", ".join(oras.defaults.default_manifest_accepted_media_types)})
        except Exception as e:
            raise SourceError(f"{self.url}: {type(e).__name__}: {e}"[:300]) from None
        if r.status_code != 200:
            raise SourceError(f"oci://{self.host}/{self.repo}{reference}: HTTP "
                              f"{r.status_code} {r.text[:200]}")
        if len(r.content) > MAX_MANIFEST_BYTES:
            raise SourceError(f"{self.url}: an OCI manifest of {len(r.content)} bytes")
        digest = "sha256:" + hashlib.sha256(r.content).hexdigest()
        try:
            return r.json(), digest
        except ValueError as e:
            raise SourceError(f"{self.url}: the manifest is not JSON: {e}") from None

    def resolve(self, model: str, version: str | None) -> Ref:
        tag = version or self.tag
        if tag.startswith("sha256:"):
            manifest, digest = self._manifest(f"@{tag}")
        else:
            manifest, digest = self._manifest(f":{tag}")
        layers: dict[str, dict[str, Any]] = {}
        for layer in manifest.get("layers") or []:
            title = (layer.get("annotations") or {}).get(TITLE)
            if isinstance(title, str) and isinstance(layer.get("digest"), str):
                layers[title] = {"digest": layer["digest"], "size": layer.get("size")}
        where = f"oci://{self.host}/{self.repo}@{digest}"
        return Ref(model, tag, where, {"digest": digest, "layers": layers})

    def stream(self, ref: Ref, name: str, offset: int = 0) -> tuple[int, Iterator[bytes]]:
        layer = ref.locator["layers"].get(name)
        if layer is None:
            raise SourceError(f"{ref.where}: has no file {name!r}")
        c = self.client
        container = c.get_container(f"{self.host}/{self.repo}@{ref.locator['digest']}")
        url = f"{c.prefix}://{container.get_blob_url(layer['digest'])}"
        try:
            r = c.do_request(url, "GET", headers={"Range": f"bytes={offset}-"} if offset
                             else {}, stream=True)
        except Exception as e:
            raise SourceError(f"{ref.where}/{name}: {type(e).__name__}: {e}"[:300]) from None
        if r.status_code not in (200, 206):
            raise SourceError(f"{ref.where}/{name}: HTTP {r.status_code}")
        start = offset if r.status_code == 206 else 0

        def chunks() -> Iterator[bytes]:
            try:
                for b in r.iter_content(chunk_size=CHUNK):
                    if b:
                        yield b
            except Exception as e:  # the connection dropped: what came is kept
                raise SourceError(f"{ref.where}/{name}: {type(e).__name__}: {e}"[:300]) \
                    from None
            finally:
                r.close()

        return start, chunks()

    def publish(self, bundle: Path, model: str, version: str, manifest_digest: str,
                tags: tuple[str, ...] = ()) -> str:
        files = sorted(str(p) for p in bundle.iterdir() if p.is_file())
        pushed = []
        for tag in dict.fromkeys((version, *tags)):
            target = f"{self.host}/{self.repo}:{tag}"
            try:
                r = self.client.push(target=target, files=files,
                                     disable_path_validation=True)
            except Exception as e:
                raise SourceError(f"oci://{target}: push failed: {type(e).__name__}: "
                                  f"{e}"[:300]) from None
            if getattr(r, "status_code", 201) not in (200, 201):
                raise SourceError(f"oci://{target}: push answered HTTP {r.status_code}")
            pushed.append(f"oci://{target}")
        _, digest = self._manifest(f":{version}")
        return f"{', '.join(pushed)} ({digest})"
