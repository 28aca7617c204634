"""Open and warm one artifact through its runtime: the one way edged opens a model file.

Why one place: the daemon, ``edged check --verify``, ``edged compile`` and the rung build
of a sent model all time and check what they open, and those figures are only worth
recording if they come from the same loader, warm-up and padding the daemon serves with.
"""

from __future__ import annotations

import time
from pathlib import Path

from edged.backends import backend_module
from edged.backends.base import Backend
from edged.config.runtimes import BackendOptions
from edged.errors import ArtifactError


def open_artifact(backend: str, path: Path, options: BackendOptions,
                  max_batch_size: int) -> tuple[Backend, float]:
    """Open ``path`` with runtime ``backend`` and warm it up (blocking; call from a
    thread): ``(backend, seconds)``."""
    t0 = time.perf_counter()
    b = backend_module(backend).open_backend(Path(path), options, max_batch_size)
    try:
        b.warmup(1)
        sizes = b.batch_sizes
        if max_batch_size > 1 and sizes:
            # Compiled batch sizes (TVM libraries, TensorRT profiles) are slow on their
            # first run; a runtime with dynamic batch grows its buffers on first use
            # instead of holding the largest batch's memory from the start.
            b.warmup(min(max_batch_size, sizes[-1]))
    except Exception as e:
        b.close()
        raise ArtifactError(f"{path}: warm-up run failed: {type(e).__name__}: {e}") from None
    return b, time.perf_counter() - t0


def artifact_files(path: Path) -> list[Path]:
    """The files whose bytes make an artifact: the file itself; an OpenVINO IR's ``.xml``
    and its ``.bin``; a TVM per-batch set (``path`` itself absent) its sidecar and the
    ``.bN.so`` members it lists."""
    path = Path(path)
    if path.exists():
        files = [path]
        if path.suffix == ".xml" and path.with_suffix(".bin").exists():
            files.append(path.with_suffix(".bin"))
        return files
    sidecar = path.with_name(path.name + ".json")
    if not sidecar.exists():
        return []
    import json

    try:
        members = json.loads(sidecar.read_text()).get("files") or {}
    except (OSError, ValueError, AttributeError):
        members = {}
    return [sidecar, *(path.parent / Path(str(m.get("path", ""))).name
                       for m in members.values() if isinstance(m, dict))]


def artifact_digest(path: Path) -> str | None:
    """The sha256 of an artifact's bytes (``sha256sum``'s for a one-file artifact; of the
    members' digests in order for several), or None when it cannot be read.

    Why: a file replaced under the same path (a new export copied over the old one) is
    a new model to serve; ``edged ctl reload`` and SIGHUP compare this digest with the
    live one's, and ``edged status`` and ``edged_live_artifact_info`` show it."""
    import hashlib

    from edged.backends.support.sidecar import sha256_file

    files = artifact_files(path)
    digests = []
    for f in files:
        try:
            digests.append(sha256_file(f))
        except OSError:
            return None
    if not digests:
        return None
    if len(digests) == 1:
        return digests[0]
    return hashlib.sha256("".join(digests).encode()).hexdigest()
