"""glibc malloc settings that keep a long-running daemon's memory near what it uses.

Why: glibc gives every thread that allocates its own malloc arena (up to 8 per core),
and models load, warm up and are verified on worker threads, so a daemon with two models
held ~23 MB more in half-empty arenas than the same sessions opened on one thread
(docs/benchmarks.md, "Footprint"). Two arenas keep the event loop and the workers from
contending; ``trim`` hands back what loading left free. Elsewhere (musl, macOS) both
are no-ops. ``MALLOC_ARENA_MAX`` in the environment wins over the default here.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_ARENA_MAX = -8  # glibc's mallopt parameter number
DEFAULT_ARENAS = 2


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.gnu_get_libc_version  # noqa: B018  (glibc only)
    except (OSError, AttributeError):
        return None
    return libc


def limit_arenas(arenas: int = DEFAULT_ARENAS) -> bool:
    """Cap malloc arenas; call before the daemon starts its threads."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    libc = _libc()
    return bool(libc is not None and libc.mallopt(M_ARENA_MAX, arenas))


def trim() -> None:
    """Return free heap pages to the system (after loading, warm-up and checks)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
