"""At start-up, begin opening each model's first variant while the daemon imports.

Why: after reading its config, ``edged serve`` spends ~0.2 s importing
its server modules, OpenCV and the metrics client, and creating and warming the person
detector's ONNX Runtime session takes ~0.1 s. ORT releases the GIL while it builds and
runs a session, so on two cores both go on at once. ``preopen`` starts each model's
first ONNX Runtime variant on a thread; the daemon's own load of that variant (the same
config object, so the same artifact, options and batch size) takes the result through
``load_variant``; what no load took (the governor started on a lighter rung, a model
failed) is closed by ``discard_preopened``.

Only ONNX Runtime variants, and ``onnxruntime`` is imported on the calling thread before
the thread starts: the thread itself never imports (two threads importing numpy-based
extensions at once can leave one half-initialised).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable
from concurrent.futures import Future
from typing import TYPE_CHECKING

from edged.backends.base import Backend
from edged.host import memory
from edged.model.artifact import open_artifact

if TYPE_CHECKING:
    from edged.config.models import ModelConfig, VariantConfig

_lock = threading.Lock()
_opened: list[tuple[VariantConfig, int, Future[tuple[Backend, float]]]] = []


def load_variant(v: VariantConfig, max_batch_size: int) -> tuple[Backend, float]:
    """Open and warm up one artifact (blocking; call from a thread): ``(backend,
    seconds)``. Takes what ``preopen`` opened for this very variant, if anything."""
    with _lock:
        found = next((e for e in _opened if e[0] is v and e[1] == max_batch_size), None)
        if found is not None:
            _opened.remove(found)
    if found is not None:
        return found[2].result()
    return open_artifact(v.backend, v.path, v.options, max_batch_size)


def preopen(models: Iterable[ModelConfig]) -> int:
    """Start opening each model's first ONNX Runtime variant on one background thread;
    returns how many. Nothing to overlap on one core."""
    todo = [(m.variants[0], m.max_batch_size) for m in models
            if m.variants and m.variants[0].backend == "onnxruntime"]
    if not todo or (os.cpu_count() or 1) < 2:
        return 0
    import onnxruntime  # noqa: F401  - here, not on the thread (see the module's doc)

    memory.limit_arenas()  # before the first thread, as the daemon does
    futures = []
    with _lock:
        for v, mb in todo:
            f: Future[tuple[Backend, float]] = Future()
            _opened.append((v, mb, f))
            futures.append((v, mb, f))

    def run() -> None:
        for v, mb, f in futures:
            try:
                f.set_result(open_artifact(v.backend, v.path, v.options, mb))
            except BaseException as e:  # raised by the load that takes it
                f.set_exception(e)

    threading.Thread(target=run, name="edged-preopen", daemon=True).start()
    return len(futures)


def discard_preopened() -> None:
    """Close whatever ``preopen`` opened that no load took."""
    with _lock:
        left = list(_opened)
        _opened.clear()
    for _v, _mb, f in left:
        with contextlib.suppress(BaseException):
            f.result()[0].close()
