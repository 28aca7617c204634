"""TensorRT backend: serve a serialized ``.engine`` plan on an NVIDIA GPU.

Why this file looks the way it does:

* A plan is tied to the TensorRT version and the GPU compute capability (SM) it
  was built with. TensorRT only says so with a log line and a ``None`` from
  ``deserialize_cuda_engine``, so we read the sidecar written at build time
  (``edged.compile.tensorrt_build``) and refuse a mismatched plan *before* deserializing,
  with a message naming the file and both versions.
* Without a GPU, ``trt.Runtime`` raises ``TypeError: pybind11::init(): factory
  function returned nullptr`` (NVIDIA/TensorRT#2913), which says nothing to an
  operator. We probe with cuda-python's ``cudaGetDeviceCount`` first (it returns an
  error code, it does not raise) and turn both into "no usable CUDA device ...".
* Device buffers are allocated once for the largest batch of optimization profile 0
  and pinned host buffers are used for the copies, so ``run`` allocates nothing on
  the GPU and the H2D/D2H copies are truly asynchronous.
* Everything is written against the TensorRT 10/11 name-based tensor API
  (``num_io_tensors``, ``set_input_shape``, ``set_tensor_address``,
  ``execute_async_v3``) and cuda-python's ``cuda.bindings.runtime``, as in NVIDIA's
  ``samples/python/common_runtime.py``. Neither runtime is imported at module top:
  a CPU-only device must be able to import this module (``edged check`` does).
"""

from __future__ import annotations

import contextlib
import logging
import platform
from pathlib import Path
from typing import Any

import numpy as np

from edged.backends.base import Backend, BackendInfo, TensorSpec, require_file
from edged.backends.support.sidecar import read_sidecar
from edged.backends.tensorrt.buffers import IOBuffers
from edged.backends.tensorrt.cuda import (
    CUDA_PYTHON_HINT,
    GpuUnavailableError,
    _no_device_from_trt,
    check_cuda,
    cuda_device_info,
    import_cudart,
    import_tensorrt,
    trt_logger,
    trt_messages,
)
from edged.backends.tensorrt.keys import l4t_release
from edged.backends.tensorrt.plan import check_plan_compat, read_plan
from edged.config.runtimes import TensorRTOptions
from edged.errors import ArtifactError, EdgedError, InvalidArgument

log = logging.getLogger(__name__)

# -- sidecar compatibility (pure: no TensorRT or CUDA needed) -------------------------


class TensorRTBackend(Backend):
    """A deserialized plan with one execution context, one stream and fixed buffers."""

    kind = "tensorrt"

    def __init__(self, path: Path, options: TensorRTOptions, max_batch_size: int) -> None:
        self.path = path
        self.options = options
        self._closed = False
        self._cudart: Any = None
        self._buffers: IOBuffers | None = None
        self._context: Any = None
        self._engine: Any = None
        self._runtime: Any = None
        try:
            self._load(max_batch_size)
        except BaseException:
            self.close()
            raise

    # -- loading ----------------------------------------------------------------------
    def _load(self, max_batch_size: int) -> None:

        path, opts = self.path, self.options
        require_file(path, "TensorRT plan")
        try:
            sidecar = read_sidecar(path)
        except ValueError as e:
            raise ArtifactError(str(e)) from e
        data = read_plan(path, sidecar)
        # What needs no GPU first: a plan copied from a Jetson to a PC (or from another
        # JetPack) is named as such even where TensorRT or CUDA is missing.
        here_arch, here_l4t = platform.machine(), l4t_release()
        check_plan_compat(path, sidecar, trt_version=None, compute_capability=None,
                          arch=here_arch, l4t=here_l4t)
        try:
            trt = import_tensorrt()
            cudart = import_cudart()
            dev = cuda_device_info(opts.device)
        except GpuUnavailableError as e:
            raise ArtifactError(f"cannot load TensorRT plan {path}: {e}") from e
        except ImportError as e:
            raise ArtifactError(f"cannot load TensorRT plan {path}: {e}; {CUDA_PYTHON_HINT}") from e
        self._cudart = cudart

        check_plan_compat(
            path,
            sidecar,
            trt_version=trt.__version__,
            compute_capability=dev["compute_capability"],
            gpu_name=dev["name"],
            arch=here_arch,
            l4t=here_l4t,
            allow_host_code=opts.version_compatible,
        )

        # The CUDA runtime's current device is per thread: set it here and in run().
        check_cuda(cudart.cudaSetDevice(opts.device), f"cudaSetDevice({opts.device})")
        with trt_messages() as msgs:
            try:
                self._runtime = trt.Runtime(trt_logger(trt))
            except TypeError as e:  # pybind11 factory returned nullptr: no CUDA
                raise ArtifactError(
                    f"cannot load TensorRT plan {path}: {_no_device_from_trt(e, msgs)}"
                ) from e
            if opts.version_compatible:
                self._runtime.engine_host_code_allowed = True
            self._engine = self._runtime.deserialize_cuda_engine(data)
            if self._engine is None:
                said = "; TensorRT said: " + " | ".join(msgs[-3:]) if msgs else ""
                raise ArtifactError(
                    f"cannot deserialize TensorRT plan {path} ({len(data)} bytes) with TensorRT "
                    f"{trt.__version__} on {dev['name']} (compute capability "
                    f"{dev['compute_capability']}): the file is truncated/corrupt, not a plan, "
                    "or was built by another TensorRT version or for another GPU"
                    + (
                        ""
                        if opts.version_compatible
                        else " (a version-compatible plan also needs version_compatible = true)"
                    )
                    + said
                )
            self._context = self._engine.create_execution_context()
            if self._context is None:
                said = "; TensorRT said: " + " | ".join(msgs[-3:]) if msgs else ""
                raise ArtifactError(
                    f"{path}: could not create a TensorRT execution context (out of GPU memory?)"
                    + said
                )
        del data
        self._describe_io(trt)
        self._allocate(max_batch_size)
        self.info = BackendInfo(
            backend="tensorrt",
            device=f"cuda:{opts.device}",
            details={
                "gpu": dev["name"],
                "compute_capability": dev["compute_capability"],
                "tensorrt": trt.__version__,
                "precision": (sidecar or {}).get("precision"),
                "plan_key": ((sidecar or {}).get("target") or {}).get("key"),
                "batch_profile": {"min": self._min_batch, "max": self._max_batch},
                "device_memory_bytes": self._buffers.device_bytes if self._buffers else 0,
                "version_compatible": opts.version_compatible,
            },
        )

    def _describe_io(self, trt: Any) -> None:
        """Read names, modes, dtypes, shapes and profile-0 batch range by tensor name."""
        eng = self._engine
        names = [eng.get_tensor_name(i) for i in range(eng.num_io_tensors)]
        inputs: list[TensorSpec] = []
        outputs: list[TensorSpec] = []
        self._profile: dict[str, tuple[tuple[int, ...], ...]] = {}
        dynamic_batch = False
        min_batch, max_batch = 1, None
        for name in names:
            is_input = eng.get_tensor_mode(name) == trt.TensorIOMode.INPUT
            trt_dtype = eng.get_tensor_dtype(name)
            try:
                dtype = np.dtype(trt.nptype(trt_dtype))
            except TypeError as e:  # BF16 / FP8 / INT4 I/O has no numpy dtype
                raise ArtifactError(
                    f"{self.path}: tensor {name!r} has TensorRT type {trt_dtype}, which numpy "
                    "cannot hold; rebuild with fp32/fp16 I/O (e.g. keep_io_types when converting)"
                ) from e
            shape = tuple(int(d) for d in eng.get_tensor_shape(name))
            spec = TensorSpec(name, dtype, shape)
            if not is_input:
                outputs.append(spec)
                continue
            inputs.append(spec)
            if any(d < 0 for d in shape):
                prof = tuple(
                    tuple(int(d) for d in s) for s in eng.get_tensor_profile_shape(name, 0)
                )
                self._profile[name] = prof
                if shape and shape[0] < 0:
                    dynamic_batch = True
                    min_batch = max(min_batch, prof[0][0])
                    max_batch = prof[2][0] if max_batch is None else min(max_batch, prof[2][0])
        if not inputs:
            raise ArtifactError(f"{self.path}: plan has no inputs")
        if not dynamic_batch:
            static = {s.shape[0] for s in inputs if s.shape}
            if len(static) != 1:
                raise ArtifactError(
                    f"{self.path}: inputs disagree on the batch dimension {sorted(static)}; "
                    "edged needs dim 0 to be the batch of every input"
                )
            min_batch = max_batch = static.pop()
        assert max_batch is not None
        self.inputs, self.outputs = inputs, outputs
        self._dynamic_batch = dynamic_batch
        self._min_batch, self._max_batch = int(min_batch), int(max_batch)
        # The sizes run() accepts: the profile's range, or the one static size.
        # backends.base.run_batch pads up to the minimum and splits above the maximum.
        self.batch_sizes = tuple(range(self._min_batch, self._max_batch + 1))

    def _allocate(self, max_batch_size: int) -> None:
        if max_batch_size > self._max_batch:
            log.warning(
                "%s: max_batch_size %d exceeds the plan's largest batch %d (optimization "
                "profile 0); larger batches run in chunks of %d. Rebuild with --max-batch %d "
                "to run them in one go.",
                self.path, max_batch_size, self._max_batch, self._max_batch, max_batch_size)
        self._buffers = IOBuffers(self.path, self._cudart, self._context)
        self._buffers.allocate(self.inputs, self.outputs, self._profile)

    # -- running ----------------------------------------------------------------------
    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._closed:
            raise EdgedError(f"{self.path}: TensorRT backend is closed")
        missing = [s.name for s in self.inputs if s.name not in feeds]
        if missing:
            raise InvalidArgument(f"missing input(s) {missing} for TensorRT plan {self.path.name}")
        n = int(feeds[self.inputs[0].name].shape[0])
        for s in self.inputs:
            a = feeds[s.name]
            if a.dtype != s.dtype:
                raise InvalidArgument(f"input {s.name!r}: expected {s.dtype}, got {a.dtype}")
            if a.ndim != len(s.shape) or a.shape[0] != n:
                raise InvalidArgument(
                    f"input {s.name!r}: shape {list(a.shape)} does not fit {list(s.shape)} "
                    f"with batch {n}"
                )
        if n not in self.batch_sizes:
            raise InvalidArgument(f"batch {n} is outside the plan's profile [{self._min_batch}, "
                                  f"{self._max_batch}] (call through run_batch)")
        check_cuda(self._cudart.cudaSetDevice(self.options.device), "cudaSetDevice")
        return self._run_chunk(feeds, 0, n)

    def _run_chunk(
        self, feeds: dict[str, np.ndarray], start: int, stop: int
    ) -> dict[str, np.ndarray]:
        """H2D copies, enqueue, D2H copies, one stream sync."""
        buffers = self._buffers
        assert buffers is not None
        rows = stop - start
        run_rows = max(rows, self._min_batch)
        buffers.stage_inputs(self.inputs, feeds, start, stop, run_rows, self._profile)
        if not self._context.execute_async_v3(int(buffers.stream)):
            raise EdgedError(f"{self.path}: TensorRT execute_async_v3 failed (see log)")
        return buffers.fetch_outputs(self.outputs, rows, run_rows)

    # -- teardown ---------------------------------------------------------------------
    def close(self) -> None:
        """Release context, engine and runtime, then buffers and the stream. Idempotent.

        The registry may close on another thread than the one that loaded or ran the
        plan, and CUDA's current device is per thread, so select ours first.
        """
        if getattr(self, "_closed", True):
            return
        self._closed = True
        cudart, buffers = self._cudart, self._buffers
        if cudart is not None:
            with contextlib.suppress(Exception):  # best effort during teardown
                cudart.cudaSetDevice(self.options.device)
                if buffers is not None and buffers.stream is not None:
                    cudart.cudaStreamSynchronize(buffers.stream)
        # Drop TensorRT objects first: the context references the buffers' addresses.
        self._context = None
        self._engine = None
        self._runtime = None
        if buffers is not None:
            buffers.free()
        self._buffers = None

    def __del__(self) -> None:  # last resort if the owner forgot close()
        with contextlib.suppress(Exception):
            self.close()


def open_backend(path: Path, options: TensorRTOptions, max_batch_size: int) -> TensorRTBackend:
    """Load ``path`` (a TensorRT ``.engine`` plan) on ``options.device``.

    Raises ArtifactError naming the file when the plan is missing, truncated, built for
    another TensorRT/GPU, or when TensorRT, cuda-python or a CUDA device is missing.
    """
    return TensorRTBackend(Path(path), options, max_batch_size)
