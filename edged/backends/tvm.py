"""TVM backend: runs a Relax-compiled ``.so`` through ``relax.VirtualMachine``.

Why a sidecar is required: a TVM library carries no readable record of its I/O
names, the TVM version that built it or the CPU it was built for. Loading a
library built by another TVM version or for another architecture fails with a
cryptic dlopen or FFI error (or worse, crashes), so we refuse it early with a
message naming the file, from the facts in ``<artifact>.json`` (see
``edged/backends/support/sidecar.py`` and docs/compile.md).

Artifact layouts (the sidecar's ``batch_sizes`` says which one):

* one ``.so`` with a symbolic batch dimension: ``batch_sizes`` is null; any batch
  size runs as it is;
* one ``.so`` compiled for one static batch size: ``batch_sizes`` is ``[n]``;
* a set of per-batch-size libraries (MetaSchedule tuning needs static shapes):
  the configured path ``NAME.so`` need not exist; its sidecar ``NAME.so.json``
  has ``batch_sizes: [1, 2, 4, 8]`` and ``files: {"1": {"path": "NAME.b1.so",
  "sha256": ...}, ...}``, paths relative to the sidecar's folder.

``batch_sizes`` declares the compiled sizes; ``backends.base.run_batch`` pads a
smaller batch up to the next size and splits a larger one.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Any

import numpy as np

from edged.backends.base import Backend, BackendInfo, TensorSpec, require_file
from edged.config.runtimes import TvmOptions
from edged.errors import ArtifactError

_ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64", "armv8": "aarch64"}


def normalize_arch(name: str) -> str:
    """``x86_64-linux-gnu`` / ``AMD64`` / ``arm64`` -> ``x86_64`` / ``aarch64``."""
    arch = name.split("-")[0].lower()
    return _ARCH_ALIASES.get(arch, arch)


def _import_tvm(threads: int | None) -> Any:
    """Import the TVM *runtime* lazily, with the thread count applied the only reliable way.

    Why ``TVM_USE_RUNTIME_LIB``: a plain ``import tvm`` maps the 259 MB compiler library
    (RSS +100 MB, ~1 s); with it set before the first import, only ``libtvm_runtime.so``
    loads, which is all a daemon needs to run what ``edged compile`` built. (A process
    that already imported the compiler, like ``edged compile`` or a test, keeps it.)"""
    if "tvm" not in sys.modules:
        os.environ.setdefault("TVM_USE_RUNTIME_LIB", "1")
        if threads is not None:
            os.environ["TVM_NUM_THREADS"] = str(threads)
    try:
        import tvm
        import tvm.runtime.vm  # the Relax VM, in the runtime library
    except (ImportError, OSError) as e:
        raise ArtifactError(
            f"the TVM runtime is not usable ({type(e).__name__}: {e}); "
            "install it with: pip install 'edged[tvm]'"
        ) from e
    if threads is not None and os.environ.get("TVM_NUM_THREADS") != str(threads):
        f = tvm.get_global_func("runtime.config_threadpool", allow_missing=True)
        if f is not None:
            f(0, int(threads))
    return tvm


def _read_meta(path: Path) -> dict[str, Any]:
    from edged.backends.support.sidecar import read_sidecar, sidecar_path

    if not sidecar_path(path).exists():
        require_file(path, "TVM library")
    try:
        meta = read_sidecar(path)
    except ValueError as e:
        raise ArtifactError(str(e)) from e
    if meta is None:
        raise ArtifactError(
            f"{path}: TVM artifact has no sidecar {sidecar_path(path).name}; a TVM library "
            "does not record its inputs, target or TVM version, so it cannot be loaded "
            "safely. Rebuild it with `edged compile`."
        )
    if meta.get("backend") != "tvm":
        raise ArtifactError(
            f"{sidecar_path(path)}: sidecar is for backend {meta.get('backend')!r}, not 'tvm'"
        )
    return meta


def _specs(meta: dict[str, Any], key: str, path: Path) -> list[TensorSpec]:
    try:
        return [
            TensorSpec(s["name"], np.dtype(s["dtype"]), tuple(int(d) for d in s["shape"]))
            for s in meta[key]
        ]
    except (KeyError, TypeError, ValueError) as e:
        raise ArtifactError(f"{path}: sidecar has no valid {key!r} list: {e}") from e


def check_compatible(path: Path, meta: dict[str, Any], tvm_version: str) -> None:
    """Refuse artifacts built for another CPU architecture or by another TVM."""
    target = meta.get("target") or {}
    kind = target.get("kind", "llvm") if isinstance(target, dict) else "llvm"
    host = target.get("host") if isinstance(target, dict) else None
    cpu_target = target if kind == "llvm" else (host if isinstance(host, dict) else {})
    triple = cpu_target.get("mtriple") if isinstance(cpu_target, dict) else None
    here = normalize_arch(platform.machine())
    if triple and normalize_arch(triple) != here:
        raise ArtifactError(
            f"{path}: built for {triple} ({normalize_arch(triple)}), but this machine is "
            f"{here}; recompile it here or with `edged compile --target` for {here}"
        )
    built_with = (meta.get("tools") or {}).get("tvm")
    if built_with and built_with != tvm_version:
        raise ArtifactError(
            f"{path}: built with TVM {built_with}, but TVM {tvm_version} is installed; "
            "a TVM library only loads in the TVM version that built it. Recompile it, "
            f"or install apache-tvm=={built_with}"
        )


_ELF_MACHINES = {3: "x86", 62: "x86_64", 40: "arm", 183: "aarch64", 243: "riscv"}


def check_elf(path: Path) -> None:
    """Refuse a library that is not a complete ELF file for this CPU, before dlopen.

    Why: dlopen maps segments by the offsets in the headers; a truncated library
    maps pages past the end of the file and the process dies with SIGBUS when the
    loader touches them, which no Python ``except`` can catch.
    """
    import struct

    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(64)
        if len(head) < 52 or head[:4] != b"\x7fELF":
            raise ArtifactError(f"{path}: not a shared library (no ELF header); "
                                "the file is corrupt or not a TVM export")
        is64, little = head[4] == 2, head[5] == 1
        e = "<" if little else ">"
        machine = struct.unpack_from(e + "H", head, 18)[0]
        if is64:
            phoff, shoff = struct.unpack_from(e + "QQ", head, 32)
            phentsize, phnum, shentsize, shnum = struct.unpack_from(e + "HHHH", head, 54)
        else:
            phoff, shoff = struct.unpack_from(e + "II", head, 28)
            phentsize, phnum, shentsize, shnum = struct.unpack_from(e + "HHHH", head, 42)
        ends = [phoff + phentsize * phnum, shoff + shentsize * shnum]
        f.seek(phoff)
        table = f.read(phentsize * phnum)
        for i in range(phnum if len(table) == phentsize * phnum else 0):
            if is64:
                off, filesz = (struct.unpack_from(e + "Q", table, i * phentsize + 8)[0],
                               struct.unpack_from(e + "Q", table, i * phentsize + 32)[0])
            else:
                off, filesz = (struct.unpack_from(e + "I", table, i * phentsize + 4)[0],
                               struct.unpack_from(e + "I", table, i * phentsize + 16)[0])
            ends.append(off + filesz)
    if max(ends) > size:
        raise ArtifactError(f"{path}: TVM library is truncated ({size} bytes, its headers "
                            f"need {max(ends)}); recompile or copy it again")
    arch = _ELF_MACHINES.get(machine)
    here = normalize_arch(platform.machine())
    if arch is not None and arch != here:
        raise ArtifactError(f"{path}: library is for {arch}, but this machine is {here}")


def _library_files(path: Path, meta: dict[str, Any]) -> dict[int | None, Path]:
    """Batch size (None = dynamic) -> library file, checked to exist and be intact."""
    from edged.backends.support.sidecar import sha256_file

    sizes = meta.get("batch_sizes")
    files = meta.get("files")
    if files:
        out: dict[int | None, Path] = {}
        for key, entry in files.items():
            p = path.parent / (entry["path"] if isinstance(entry, dict) else entry)
            require_file(p, "TVM library")
            want = entry.get("sha256") if isinstance(entry, dict) else None
            if want and sha256_file(p) != want:
                raise ArtifactError(
                    f"{p}: TVM library is truncated or corrupt (sha256 differs from its "
                    f"sidecar {path.name}.json); recompile it"
                )
            out[int(key)] = p
        return out
    require_file(path, "TVM library")
    want = meta.get("sha256")
    if want and sha256_file(path) != want:
        raise ArtifactError(
            f"{path}: TVM library is truncated or corrupt (sha256 differs from its sidecar); "
            "recompile it"
        )
    if sizes is None:
        return {None: path}
    if len(sizes) != 1:
        raise ArtifactError(
            f"{path}: sidecar lists batch sizes {sizes} but no 'files' for them"
        )
    return {int(sizes[0]): path}


class TvmBackend(Backend):
    """One Relax VM per library file (one per compiled batch size, or one dynamic)."""

    kind = "tvm"

    def __init__(self, path: Path, options: TvmOptions, max_batch_size: int) -> None:
        meta = _read_meta(path)
        self.path = path
        self.inputs = _specs(meta, "inputs", path)
        self.outputs = _specs(meta, "outputs", path)
        tvm = _import_tvm(options.threads)
        check_compatible(path, meta, tvm.__version__)
        files = _library_files(path, meta)
        self.dev = self._device(tvm, meta, options.device, path)
        self._tvm = tvm
        self._vms: dict[int | None, Any] = {}
        for size, f in sorted(files.items(), key=lambda kv: kv[0] or 0):
            check_elf(f)
            try:
                lib = tvm.runtime.load_module(str(f))
                self._vms[size] = tvm.runtime.vm.VirtualMachine(lib, self.dev)
            except Exception as e:  # TVM raises its own error types
                raise ArtifactError(
                    f"{f}: cannot load TVM library ({type(e).__name__}: "
                    f"{str(e).strip().splitlines()[0] if str(e).strip() else e}); "
                    "the file is truncated, corrupt or not a TVM export"
                ) from e
        fixed = sorted(k for k in self._vms if k is not None)
        self.batch_sizes = None if None in self._vms else tuple(fixed)
        self.max_batch_size = max_batch_size
        self.info = BackendInfo(
            backend="tvm",
            device=f"{meta.get('target', {}).get('kind', 'llvm')} on {self.dev}",
            details={
                "target": meta.get("target"),
                "batch_sizes": meta.get("batch_sizes"),
                "tuned": bool(meta.get("tuning")),
                "threads": tvm.runtime.num_threads(),
                "files": [str(f) for f in files.values()],
            },
        )

    @staticmethod
    def _device(tvm: Any, meta: dict[str, Any], want: str, path: Path) -> Any:
        target = meta.get("target") or {}
        kind = target.get("kind", "llvm") if isinstance(target, dict) else "llvm"
        if want == "auto":
            want = "cuda" if kind == "cuda" else "cpu"
        if want == "cuda":
            if kind != "cuda":
                raise ArtifactError(f"{path}: built for {kind}, cannot run on cuda")
            dev = tvm.cuda(0)
            if not dev.exist:
                raise ArtifactError(f"{path}: built for CUDA, but no CUDA device is available")
            return dev
        if kind == "cuda":
            raise ArtifactError(f"{path}: built for CUDA; it cannot run on the CPU")
        return tvm.cpu(0)

    def _run_vm(self, vm: Any, arrays: list[np.ndarray]) -> list[np.ndarray]:
        tvm = self._tvm
        args = [tvm.runtime.tensor(a, self.dev) for a in arrays]
        res = vm["main"](*args)
        if isinstance(res, tvm.runtime.Tensor):
            return [res.numpy()]
        return [r.numpy() for r in res]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One VM call. With fixed-size libraries the batch is one of ``batch_sizes``
        (``backends.base.run_batch`` pads and splits)."""
        try:
            arrays = [np.ascontiguousarray(feeds[s.name], dtype=s.dtype) for s in self.inputs]
        except KeyError as e:
            raise ArtifactError(f"{self.path}: missing input {e.args[0]!r}") from e
        n = arrays[0].shape[0]
        key = None if self.batch_sizes is None else n
        vm = self._vms.get(key)
        if vm is None:
            raise ArtifactError(f"{self.path}: no library for batch {n}; compiled sizes are "
                                f"{list(self.batch_sizes or ())} (call through run_batch)")
        outs = self._run_vm(vm, arrays)
        return {s.name: o for s, o in zip(self.outputs, outs, strict=True)}

    def close(self) -> None:
        self._vms.clear()


def open_backend(path: Path, options: TvmOptions, max_batch_size: int) -> Backend:
    """Load a TVM artifact (see the module docstring for layouts) and its sidecar."""
    return TvmBackend(Path(path), options, max_batch_size)
