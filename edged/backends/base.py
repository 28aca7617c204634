"""The one small interface every runtime implements.

A backend is a loaded, ready-to-run artifact. The model hands it a dict of batched
numpy arrays and gets a dict back; everything runtime-specific (sessions, VMs, CUDA
streams) stays inside the backend file. Fitting a batch to the sizes a backend was
compiled for is *not* the backend's job: a backend declares ``batch_sizes`` and
``run_batch`` below, the one owner of padding and splitting, does the rest.
Backends are called from one worker thread at a time per model variant, so they
need not be thread-safe, but ``run`` must release the GIL while computing where the
runtime allows it (ORT, TVM and TensorRT all do).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np


@dataclass(frozen=True)
class TensorSpec:
    """Name, dtype and shape of one model input or output; -1 marks a dynamic dim."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype.name, "shape": list(self.shape)}

    def matches_item(self, dtype: np.dtype, shape: tuple[int, ...]) -> bool:
        """Does a tensor of this dtype/shape fit, apart from the batch dimension?"""
        if dtype != self.dtype or len(shape) != len(self.shape):
            return False
        return all(want in (-1, got) for want, got in zip(self.shape[1:], shape[1:], strict=True))


@dataclass
class BackendInfo:
    """What an operator wants to know about a loaded artifact (logged, shown in `models`)."""

    backend: str
    device: str  # what actually computes: "CPUExecutionProvider", "llvm -mcpu=znver3", "cuda:0"
    details: dict[str, Any] = field(default_factory=dict)


class Backend(abc.ABC):
    """A loaded artifact. Construct through the module's ``open_backend``."""

    kind: ClassVar[str] = ""

    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    #: None when any batch size up to the model's max works; otherwise the batch sizes
    #: ``run`` accepts, ascending (TVM per-batch libraries, a TensorRT profile's range).
    #: ``run`` is then only ever called with one of them: see ``run_batch``.
    batch_sizes: tuple[int, ...] | None = None
    #: ``run`` splits a batch into this many parts computed in parallel (1: the runtime
    #: uses every core on the whole batch); the batcher then prefers batches of a
    #: multiple of it (``edged.batching.cap.BatchCap.take``)
    batch_multiple: int = 1
    info: BackendInfo

    @abc.abstractmethod
    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Compute all outputs for one batch. Arrays in ``feeds`` are C-contiguous."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Free runtime resources (sessions, device memory). Idempotent."""

    def warmup(self, batch_size: int = 1) -> None:
        """Run once on zeros so the first real request does not pay for lazy init."""
        run_batch(self, zero_feeds(self.inputs, batch_size))


def run_batch(backend: Backend, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run ``feeds`` (any number of rows) on a backend that may accept only fixed sizes.

    The one place padding happens: rows are split into chunks no larger than the
    biggest accepted size, each chunk is zero-padded up to the smallest accepted size
    that holds it, and the padding rows are cut from the outputs. Backends with
    ``batch_sizes = None`` get the batch as it is.
    """
    sizes = backend.batch_sizes
    if not sizes:
        return backend.run(feeds)
    n = next(iter(feeds.values())).shape[0] if feeds else 0
    if n in sizes:
        return backend.run(feeds)
    chunks: list[dict[str, np.ndarray]] = []
    start = 0
    while start < n:
        take = min(n - start, sizes[-1])
        size = next(s for s in sizes if s >= take)
        part = {k: _pad_rows(a[start:start + take], size) for k, a in feeds.items()}
        outs = backend.run(part)
        chunks.append({k: o[:take] for k, o in outs.items()})
        start += take
    if len(chunks) == 1:
        return chunks[0]
    return {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}


def _pad_rows(a: np.ndarray, size: int) -> np.ndarray:
    if a.shape[0] == size:
        return a
    out = np.zeros((size, *a.shape[1:]), dtype=a.dtype)
    out[: a.shape[0]] = a
    return out


def zero_feeds(specs: list[TensorSpec], batch_size: int) -> dict[str, np.ndarray]:
    feeds = {}
    for s in specs:
        shape = tuple(batch_size if i == 0 and d == -1 else (1 if d == -1 else d)
                      for i, d in enumerate(s.shape))
        feeds[s.name] = np.zeros(shape, dtype=s.dtype)
    return feeds


def require_file(path: Path, what: str) -> None:
    """Fail with a message naming the file, before any runtime gives a cryptic one."""
    from edged.errors import ArtifactError

    if not path.exists():
        raise ArtifactError(f"{what} not found: {path}")
    if not path.is_file():
        raise ArtifactError(f"{what} is not a file: {path}")
    if path.stat().st_size == 0:
        raise ArtifactError(f"{what} is empty (0 bytes): {path}")
