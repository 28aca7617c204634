"""Where a model's versions come from, one kind per file, chosen by the URL's scheme.

Why behind one small interface: the device's pipeline (signature first, then each file
hashed against it, resumable, bounded) is the same whatever carries the bytes; a source
only says which version a name or tag points at (``resolve``) and streams a file of it
from an offset (``stream``), and ``edged publish`` puts a bundle there (``publish``).

- ``folder`` (``file:///srv/models`` or a path): ``index.json`` + ``MODEL/VERSION/FILES``;
- ``http`` (``https://host/models``): the same layout served by any web server (publish
  to a folder it serves); a download resumes with a ``Range`` request;
- ``oci`` (``oci://host/repo:tag``): an OCI registry through the ORAS SDK, each file one
  layer; a tag is resolved to its manifest's digest once and the version pulled by digest.
"""

from __future__ import annotations

from edged.delivery.sources.base import Source, SourceError


def open_source(url: str, insecure: bool = False) -> Source:
    """The source for ``url`` by its scheme (``SourceError`` for an unknown one)."""
    if url.startswith("oci://"):
        from edged.delivery.sources.oci import OciSource

        return OciSource(url, insecure=insecure)
    if url.startswith(("http://", "https://")):
        from edged.delivery.sources.http import HttpSource

        return HttpSource(url)
    if url.startswith("file://") or url.startswith("/") or url.startswith("."):
        from edged.delivery.sources.folder import FolderSource

        return FolderSource(url)
    raise SourceError(f"{url!r}: a source is oci://HOST/REPO:TAG, http(s)://HOST/PATH, "
                      f"file:///PATH or a path, absolute or from ./ (./{url} for a folder "
                      "here)")
