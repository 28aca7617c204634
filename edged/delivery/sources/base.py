"""What every source is and gives: the interface, a version found (``Ref``), the error, and
the ``index.json`` a folder or HTTP source keeps (one place for both)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

#: the index of a folder or HTTP source
INDEX = "index.json"
INDEX_FORMAT = "edged-index/1"
MAX_INDEX_BYTES = 4 << 20


class SourceError(Exception):
    """A source that cannot be read (or written); the message names the URL."""


@dataclass(frozen=True)
class Ref:
    """One version at a source, as ``resolve`` found it."""

    model: str
    version: str
    #: where it was found, for the status and the log (the pinned URL)
    where: str
    #: the source's own locator (a folder, an OCI manifest's layers)
    locator: dict[str, Any] = field(default_factory=dict)
    #: the manifest's SHA-256 the source's index names (None: learnt from the manifest)
    manifest_digest: str | None = None


class Source(Protocol):
    url: str

    def resolve(self, model: str, version: str | None) -> Ref:
        """The version ``version`` (None: the one the source points at now)."""
        ...

    def stream(self, ref: Ref, name: str, offset: int = 0) -> tuple[int, Iterator[bytes]]:
        """File ``name`` of ``ref`` from ``offset``: (the offset it really starts at, 0 when
        the source cannot resume; the chunks)."""
        ...

    def publish(self, bundle: Path, model: str, version: str, manifest_digest: str,
                tags: tuple[str, ...] = ()) -> str:
        """Put a bundle's files there; where it went."""
        ...


def pick(index: Any, where: str, model: str, version: str | None) -> tuple[str, str | None]:
    """From a folder or HTTP source's ``index.json``: (version label, manifest digest)."""
    if not isinstance(index, dict) or index.get("format") != INDEX_FORMAT:
        raise SourceError(f"{where}: not an edged index (\"format\": {INDEX_FORMAT!r})")
    m = (index.get("models") or {}).get(model)
    if not isinstance(m, dict):
        raise SourceError(f"{where}: has no model {model!r}")
    label = version or m.get("latest")
    entry = (m.get("versions") or {}).get(label) if isinstance(label, str) else None
    if not isinstance(entry, dict):
        raise SourceError(f"{where}: model {model!r} has no version {label!r}")
    digest = entry.get("manifest")
    return str(label), digest if isinstance(digest, str) else None
