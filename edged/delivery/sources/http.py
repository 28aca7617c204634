"""An HTTP(S) source: a folder source's layout (``index.json``, ``MODEL/VERSION/FILES``)
served by any web server.

Why read-only: publishing is writing a folder (``edged publish --to /srv/models``) that the
web server serves; a device only reads. A download resumes where it stopped with a
``Range`` request (a server that ignores it answers 200 and the file starts again).
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from edged.delivery.sources.base import INDEX, MAX_INDEX_BYTES, Ref, SourceError, pick

CHUNK = 1 << 16
TIMEOUT_S = 30.0


class HttpSource:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def _get(self, url: str, offset: int = 0) -> tuple[int, object]:
        req = urllib.request.Request(url, headers={"Range": f"bytes={offset}-"} if offset
                                     else {})
        try:
            r = urllib.request.urlopen(req, timeout=TIMEOUT_S)
        except urllib.error.HTTPError as e:
            raise SourceError(f"{url}: HTTP {e.code} {e.reason}") from None
        except (urllib.error.URLError, OSError) as e:
            raise SourceError(f"{url}: {getattr(e, 'reason', e)}") from None
        return (offset if r.status == 206 else 0), r

    def resolve(self, model: str, version: str | None) -> Ref:
        where = f"{self.url}/{INDEX}"
        _, r = self._get(where)
        with r:  # type: ignore[attr-defined]
            raw = r.read(MAX_INDEX_BYTES + 1)  # type: ignore[attr-defined]
        if len(raw) > MAX_INDEX_BYTES:
            raise SourceError(f"{where}: over {MAX_INDEX_BYTES} bytes")
        try:
            index = json.loads(raw)
        except ValueError as e:
            raise SourceError(f"{where}: not JSON: {e}") from None
        label, digest = pick(index, where, model, version)
        base = f"{self.url}/{model}/{label}"
        return Ref(model, label, base, {"base": base}, digest)

    def stream(self, ref: Ref, name: str, offset: int = 0) -> tuple[int, Iterator[bytes]]:
        start, r = self._get(f"{ref.locator['base']}/{name}", offset)

        def chunks() -> Iterator[bytes]:
            with r:  # type: ignore[attr-defined]
                while True:
                    try:
                        b = r.read(CHUNK)  # type: ignore[attr-defined]
                    except (OSError, http.client.HTTPException) as e:  # dropped: kept
                        raise SourceError(f"{ref.where}/{name}: {e}") from None
                    if not b:
                        return
                    yield b

        return start, chunks()

    def publish(self, bundle: Path, model: str, version: str, manifest_digest: str,
                tags: tuple[str, ...] = ()) -> str:
        raise SourceError(f"{self.url}: an HTTP source is read-only; publish to the folder "
                          "its web server serves (edged publish DIR --to /srv/models)")
