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
