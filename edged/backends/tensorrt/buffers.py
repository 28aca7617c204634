"""A TensorRT plan's I/O buffers: device memory and pinned host staging, and the copies.

Why allocated once: device buffers for the largest batch of optimization profile 0 and
pinned host buffers for the copies mean ``run`` allocates nothing on the GPU and the
H2D/D2H copies are truly asynchronous on the backend's one stream. Written against
cuda-python's ``cuda.bindings.runtime``, as in NVIDIA's ``samples/python/common_runtime.py``.
"""

from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edged.backends.base import TensorSpec
from edged.backends.tensorrt.cuda import check_cuda
from edged.errors import ArtifactError, EdgedError, InvalidArgument

log = logging.getLogger("edged.backends.tensorrt")


@dataclass
class Binding:
    """One I/O tensor: its device buffer (max-batch sized) and pinned host staging."""

    name: str
    is_input: bool
    dtype: np.dtype
    max_shape: tuple[int, ...]
    nbytes: int
    device_ptr: int = 0
    host_ptr: int = 0
    host: np.ndarray | None = None  # uint8 view of the pinned buffer


def volume(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


class IOBuffers:
    def __init__(self, path: Path, cudart: Any, context: Any) -> None:
        self.path = path
        self._cudart = cudart
        self._ctx = context
        self.stream: Any = None
        self._bindings: list[Binding] = []
        self._by_name: dict[str, Binding] = {}

    @property
    def device_bytes(self) -> int:
        return sum(b.nbytes for b in self._bindings)

    def allocate(self, inputs: list[TensorSpec], outputs: list[TensorSpec],
                 profile: dict[str, tuple[tuple[int, ...], ...]]) -> None:
        """Device + pinned host buffers for every I/O tensor at the profile's max shapes."""
        cudart, ctx = self._cudart, self._ctx
        self.stream = check_cuda(cudart.cudaStreamCreate(), "cudaStreamCreate")
        # Resolve output shapes at the max input shapes to size the output buffers.
        max_shapes: dict[str, tuple[int, ...]] = {}
        for spec in inputs:
            shp = profile[spec.name][2] if spec.name in profile else spec.shape
            max_shapes[spec.name] = shp
            if not ctx.set_input_shape(spec.name, shp):
                raise ArtifactError(f"{self.path}: cannot set input {spec.name!r} to {shp}")
        for spec in outputs:
            shp = tuple(int(d) for d in ctx.get_tensor_shape(spec.name))
            if any(d < 0 for d in shp):
                raise ArtifactError(
                    f"{self.path}: output {spec.name!r} has a data-dependent shape {shp}; "
                    "edged's TensorRT backend needs output shapes determined by input shapes"
                )
            max_shapes[spec.name] = shp
        for spec in [*inputs, *outputs]:
            shp = max_shapes[spec.name]
            nbytes = max(1, volume(shp) * spec.dtype.itemsize)
            b = Binding(spec.name, spec in inputs, spec.dtype, shp, nbytes)
            self._bindings.append(b)  # appended first so free() releases partial allocations
            b.device_ptr = int(check_cuda(cudart.cudaMalloc(nbytes), f"cudaMalloc({nbytes})"))
            b.host_ptr = int(check_cuda(cudart.cudaMallocHost(nbytes), f"cudaMallocHost({nbytes})"))
            buf = (ctypes.c_uint8 * nbytes).from_address(b.host_ptr)
            b.host = np.frombuffer(buf, dtype=np.uint8)
            if not ctx.set_tensor_address(spec.name, b.device_ptr):
                raise ArtifactError(f"{self.path}: set_tensor_address({spec.name!r}) failed")
        self._by_name = {b.name: b for b in self._bindings}

    def stage_inputs(self, inputs: list[TensorSpec], feeds: dict[str, np.ndarray], start: int,
                     stop: int, run_rows: int,
                     profile: dict[str, tuple[tuple[int, ...], ...]]) -> None:
        """Rows ``start:stop`` of each input into its pinned buffer (zero-padded to
        ``run_rows``), its shape set on the context, and the H2D copy enqueued."""
        cudart, ctx = self._cudart, self._ctx
        rows = stop - start
        h2d = cudart.cudaMemcpyKind.cudaMemcpyHostToDevice
        for s in inputs:
            b = self._by_name[s.name]
            src = feeds[s.name][start:stop]
            shape = (run_rows, *src.shape[1:])
            nbytes = volume(shape) * s.dtype.itemsize
            if nbytes > b.nbytes or any(
                got > lim for got, lim in zip(shape[1:], b.max_shape[1:], strict=True)
            ):
                raise InvalidArgument(
                    f"input {s.name!r}: shape {list(shape)} exceeds the plan's maximum "
                    f"{list(b.max_shape)}"
                )
            assert b.host is not None
            staged = b.host[:nbytes].view(s.dtype).reshape(shape)
            staged[:rows] = src
            if run_rows > rows:
                staged[rows:] = 0
            if not ctx.set_input_shape(s.name, shape):
                raise InvalidArgument(
                    f"input {s.name!r}: shape {list(shape)} is outside the plan's optimization "
                    f"profile {profile.get(s.name)}"
                )
            check_cuda(
                cudart.cudaMemcpyAsync(b.device_ptr, b.host_ptr, nbytes, h2d, self.stream),
                "cudaMemcpyAsync H2D",
            )

    def fetch_outputs(self, outputs: list[TensorSpec], rows: int,
                      run_rows: int) -> dict[str, np.ndarray]:
        """Enqueue the D2H copies, wait for the stream, copy the first ``rows`` out."""
        cudart, ctx = self._cudart, self._ctx
        d2h = cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost
        shapes: dict[str, tuple[int, ...]] = {}
        for s in outputs:
            b = self._by_name[s.name]
            shp = tuple(int(d) for d in ctx.get_tensor_shape(s.name))
            nbytes = volume(shp) * s.dtype.itemsize
            if nbytes > b.nbytes:
                raise EdgedError(f"{self.path}: output {s.name!r} {shp} exceeds its buffer")
            shapes[s.name] = shp
            check_cuda(
                cudart.cudaMemcpyAsync(b.host_ptr, b.device_ptr, nbytes, d2h, self.stream),
                "cudaMemcpyAsync D2H",
            )
        check_cuda(cudart.cudaStreamSynchronize(self.stream), "cudaStreamSynchronize")
        out: dict[str, np.ndarray] = {}
        for s in outputs:
            b = self._by_name[s.name]
            shp = shapes[s.name]
            assert b.host is not None
            arr = b.host[: volume(shp) * s.dtype.itemsize].view(s.dtype).reshape(shp)
            # Copy out of the pinned buffer: the next run overwrites it.
            out[s.name] = arr[:rows].copy() if shp and shp[0] == run_rows else arr.copy()
        return out

    def free(self) -> None:
        """Release every buffer and the stream (after the context is gone)."""
        cudart = self._cudart
        if cudart is not None:
            for b in self._bindings:
                b.host = None
                if b.device_ptr:
                    _free(cudart.cudaFree, b.device_ptr, "cudaFree")
                    b.device_ptr = 0
                if b.host_ptr:
                    _free(cudart.cudaFreeHost, b.host_ptr, "cudaFreeHost")
                    b.host_ptr = 0
            if self.stream is not None:
                _free(cudart.cudaStreamDestroy, self.stream, "cudaStreamDestroy")
        self.stream = None
        self._bindings = []


def _free(fn: Any, handle: Any, what: str) -> None:
    try:
        check_cuda(fn(handle), what)
    except Exception as e:  # log, keep freeing the rest
        log.warning("%s during close: %s", what, e)
