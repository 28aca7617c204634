"""The one small interface every runtime implements.

A backend is a loaded, ready-to-run artifact. The batcher hands it a dict of
batched numpy arrays and gets a dict back; everything runtime-specific (sessions,
VMs, CUDA streams, padding to compiled batch sizes) stays inside the backend file.
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

from edged.schema import Table


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
    #: None when any batch size up to the model's max works; otherwise the compiled
    #: batch sizes, ascending. The batcher pads a batch up to the next one.
    batch_sizes: tuple[int, ...] | None = None
    info: BackendInfo

    @abc.abstractmethod
    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Compute all outputs for one batch. Arrays in ``feeds`` are C-contiguous."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Free runtime resources (sessions, device memory). Idempotent."""

    def warmup(self, batch_size: int = 1) -> None:
        """Run once on zeros so the first real request does not pay for lazy init."""
        self.run(zero_feeds(self.inputs, batch_size))


def zero_feeds(specs: list[TensorSpec], batch_size: int) -> dict[str, np.ndarray]:
    feeds = {}
    for s in specs:
        shape = tuple(batch_size if i == 0 and d == -1 else (1 if d == -1 else d)
                      for i, d in enumerate(s.shape))
        feeds[s.name] = np.zeros(shape, dtype=s.dtype)
    return feeds


class BackendOptions:
    """Base for per-backend option objects parsed from ``[models.variants.options]``."""

    @classmethod
    def from_table(cls, t: Table) -> BackendOptions:  # pragma: no cover - overridden
        t.done()
        return cls()


def require_file(path: Path, what: str) -> None:
    """Fail with a message naming the file, before any runtime gives a cryptic one."""
    from edged.errors import ArtifactError

    if not path.exists():
        raise ArtifactError(f"{what} not found: {path}")
    if not path.is_file():
        raise ArtifactError(f"{what} is not a file: {path}")
    if path.stat().st_size == 0:
        raise ArtifactError(f"{what} is empty (0 bytes): {path}")
