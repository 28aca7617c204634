"""A backend that computes nothing: it echoes its input, so the batcher, the model and
the server can be tested without a runtime (as tinygrad's ``ops_null``).

Config: ``backend = "null"``; ``path`` is not read. Options: ``shape`` of the one input
``input`` (first dim -1 = batch), ``dtype``, ``batch_sizes`` (declare fixed sizes, as a
TVM per-batch library or a TensorRT profile would) and ``delay_ms`` (time per run).
The output ``output`` is the input, so a test can check each reply row is its own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edged.backends.base import Backend, BackendInfo, BackendOptions, TensorSpec
from edged.protocol.tensors import DTYPES
from edged.schema import Table, non_negative


@dataclass(frozen=True)
class Options(BackendOptions):
    shape: tuple[int, ...] = (-1, 4)
    dtype: str = "float32"
    batch_sizes: tuple[int, ...] | None = None
    delay_ms: float = 0.0

    @classmethod
    def from_table(cls, t: Table) -> Options:
        shape = t.get_list("shape", int, [-1, 4]) or [-1, 4]
        if not shape or shape[0] != -1 or any(d < 1 for d in shape[1:]):
            t.problem("shape", f"expected [-1, d1, ...] with every d >= 1; got {shape}")
            shape = [-1, 4]
        dtype = t.get("dtype", str, "float32", choices=tuple(sorted(DTYPES)))
        sizes = t.get_list("batch_sizes", int, None)
        if sizes is not None and (not sizes or sorted(set(sizes)) != sizes or sizes[0] < 1):
            t.problem("batch_sizes", f"expected ascending sizes >= 1; got {sizes}")
            sizes = None
        delay = t.get("delay_ms", float, 0.0, check=non_negative)
        t.done()
        return cls(tuple(shape), dtype or "float32", tuple(sizes) if sizes else None,
                   delay or 0.0)


class NullBackend(Backend):
    kind = "null"

    def __init__(self, options: Options) -> None:
        self.options = options
        spec = TensorSpec("input", np.dtype(options.dtype), options.shape)
        self.inputs = [spec]
        self.outputs = [TensorSpec("output", spec.dtype, spec.shape)]
        self.batch_sizes = options.batch_sizes
        self.info = BackendInfo("null", "none")
        #: batch sizes run() was called with, oldest first (tests read this)
        self.calls: list[int] = []

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        x = feeds["input"]
        if self.batch_sizes is not None and x.shape[0] not in self.batch_sizes:
            raise ValueError(f"null backend: batch {x.shape[0]} is not one of "
                             f"{list(self.batch_sizes)}")
        self.calls.append(int(x.shape[0]))
        if self.options.delay_ms:
            time.sleep(self.options.delay_ms / 1000)
        return {"output": np.array(x, copy=True)}


def open_backend(path: Path, options: Options, max_batch_size: int) -> NullBackend:
    return NullBackend(options)
