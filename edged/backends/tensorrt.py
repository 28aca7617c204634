"""TensorRT backend: serve a serialized ``.engine`` plan on an NVIDIA GPU.

Why this file looks the way it does:

* A plan is tied to the TensorRT version and the GPU compute capability (SM) it
  was built with. TensorRT only says so with a log line and a ``None`` from
  ``deserialize_cuda_engine``, so we read the sidecar written at build time
  (``edged.compile.tensorrt``) and refuse a mismatched plan *before* deserializing,
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
import ctypes
import hashlib
import logging
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edged.backends.base import Backend, BackendInfo, BackendOptions, TensorSpec, require_file
from edged.backends.sidecar import read_sidecar
from edged.backends.tensorrt_keys import l4t_release, rebuild_command
from edged.backends.tensorrt_support import (
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
from edged.errors import ArtifactError, EdgedError, InvalidArgument
from edged.schema import Table, non_negative

log = logging.getLogger(__name__)

# -- options --------------------------------------------------------------------------


@dataclass(frozen=True)
class Options(BackendOptions):
    """``[models.variants.options]`` for ``backend = "tensorrt"``.

    device: CUDA device index the plan is loaded on (plans are per-SM, so on a box
        with mixed GPUs this must be a GPU like the one the plan was built on).
    version_compatible: trust host code embedded in a version-compatible plan
        (sets ``runtime.engine_host_code_allowed``). Off by default because that
        code runs in the daemon's process: only enable it for plans you built.
    """

    device: int = 0
    version_compatible: bool = False

    @classmethod
    def from_table(cls, t: Table) -> Options:
        device = t.get("device", int, 0, check=non_negative)
        version_compatible = t.get("version_compatible", bool, False)
        t.done()
        return cls(device=device, version_compatible=version_compatible)


# -- sidecar compatibility (pure: no TensorRT or CUDA needed) -------------------------


def _version_tuple(v: str) -> tuple[int, ...]:
    parts: list[int] = []
    for p in str(v).split("."):
        digits = "".join(ch for ch in p if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def _cc_tuple(cc: Any) -> tuple[int, int] | None:
    if cc is None:
        return None
    t = _version_tuple(str(cc))
    return (t[0], t[1] if len(t) > 1 else 0) if t else None


def check_plan_compat(
    plan: Path,
    sidecar: dict[str, Any] | None,
    *,
    trt_version: str | None,
    compute_capability: str | None,
    gpu_name: str | None = None,
    arch: str | None = None,
    l4t: str | None = None,
    allow_host_code: bool = False,
) -> None:
    """Refuse a plan whose sidecar says it cannot load here, before TensorRT tries.

    Every difference is named in one ArtifactError, with the command that rebuilds
    the directory's plans on this device. ``trt_version``/``compute_capability`` None
    skip those rules, so the platform and L4T can be checked before TensorRT loads. A
    plan without a sidecar is not checked here (TensorRT's own check still runs). The
    rules are in ``plan_mismatches``.
    """
    if sidecar is None:
        return
    backend = sidecar.get("backend")
    if backend not in (None, "tensorrt"):
        raise ArtifactError(f"{plan}: sidecar says this artifact is for backend {backend!r}")
    problems = plan_mismatches(
        sidecar, trt_version=trt_version, compute_capability=compute_capability,
        gpu_name=gpu_name, arch=arch, l4t=l4t, allow_host_code=allow_host_code)
    if not problems:
        return
    source = (sidecar.get("source") or {}).get("path")
    raise ArtifactError(
        f"{plan}: {'; '.join(problems)}: rebuild it on this device "
        f"({rebuild_command(source, plan.parent)}); the daemon never builds plans itself"
    )


def plan_mismatches(
    sidecar: dict[str, Any],
    *,
    trt_version: str | None,
    compute_capability: str | None,
    gpu_name: str | None = None,
    arch: str | None = None,
    l4t: str | None = None,
    allow_host_code: bool = False,
) -> list[str]:
    """Why the plan described by ``sidecar`` cannot load on this device (empty: it can).

    Rules (TensorRT "Engine Compatibility" docs):
    * Without version compatibility a plan loads only on the exact TensorRT version
      it was built with. With it, any later version loads it (10 -> 11 included),
      an older one never does, and the runtime must allow the plan's host code.
    * Without hardware compatibility a plan runs only on the compute capability it was
      built for; ``ampere_plus`` plans run on any SM >= 8.0.
    * On a Jetson the L4T (JetPack) release fixes TensorRT, CUDA and the driver: a plan
      from another release is refused (unless version-compatible). Checked only when
      the sidecar records ``target.l4t`` (plans built by this version of edged do).
    * Plans are not portable across CPU architectures / platforms.
    """
    target = sidecar.get("target") or {}
    tools = sidecar.get("tools") or {}
    problems: list[str] = []

    built_arch = target.get("arch")
    if arch and built_arch and built_arch != arch:
        problems.append(f"plan was built on {built_arch}, this machine is {arch}; TensorRT "
                        "plans are not portable across platforms")

    version_compatible = bool(target.get("version_compatible"))
    built = tools.get("tensorrt")
    if built and trt_version:
        b, r = _version_tuple(built), _version_tuple(trt_version)
        n = min(len(b), len(r))
        if version_compatible:
            if r[:n] < b[:n]:
                problems.append(
                    f"plan was built with TensorRT {built} (version-compatible), which is newer "
                    f"than this TensorRT {trt_version}; version-compatible plans only load on "
                    "the same or a later TensorRT (or upgrade TensorRT)")
            elif not allow_host_code:
                problems.append(
                    "plan is version-compatible and embeds TensorRT host code; set "
                    "version_compatible = true in this variant's [models.variants.options] "
                    "if you trust the plan")
        elif b[:n] != r[:n]:
            problems.append(
                f"plan was built with TensorRT {built} but this is TensorRT {trt_version}; a "
                "plan loads only on the exact TensorRT version that built it (unless built "
                "version-compatible)")

    if "l4t" in target and not version_compatible and target.get("l4t") != l4t:
        was = f"L4T {target['l4t']}" if target.get("l4t") else "a machine that is not a Jetson"
        now = f"L4T {l4t}" if l4t else "not a Jetson (no /etc/nv_tegra_release)"
        problems.append(f"plan was built on {was} but this device is {now}; a JetPack "
                        "release brings its own TensorRT, CUDA and driver")

    built_cc = _cc_tuple(target.get("compute_capability"))
    here_cc = _cc_tuple(compute_capability)
    if built_cc and here_cc and built_cc != here_cc:
        level = str(target.get("hardware_compatibility") or "none").lower()
        if not (level in ("ampere_plus", "ampere+") and here_cc >= (8, 0)):
            built_gpu = f" ({target['gpu']})" if target.get("gpu") else ""
            here_gpu = f" ({gpu_name})" if gpu_name else ""
            problems.append(
                f"plan was built for GPU compute capability {built_cc[0]}.{built_cc[1]}"
                f"{built_gpu} but this GPU is {here_cc[0]}.{here_cc[1]}{here_gpu}; a plan runs "
                "only on the SM it was built for (unless built with hardware compatibility "
                "ampere_plus, SM >= 8.0)")
    elif built_cc and here_cc and gpu_name and target.get("gpu") and target["gpu"] != gpu_name:
        # Same SM, another GPU model: TensorRT loads it (with a warning of its own), but
        # the tactics were timed on the other model; say so without refusing.
        log.warning("plan was built on %s, this GPU is %s (same SM %s): it loads, but rebuild "
                    "on this model for the best speed", target["gpu"], gpu_name,
                    target.get("compute_capability"))
    return problems


def _read_plan(path: Path, sidecar: dict[str, Any] | None) -> bytes:
    """The plan's bytes, checked against the size/sha256 the sidecar recorded."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ArtifactError(f"cannot read TensorRT plan {path}: {e}") from e
    recorded = (sidecar or {}).get("plan") or {}
    want_size = recorded.get("bytes")
    if isinstance(want_size, int) and want_size != len(data):
        raise ArtifactError(
            f"{path}: plan is {len(data)} bytes but {want_size} were written at build time: "
            "the file is truncated or was replaced; copy it again or rebuild it"
        )
    want_sha = recorded.get("sha256")
    if isinstance(want_sha, str) and hashlib.sha256(data).hexdigest() != want_sha:
        raise ArtifactError(
            f"{path}: plan's sha256 differs from the one recorded at build time: "
            "the file is corrupt or was replaced; copy it again or rebuild it"
        )
    return data


# -- the backend ------------------------------------------------------------------------


@dataclass
class _Binding:
    """One I/O tensor: its device buffer (max-batch sized) and pinned host staging."""

    name: str
    is_input: bool
    dtype: np.dtype
    max_shape: tuple[int, ...]
    nbytes: int
    device_ptr: int = 0
    host_ptr: int = 0
    host: np.ndarray | None = None  # uint8 view of the pinned buffer


def _volume(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


class TensorRTBackend(Backend):
    """A deserialized plan with one execution context, one stream and fixed buffers."""

    kind = "tensorrt"

    def __init__(self, path: Path, options: Options, max_batch_size: int) -> None:
        self.path = path
        self.options = options
        self._closed = False
        self._cudart: Any = None
        self._stream: Any = None
        self._bindings: list[_Binding] = []
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
        data = _read_plan(path, sidecar)
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
                "device_memory_bytes": sum(b.nbytes for b in self._bindings),
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
        """Device + pinned host buffers for every I/O tensor at the profile's max shapes."""
        cudart, ctx = self._cudart, self._context
        if max_batch_size > self._max_batch:
            log.warning(
                "%s: max_batch_size %d exceeds the plan's largest batch %d (optimization "
                "profile 0); larger batches run in chunks of %d. Rebuild with --max-batch %d "
                "to run them in one go.",
                self.path,
                max_batch_size,
                self._max_batch,
                self._max_batch,
                max_batch_size,
            )
        self._stream = check_cuda(cudart.cudaStreamCreate(), "cudaStreamCreate")
        # Resolve output shapes at the max input shapes to size the output buffers.
        max_shapes: dict[str, tuple[int, ...]] = {}
        for spec in self.inputs:
            shp = self._profile[spec.name][2] if spec.name in self._profile else spec.shape
            max_shapes[spec.name] = shp
            if not ctx.set_input_shape(spec.name, shp):
                raise ArtifactError(f"{self.path}: cannot set input {spec.name!r} to {shp}")
        for spec in self.outputs:
            shp = tuple(int(d) for d in ctx.get_tensor_shape(spec.name))
            if any(d < 0 for d in shp):
                raise ArtifactError(
                    f"{self.path}: output {spec.name!r} has a data-dependent shape {shp}; "
                    "edged's TensorRT backend needs output shapes determined by input shapes"
                )
            max_shapes[spec.name] = shp
        for spec in [*self.inputs, *self.outputs]:
            shp = max_shapes[spec.name]
            nbytes = max(1, _volume(shp) * spec.dtype.itemsize)
            b = _Binding(spec.name, spec in self.inputs, spec.dtype, shp, nbytes)
            self._bindings.append(b)  # appended first so close() frees partial allocations
            b.device_ptr = int(check_cuda(cudart.cudaMalloc(nbytes), f"cudaMalloc({nbytes})"))
            b.host_ptr = int(check_cuda(cudart.cudaMallocHost(nbytes), f"cudaMallocHost({nbytes})"))
            buf = (ctypes.c_uint8 * nbytes).from_address(b.host_ptr)
            b.host = np.frombuffer(buf, dtype=np.uint8)
            if not ctx.set_tensor_address(spec.name, b.device_ptr):
                raise ArtifactError(f"{self.path}: set_tensor_address({spec.name!r}) failed")
        self._by_name = {b.name: b for b in self._bindings}

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
        cudart, ctx, stream = self._cudart, self._context, self._stream
        rows = stop - start
        run_rows = max(rows, self._min_batch)
        h2d = cudart.cudaMemcpyKind.cudaMemcpyHostToDevice
        d2h = cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost
        for s in self.inputs:
            b = self._by_name[s.name]
            src = feeds[s.name][start:stop]
            shape = (run_rows, *src.shape[1:])
            nbytes = _volume(shape) * s.dtype.itemsize
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
                    f"profile {self._profile.get(s.name)}"
                )
            check_cuda(
                cudart.cudaMemcpyAsync(b.device_ptr, b.host_ptr, nbytes, h2d, stream),
                "cudaMemcpyAsync H2D",
            )
        if not ctx.execute_async_v3(int(stream)):
            raise EdgedError(f"{self.path}: TensorRT execute_async_v3 failed (see log)")
        shapes: dict[str, tuple[int, ...]] = {}
        for s in self.outputs:
            b = self._by_name[s.name]
            shp = tuple(int(d) for d in ctx.get_tensor_shape(s.name))
            nbytes = _volume(shp) * s.dtype.itemsize
            if nbytes > b.nbytes:
                raise EdgedError(f"{self.path}: output {s.name!r} {shp} exceeds its buffer")
            shapes[s.name] = shp
            check_cuda(
                cudart.cudaMemcpyAsync(b.host_ptr, b.device_ptr, nbytes, d2h, stream),
                "cudaMemcpyAsync D2H",
            )
        check_cuda(cudart.cudaStreamSynchronize(stream), "cudaStreamSynchronize")
        out: dict[str, np.ndarray] = {}
        for s in self.outputs:
            b = self._by_name[s.name]
            shp = shapes[s.name]
            assert b.host is not None
            arr = b.host[: _volume(shp) * s.dtype.itemsize].view(s.dtype).reshape(shp)
            # Copy out of the pinned buffer: the next run overwrites it.
            out[s.name] = arr[:rows].copy() if shp and shp[0] == run_rows else arr.copy()
        return out

    # -- teardown ---------------------------------------------------------------------
    def close(self) -> None:
        """Release context, engine and runtime, then buffers and the stream. Idempotent.

        The registry may close on another thread than the one that loaded or ran the
        plan, and CUDA's current device is per thread, so select ours first.
        """
        if getattr(self, "_closed", True):
            return
        self._closed = True
        cudart = self._cudart
        if cudart is not None:
            with contextlib.suppress(Exception):  # best effort during teardown
                cudart.cudaSetDevice(self.options.device)
                if self._stream is not None:
                    cudart.cudaStreamSynchronize(self._stream)
        # Drop TensorRT objects first: the context references the buffers' addresses.
        self._context = None
        self._engine = None
        self._runtime = None
        if cudart is not None:
            for b in self._bindings:
                b.host = None
                if b.device_ptr:
                    self._free(cudart.cudaFree, b.device_ptr, "cudaFree")
                    b.device_ptr = 0
                if b.host_ptr:
                    self._free(cudart.cudaFreeHost, b.host_ptr, "cudaFreeHost")
                    b.host_ptr = 0
            if self._stream is not None:
                self._free(cudart.cudaStreamDestroy, self._stream, "cudaStreamDestroy")
        self._stream = None
        self._bindings = []

    @staticmethod
    def _free(fn: Any, handle: Any, what: str) -> None:
        try:
            check_cuda(fn(handle), what)
        except Exception as e:  # log, keep freeing the rest
            log.warning("%s during close: %s", what, e)

    def __del__(self) -> None:  # last resort if the owner forgot close()
        with contextlib.suppress(Exception):
            self.close()


def open_backend(path: Path, options: Options, max_batch_size: int) -> TensorRTBackend:
    """Load ``path`` (a TensorRT ``.engine`` plan) on ``options.device``.

    Raises ArtifactError naming the file when the plan is missing, truncated, built for
    another TensorRT/GPU, or when TensorRT, cuda-python or a CUDA device is missing.
    """
    return TensorRTBackend(Path(path), options, max_batch_size)
