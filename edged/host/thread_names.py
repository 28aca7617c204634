"""Give the daemon's own Python threads their names in the operating system too.

Why: ``top -H``, ``perf``, ``py-spy`` and ``edged bench --threads`` see threads through
the kernel, where a Python thread is just another ``python`` (the name every thread
inherits from the process). Python 3.11 has no API for the OS name, so each named pool
calls :func:`name_os_thread` as its initializer: the thread copies its Python name
(e.g. ``edged-digits_0``, ``edged-pre_1``) into its kernel ``comm`` (Linux keeps 15
bytes). Elsewhere this does nothing.

Only threads that never open an ONNX Runtime session are named this way: a thread
started by a named thread inherits its name, so naming the threads that open sessions
(start-up's background open, asyncio's default executor) would give ORT's intra-op
threads a worker's name.
"""

from __future__ import annotations

import ctypes
import sys
import threading

#: Linux's TASK_COMM_LEN (16) less the terminating NUL
COMM_BYTES = 15
_PR_SET_NAME = 15


def os_name(name: str) -> bytes:
    """``name`` as the kernel will keep it: UTF-8, at most 15 bytes, no split character."""
    return name.encode()[:COMM_BYTES].decode(errors="ignore").encode()


def name_os_thread() -> None:
    """Set the calling thread's kernel name to its Python name (Linux only; a failure
    leaves the inherited name, it never stops the thread)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_NAME, ctypes.c_char_p(os_name(threading.current_thread().name)),
                   0, 0, 0)
    except (OSError, AttributeError):
        pass
