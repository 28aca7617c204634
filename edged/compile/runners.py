"""Open an artifact through the daemon's own backend modules.

Why: validation and speed figures are only worth recording if they were measured
through the same loader, padding and thread settings the daemon will use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edged.backends import backend_module
from edged.backends.base import Backend


def open_variant(backend: str, path: Path, threads: int | None, max_batch: int) -> Backend:
    """Load ``path`` with ``backend``'s module and options for ``threads`` CPU threads."""
    mod = backend_module(backend)
    kwargs: dict[str, Any] = {}
    if threads and backend in ("onnxruntime", "tvm", "openvino"):
        kwargs["threads"] = threads
    if backend == "openvino":
        kwargs["cache"] = False  # measured once here; the daemon keeps its own cache
    return mod.open_backend(Path(path), mod.Options(**kwargs), max_batch)
