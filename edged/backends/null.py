"""A backend that computes nothing: it echoes its input, so the batcher, the model and
the server can be tested without a runtime (as tinygrad's ``ops_null``).

Config: ``backend = "null"``; ``path`` is not read. NullOptions: ``shape`` of the one input
``input`` (first dim -1 = batch), ``dtype``, ``batch_sizes`` (declare fixed sizes, as a
TVM per-batch library or a TensorRT profile would) and ``delay_ms`` (time per run).
The output ``output`` is the input, so a test can check each reply row is its own.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from edged.backends.base import Backend, BackendInfo, TensorSpec
from edged.config.runtimes import NullOptions


class NullBackend(Backend):
    kind = "null"

    def __init__(self, options: NullOptions) -> None:
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


def open_backend(path: Path, options: NullOptions, max_batch_size: int) -> NullBackend:
    return NullBackend(options)
