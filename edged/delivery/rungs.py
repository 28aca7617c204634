"""The rungs a model gets on the device: where they are stored, and the ladder they make.

Why here: no detector server builds a ladder for a model a client hands it, and a version
delivered with only its fp32 model has none; edged builds one (``edged.delivery.
rung_child``, a child process at the lowest priority on one core) from the model's own
inputs (frames Frigate sent, a version's validation rows), and this module is what the
daemon knows of it: the ring of frames kept for the build, the files beside a stored
model (``<stem>`` is its file name's stem: a sent model's sha256, a version's top
variant), and the ``ModelConfig`` ladder they give after a build or a restart.

The rungs, each a file beside the model in its version folder:

- ``int8``: ONNX Runtime static QDQ, Conv only (``<stem>.int8.onnx``);
- ``ov-fp32``: with OpenVINO installed, the same graph as OpenVINO IR with full-precision
  weights (``<stem>.ov-fp32.xml`` + ``.bin``), served with the f32 hint;
- ``ov-int8``: the QDQ model as IR, run by OpenVINO's own int8 kernels on x86.

Each rung's outcome is in ``<stem>.<rung>.json`` (accepted by the check or why not, its
speed), the ladder in ``<stem>.ladder.json`` (heaviest first; ``fp32`` is the served model
itself), so a restart serves the same ladder without a rebuild.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from edged.compile.steps import STEP_NAMES

#: frames kept for a rung: the first part calibrates, the rest checks
CALIBRATION_SHARE = 0.75
MAX_RING_BYTES = 64 << 20
#: the served model's own entry in a ladder
TOP = "fp32"


@dataclass(frozen=True)
class Rung:
    """One kind of rung: which backend serves which file beside the model."""

    key: str
    #: the ``edged compile`` step (``compile/steps.py: STEPS``) whose build this rung
    #: repeats on the device: the one list of build steps; a rung names one of them
    step: str
    backend: str
    precision: str
    suffix: str

    def __post_init__(self) -> None:
        if self.step not in STEP_NAMES:
            raise ValueError(f"rung {self.key!r}: no compile step {self.step!r} "
                             f"(compile/steps.py has {', '.join(STEP_NAMES)})")


RUNGS = {r.key: r for r in (Rung("int8", "int8", "onnxruntime", "int8", ".int8.onnx"),
                            Rung("ov-fp32", "openvino", "openvino", "fp32", ".ov-fp32.xml"),
                            Rung("ov-int8", "openvino", "openvino", "int8", ".ov-int8.xml"))}


class FrameRing:
    """The last model inputs a sent model computed (event loop only), bounded in count
    and bytes; a frame too large for the byte bound is never kept."""

    def __init__(self, frames: int, max_bytes: int = MAX_RING_BYTES) -> None:
        self.frames = frames
        self.max_bytes = max_bytes
        self._ring: deque[np.ndarray] = deque(maxlen=max(frames, 1))

    def __len__(self) -> int:
        return len(self._ring)

    @property
    def full(self) -> bool:
        return len(self._ring) >= self.frames

    def add(self, tensor: np.ndarray) -> None:
        if tensor.nbytes * self.frames > self.max_bytes:
            return
        if self._ring and self._ring[-1].shape != tensor.shape:
            self._ring.clear()
        self._ring.append(np.array(tensor[:1]))

    def save(self, path: Path) -> None:
        """An ``.npz`` of the frames (read back with allow_pickle=False)."""
        np.savez(path, frames=np.concatenate(list(self._ring)))


def lowest_priority_one_core(pid: int = 0) -> None:
    """Process ``pid`` (0: this one) at nice 19 on one CPU (where the OS has affinity): the
    rung build never competes with serving. The daemon applies it to the build as soon as
    it is spawned, since the build's own call comes only after its imports (a second or
    more of CPU at the daemon's priority on every core); a ``preexec_fn`` is unsafe in the
    threaded daemon. Errors are ignored: a build that has already exited has no priority."""
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, pid, 19)
    if hasattr(os, "sched_setaffinity"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(pid, {sorted(os.sched_getaffinity(0))[-1]})


# -- where things are stored -------------------------------------------------------------
def _stem(model: Path) -> str:
    return model.name.split(".")[0]


def artifact(model: Path, key: str) -> Path:
    return model.with_name(_stem(model) + RUNGS[key].suffix)


def record_path(model: Path, key: str) -> Path:
    return model.with_name(f"{_stem(model)}.{key}.json")


def ladder_path(model: Path) -> Path:
    return model.with_name(f"{_stem(model)}.ladder.json")


def _read(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def accepted(model: Path, key: str) -> bool:
    """Was the ``key`` rung of ``model`` built and did it pass its check?"""
    doc = _read(record_path(model, key))
    return bool(doc and doc.get("accepted") is True and artifact(model, key).is_file())


def built(model: Path) -> bool:
    """Has a build run to its end for ``model`` (whatever it found)? Then none is due."""
    return ladder_path(model).is_file() or accepted(model, "int8")


def openvino_missing(load: bool = False) -> str | None:
    """Why OpenVINO rungs cannot be built or served here (None: they can). ``load``
    imports it (the build does); else only whether it is installed (the daemon asks at
    every load of a sent model, and need not import OpenVINO to know)."""
    if not load:
        import importlib.util

        found = importlib.util.find_spec("openvino") is not None
        return None if found else "OpenVINO is not installed (pip install 'edged[openvino]')"
    from edged.backends.openvino import import_openvino
    from edged.errors import ArtifactError

    try:
        import_openvino()
    except ArtifactError as e:
        return str(e)
    return None


def ladder_keys(model: Path) -> list[str]:
    """The stored ladder of ``model``, heaviest first (``TOP`` = the served model), with
    what cannot be served now left out (a rung whose file or record is gone, OpenVINO
    uninstalled since); a stored model from before ladders: its accepted int8 rung."""
    doc = _read(ladder_path(model))
    keys = doc.get("ladder") if doc else [TOP, "int8"]
    no_ov = openvino_missing()
    usable = [k for k in (keys if isinstance(keys, list) else []) if k == TOP or (
        isinstance(k, str) and k in RUNGS and accepted(model, k)
        and not (no_ov and RUNGS[k].backend == "openvino"))]
    if not usable or (usable[0] != TOP and RUNGS[usable[0]].precision != "fp32"):
        usable.insert(0, TOP)
    return usable


def drop_rungs(model: Path, why: str) -> None:
    """Remove every rung of ``model`` and record a build that found none (so none is
    started again): the store's quota had no room for them."""
    import shutil

    keep = {model.name, model.with_suffix(".serve.onnx").name}
    for p in model.parent.iterdir():
        if p.name in keep:
            continue
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    ladder_path(model).write_text(json.dumps({"ladder": [TOP], "error": why}))


def variant(top: Any, model: Path, key: str, threads: int = 0) -> Any:
    """The ``VariantConfig`` of rung ``key`` below ``top`` (the served fp32 variant)."""
    from edged.config.models import VariantConfig
    from edged.config.runtimes import BackendOptions, OnnxRuntimeOptions, OpenVinoOptions

    r = RUNGS[key]
    options: BackendOptions
    if r.backend == "openvino":
        # the compiled-blob cache beside the store: a swap or a restart compiles once
        options = OpenVinoOptions(precision="f32", threads=threads,
                                  cache_dir=model.parent / "openvino-cache")
    else:
        options = OnnxRuntimeOptions(threads=threads)
    return VariantConfig(f"{top.name}-{key}", r.backend, artifact(model, key), options,
                         precision=r.precision)


def with_rungs(mc: Any, model: Path) -> Any:
    """``mc`` (a sent model's ``ModelConfig``, one fp32 variant) with its stored ladder."""
    top = mc.variants[0]
    keys = ladder_keys(model)
    if keys == [TOP]:
        return mc
    return replace(mc, variants=tuple(top if k == TOP else variant(top, model, k)
                                      for k in keys))
