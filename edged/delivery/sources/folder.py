"""A folder source (``file:///srv/models``): what a web server can serve as it is, and
what a USB stick carries to a device with no network.

Layout: ``index.json`` (``{"format": "edged-index/1", "models": {MODEL: {"latest": V,
"versions": {V: {"manifest": SHA256, "bytes": N}}}}}``) and ``MODEL/V/`` with the bundle's
files. ``publish`` writes a version's folder under a temporary name, renames it into
place, then replaces the index atomically, so a reader never sees half a version.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

from edged.delivery.atomic import atomic_write
from edged.delivery.bundle import check_label
from edged.delivery.sources.base import INDEX, INDEX_FORMAT, MAX_INDEX_BYTES, Ref, SourceError, pick

CHUNK = 1 << 20


class FolderSource:
    def __init__(self, url: str) -> None:
        self.url = url
        self.root = Path(url[len("file://"):] if url.startswith("file://") else url)

    def _index(self) -> dict:
        p = self.root / INDEX
        try:
            if p.stat().st_size > MAX_INDEX_BYTES:
                raise SourceError(f"{p}: over {MAX_INDEX_BYTES} bytes")
            return json.loads(p.read_bytes())
        except FileNotFoundError:
            return {"format": INDEX_FORMAT, "models": {}}
        except (OSError, ValueError) as e:
            raise SourceError(f"{p}: unreadable: {e}") from None

    def resolve(self, model: str, version: str | None) -> Ref:
        label, digest = pick(self._index(), str(self.root / INDEX), model, version)
        folder = self.root / model / label
        return Ref(model, label, f"{self.url.rstrip('/')}/{model}/{label}",
                   {"folder": str(folder)}, digest)

    def stream(self, ref: Ref, name: str, offset: int = 0) -> tuple[int, Iterator[bytes]]:
        path = Path(ref.locator["folder"]) / name
        try:
            f = path.open("rb")
        except OSError as e:
            raise SourceError(f"{ref.where}/{name}: {e.strerror or e}") from None
        f.seek(offset)

        def chunks() -> Iterator[bytes]:
            with f:
                yield from iter(lambda: f.read(CHUNK), b"")

        return offset, chunks()

    def publish(self, bundle: Path, model: str, version: str, manifest_digest: str,
                tags: tuple[str, ...] = ()) -> str:
        why = check_label(version)
        if why:
            raise SourceError(why)
        final = self.root / model / version
        if final.exists():
            raise SourceError(f"{final} exists: a published version is never changed; "
                              "publish it under a new version")
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(f".{version}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(bundle, tmp)
        tmp.rename(final)
        index = self._index()
        m = index.setdefault("models", {}).setdefault(model, {"versions": {}})
        m.setdefault("versions", {})[version] = {
            "manifest": manifest_digest,
            "bytes": sum(p.stat().st_size for p in final.iterdir())}
        m["latest"] = version
        self.root.mkdir(parents=True, exist_ok=True)
        atomic_write(self.root / INDEX, json.dumps(index, indent=1, sort_keys=True).encode())
        return str(final)
