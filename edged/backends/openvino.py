"""OpenVINO backend: one compiled model (and its infer requests) per loaded variant.

Why it is built this way (each point was checked against OpenVINO 2026.4, see
docs/configuration.md, "backend = openvino"):

- **No telemetry, no child process.** ``import openvino`` imports the model converter
  ``openvino.tools.ovc``, which sends a usage event to a third party from a forked
  child and writes ``~/intel``. The converter is not needed (``read_model`` reads ONNX
  and IR directly), so it is blocked before the first import: nothing is sent, forked
  or written, and the process is 14 MiB smaller.
- **f32 unless asked otherwise.** On CPUs with bf16 (AVX-512 BF16/AMX) or fp16 (ARMv8.2)
  the CPU plugin's default precision is *half*, not f32: its results would not be the
  ones the variant was validated with. Every variant gets ``INFERENCE_PRECISION_HINT =
  f32`` unless its ``precision`` option names bf16/f16 (an explicit, separately
  validated rung). A QDQ INT8 model still runs its convolutions in int8 under f32.
- **Inputs checked here.** On a dynamic-shape model OpenVINO returns an empty output for
  a wrong shape and casts any dtype silently; ``run`` refuses both with a clear error.
- **Threads from the thread plan, no pinning.** OpenVINO does not spin when idle, so
  ``threads`` defaults to every core this process may use; pinning is off because the
  event loop, ZeroMQ and the decode pool share those cores.
- **Hint by how the model is batched.** A model batched up to ``max_batch_size > 1``
  compiles for THROUGHPUT (one stream per core or two) and ``run`` splits a batch over
  the streams' infer requests in parallel (``batch_multiple``: the batcher then forms
  batches of a multiple of the streams when it can); a batch-1 model compiles for
  LATENCY (one stream using every thread).
- **Inputs without a copy.** Batches are handed over with ``share_inputs=True``: the
  request reads the caller's array in place (every call shares, so a request never
  writes into a caller's array, the pitfall of mixing the two modes).
- **Compiled-blob cache** (``CACHE_DIR``): compiling a model is most of its load time;
  blobs go under ``cache_dir/<device>-<openvino version>`` (the systemd unit's cache
  directory by default), so a new OpenVINO or another device never reads an old blob.
"""

from __future__ import annotations

import logging
import mmap
import os
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

from edged.backends.base import (
    Backend,
    BackendInfo,
    TensorSpec,
    require_file,
    run_batch,
    zero_feeds,
)
from edged.config.runtimes import OpenVinoOptions
from edged.errors import ArtifactError, InvalidArgument
from edged.host import threadplan

log = logging.getLogger("edged.backends.openvino")

#: OpenVINO's virtual devices: they name other devices, so they are not in available_devices
VIRTUAL_DEVICES = ("AUTO", "HETERO", "MULTI", "BATCH")
EXTRA = "edged[openvino]"


def import_openvino() -> Any:
    """Import OpenVINO with its model converter (and so its telemetry) blocked.

    ``sys.modules[name] = None`` makes ``import openvino.tools.ovc`` raise ImportError,
    which ``openvino/__init__.py`` tolerates (it loses only ``convert_model``). Set
    before the first import only: a process that already imported OpenVINO keeps it.
    """
    if "openvino" not in sys.modules:
        sys.modules.setdefault("openvino.tools.ovc", None)  # type: ignore[arg-type]
    try:
        import openvino as ov
        import openvino.properties
        import openvino.properties.hint
    except ImportError as e:
        raise ArtifactError(
            f"OpenVINO is not installed ({e}); install it with: pip install '{EXTRA}'"
        ) from None
    return ov


def default_cache_dir() -> Path:
    """Where compiled blobs go: systemd's CacheDirectory (``$CACHE_DIRECTORY``), else the
    user's cache folder (``$XDG_CACHE_HOME``, else ``~/.cache``), under ``edged/openvino``."""
    systemd = os.environ.get("CACHE_DIRECTORY", "").split(":")[0]
    if systemd:
        return Path(systemd) / "openvino"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "edged" / "openvino"


def cache_folder(root: Path, device: str, version: str) -> Path:
    """``root/<device>-<version>``: a blob is only valid for the device and OpenVINO that
    compiled it (OpenVINO's own key covers the model and the compile properties)."""
    release = "-".join(version.split("-")[:2])  # "2026.4.1-22982": version and build
    safe = re.sub(r"[^A-Za-z0-9.-]+", "_", f"{device}-{release}")
    return root / safe


def can_map_code() -> bool:
    """Can this process map memory writable and executable, as OpenVINO's JIT does?

    The shipped systemd unit forbids it (``MemoryDenyWriteExecute=yes``); OpenVINO then
    fails with "can't protect", which says nothing about why."""
    try:
        m = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    except OSError:
        return False
    m.close()
    return True


NO_JIT = ("OpenVINO's CPU plugin generates its kernels at run time and needs memory that "
          "is writable and then executable, which this process may not map (the shipped "
          "systemd unit sets MemoryDenyWriteExecute=yes): install the drop-in "
          "systemd/openvino.conf (docs/operations.md)")


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(folder, os.W_OK)


def _spec(port: Any, what: str, path: Path) -> TensorSpec:
    try:
        dtype = np.dtype(port.get_element_type().to_dtype())
    except Exception:
        raise ArtifactError(f"{path}: {what} {port.get_any_name()!r} has element type "
                            f"{port.get_element_type()}, which numpy has no type for") from None
    shape = tuple(d.get_length() if d.is_static else -1 for d in port.get_partial_shape())
    return TensorSpec(port.get_any_name(), dtype, shape)


def _check_device(core: Any, device: str) -> None:
    """A device name this OpenVINO cannot use fails here, naming what is available."""
    base = device.split(":")[0]
    if base.split(".")[0] in VIRTUAL_DEVICES:
        return
    available = list(core.available_devices)
    if device in available or (base == device and any(
            a.split(".")[0] == device for a in available)):
        return
    hint = {"GPU": " (an Intel GPU needs Intel's OpenCL compute runtime)",
            "NPU": " (an Intel NPU needs its Linux driver)"}.get(device.split(".")[0], "")
    raise ArtifactError(f"OpenVINO device {device!r} is not available on this machine"
                        f"{hint}; available: {', '.join(available) or 'none'}")


def compile_config(ov: Any, options: OpenVinoOptions, max_batch_size: int,
                   name: str) -> tuple[dict[str, Any], Path | None]:
    """The ``compile_model`` properties for ``options`` and the cache folder in use
    (None: no cache, or its folder cannot be written)."""
    import openvino.properties as props
    import openvino.properties.hint as hints

    hint = options.performance_hint
    if hint == "auto":
        hint = "latency" if max_batch_size <= 1 else "throughput"
    config: dict[str, Any] = {
        hints.performance_mode: (hints.PerformanceMode.LATENCY if hint == "latency"
                                 else hints.PerformanceMode.THROUGHPUT)}
    if options.precision != "auto":
        config[hints.inference_precision] = {"f32": ov.Type.f32, "bf16": ov.Type.bf16,
                                             "f16": ov.Type.f16}[options.precision]
    if options.device == "CPU":  # CPU-plugin properties; other devices reject them
        config[props.inference_num_threads] = options.threads or threadplan.current().cores
        config[hints.enable_cpu_pinning] = False
    if options.streams:
        config[props.streams.num] = options.streams
    if not options.cache:
        return config, None
    cache = cache_folder(options.cache_dir or default_cache_dir(), options.device,
                         ov.get_version())
    if not _writable(cache):
        log.warning("OpenVINO cache %s is not writable; compiling %s uncached", cache, name)
        return config, None
    config[props.cache_dir] = str(cache)
    return config, cache


class OpenVinoBackend(Backend):
    kind = "openvino"

    def __init__(self, path: Path, options: OpenVinoOptions, max_batch_size: int) -> None:
        ov = import_openvino()
        import openvino.properties as props

        _require_model(path)
        core = ov.Core()
        _check_device(core, options.device)
        if options.device.split(":")[0] in ("CPU", *VIRTUAL_DEVICES) and not can_map_code():
            raise ArtifactError(f"{path}: {NO_JIT}")
        config, cache = compile_config(ov, options, max_batch_size, path.name)
        try:
            # From the file, not a read Model: with a cache, a hit then skips reading too.
            self.compiled = core.compile_model(str(path), options.device, config)
        except Exception as e:  # OpenVINO raises RuntimeError with a multi-line trace
            raise ArtifactError(f"OpenVINO cannot compile {path} for {options.device}: "
                                f"{_short(e)}") from None
        c = self.compiled
        self.inputs = [_spec(p, "input", path) for p in c.inputs]
        self.outputs = [_spec(p, "output", path) for p in c.outputs]
        self._in_ports = {s.name: p for s, p in zip(self.inputs, c.inputs, strict=True)}
        self._out_ports = [(s.name, p) for s, p in zip(self.outputs, c.outputs, strict=True)]
        static = {s.shape[0] for s in self.inputs if s.shape and s.shape[0] != -1}
        #: a static batch dim (an IR reshaped to N): run_batch pads and splits to it
        self.batch_sizes = (min(static),) if static else None
        n_requests = max(1, int(c.get_property(props.optimal_number_of_infer_requests)))
        self._requests = [c.create_infer_request() for _ in range(n_requests)]
        self.batch_multiple = 1 if self.batch_sizes else n_requests
        read = _read_back(c)
        self.info = BackendInfo(
            backend=self.kind,
            device=",".join(read.get("EXECUTION_DEVICES") or [options.device]),
            details={"openvino": ov.get_version().split("-")[0], "device": options.device,
                     "hint": read.get("PERFORMANCE_HINT"),
                     "precision": read.get("INFERENCE_PRECISION_HINT", options.precision),
                     "threads": read.get("INFERENCE_NUM_THREADS"),
                     "streams": read.get("NUM_STREAMS"), "requests": n_requests,
                     "cache_dir": str(cache) if cache else None,
                     "loaded_from_cache": bool(read.get("LOADED_FROM_CACHE", False))},
        )
        d = self.info.details
        log.info("%s: OpenVINO %s on %s, %s, %s threads, %s streams%s", path.name,
                 d["openvino"], self.info.device, d["hint"], d["threads"], d["streams"],
                 " (from the compiled-blob cache)" if d["loaded_from_cache"] else "")

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        rows = self._check(feeds)
        parts = min(len(self._requests), rows) if self.batch_sizes is None else 1
        if parts == 1:
            req = self._requests[0]
            req.infer({self._in_ports[k]: a for k, a in feeds.items()}, share_inputs=True)
            return {name: req.get_tensor(port).data.copy() for name, port in self._out_ports}
        # THROUGHPUT: one slice of rows per stream, computed in parallel.
        bounds = np.linspace(0, rows, parts + 1).astype(int)
        used = self._requests[:parts]
        for req, lo, hi in zip(used, bounds[:-1], bounds[1:], strict=True):
            req.start_async({self._in_ports[k]: a[lo:hi] for k, a in feeds.items()},
                            share_inputs=True)
        for req in used:
            req.wait()
        return {name: np.concatenate([req.get_tensor(port).data for req in used])
                for name, port in self._out_ports}

    def _check(self, feeds: dict[str, np.ndarray]) -> int:
        """Rows in the batch, after refusing what OpenVINO would accept silently."""
        names = set(self._in_ports)
        if set(feeds) != names:
            missing, extra = sorted(names - set(feeds)), sorted(set(feeds) - names)
            raise InvalidArgument("openvino: inputs do not match the model"
                                  + (f"; missing {', '.join(missing)}" if missing else "")
                                  + (f"; unknown {', '.join(extra)}" if extra else ""))
        rows: set[int] = set()
        for spec in self.inputs:
            a = feeds[spec.name]
            if not spec.matches_item(a.dtype, a.shape):
                raise InvalidArgument(f"openvino: input {spec.name!r} is {a.dtype} "
                                      f"{list(a.shape)}; the model takes {spec.dtype} "
                                      f"{list(spec.shape)} (-1: any size)")
            if not a.flags.c_contiguous:
                raise InvalidArgument(f"openvino: input {spec.name!r} is not C-contiguous")
            if a.ndim:
                rows.add(int(a.shape[0]))
        if len(rows) > 1:
            raise InvalidArgument(f"openvino: inputs disagree on the batch size: {sorted(rows)}")
        n = rows.pop() if rows else 1
        if n < 1:
            raise InvalidArgument("openvino: an empty batch (0 rows)")
        return n

    def warmup(self, batch_size: int = 1) -> None:
        """Run every infer request once (each pays its own lazy init on its first run),
        with one row each unless asked for more."""
        rows = batch_size if self.batch_sizes else max(batch_size, len(self._requests))
        run_batch(self, zero_feeds(self.inputs, rows))

    def close(self) -> None:
        self._requests = []
        self.compiled = None  # type: ignore[assignment]


def _require_model(path: Path) -> None:
    if path.suffix == ".xml":
        require_file(path, "OpenVINO IR model")
        require_file(path.with_suffix(".bin"), "OpenVINO IR weights (.bin beside the .xml)")
    else:
        require_file(path, "ONNX model")


def _read_back(c: Any) -> dict[str, Any]:
    """The properties the plugin actually chose (best effort: devices differ in what
    they report), as JSON-able values for ``edged status``."""
    out: dict[str, Any] = {}
    for key in ("PERFORMANCE_HINT", "INFERENCE_PRECISION_HINT", "INFERENCE_NUM_THREADS",
                "NUM_STREAMS", "EXECUTION_DEVICES", "LOADED_FROM_CACHE"):
        try:
            v = c.get_property(key)
        except Exception:
            continue
        if hasattr(v, "get_type_name"):  # an ov.Type: "f32", "bf16", "f16"
            v = v.get_type_name()
        out[key] = v if isinstance(v, bool | int | float | list) else str(v)
    return out


def _short(e: Exception) -> str:
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    useful = [ln for ln in lines if not ln.startswith(("Exception from", "Check '"))]
    return (useful or lines or [type(e).__name__])[-1]


def open_backend(path: Path, options: OpenVinoOptions, max_batch_size: int) -> OpenVinoBackend:
    return OpenVinoBackend(path, options, max_batch_size)
