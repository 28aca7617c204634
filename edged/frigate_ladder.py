"""An INT8 rung for a model Frigate sent: calibrated and checked on frames Frigate sent.

Why here and in a process of its own: no detector server builds a ladder for a model a
client hands it, and the model's own users' frames are the best calibration data there
is. Quantizing is minutes of CPU, so it runs as ``python -m edged.frigate_ladder`` at
the lowest priority on one core (``run_build`` in the daemon starts it and reads its
progress lines), never in the serving process. The rung is accepted only by
``edged.verify``'s task-level check (matched boxes against the fp32 model, on this
device) on *other* frames than those it was calibrated on; the outcome is written
beside it (``<sha>.int8.json``) so a restart offers it again without a rebuild.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

#: frames kept for a rung: the first part calibrates, the rest checks
CALIBRATION_SHARE = 0.75
MAX_RING_BYTES = 64 << 20


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


def paths(model: Path) -> tuple[Path, Path]:
    """Where a stored model's rung and its check record live."""
    stem = model.name.split(".")[0]
    return model.with_name(f"{stem}.int8.onnx"), model.with_name(f"{stem}.int8.json")


def accepted(model: Path) -> Path | None:
    """The model's rung if one was built and passed its check."""
    rung, record = paths(model)
    try:
        ok = json.loads(record.read_text()).get("accepted") is True
    except (OSError, ValueError, AttributeError):
        return None
    return rung if ok and rung.is_file() else None


def build_and_check(src: Path, frames: np.ndarray, model_type: str | None, color: str,
                    say: Any = print) -> dict[str, Any]:
    """Quantize ``src`` (Conv only, as edged compile does for detectors) on the first
    frames, check it against ``src`` on the others; the record of what happened."""
    import time

    from edged.compile.ort_steps import to_int8_static
    from edged.frigate_models import check_model

    rung, _ = paths(src)
    checked = check_model(src.read_bytes(), model_type)
    n_cal = max(1, int(len(frames) * CALIBRATION_SHARE))
    calib, held = frames[:n_cal], frames[n_cal:]
    if len(held) == 0:
        raise ValueError(f"{len(frames)} frames leave none to check the rung on")
    say(f"calibrating on {len(calib)} frames")
    t0 = time.perf_counter()
    tmp = rung.with_name(rung.name + ".tmp")
    to_int8_static(src, tmp, checked.image.name, calib, batch=1, progress=False,
                   op_types=["Conv"])
    tmp.replace(rung)
    build_s = time.perf_counter() - t0
    say(f"quantized in {build_s:.1f} s; checking on {len(held)} other frames")
    report = _check(src, rung, checked, color, held)
    say(f"check passed: {report}")
    return {"accepted": True, "build_s": round(build_s, 2), "calibration_frames": len(calib),
            "check_frames": len(held), "check": report}


def _check(src: Path, rung: Path, checked: Any, color: str, held: np.ndarray) -> str:
    """edged.verify's own check: boxes matched against the fp32 model on ``held``."""
    from dataclasses import replace

    from edged.detect.head import build_postprocessor
    from edged.frigate_models import model_config
    from edged.preprocess import Preprocessor
    from edged.variants import open_variant
    from edged.verify.verifier import Verifier

    base = model_config("check", "fp32", src, checked, color)
    fp32 = base.variants[0]
    int8 = replace(fp32, name="int8", path=rung, precision="int8")
    cfg = replace(base, variants=(fp32, int8))
    assert cfg.preprocess is not None and cfg.postprocess is not None
    verifier = Verifier(cfg, Preprocessor(cfg.preprocess))
    name = checked.image.name
    for frame in held:
        verifier.record({name: frame[None]})
    opened = []
    try:
        for i, v in enumerate(cfg.variants):
            loaded = open_variant("check", i, v, 1)
            opened.append(loaded)
            loaded.post = build_postprocessor(cfg.postprocess, cfg.preprocess, loaded.backend,
                                              v.path, name)
        spec = next(s for s in opened[0].backend.inputs if s.name == name)
        ref = verifier.reference(1, spec, lambda job: job(opened[0]))
        return verifier.check(opened[1], ref)
    finally:
        for o in opened:
            o.backend.close()


def lowest_priority_one_core() -> None:
    """nice 19 and (where the OS has it) one CPU: the build never competes with serving.
    Done by the child itself (a ``preexec_fn`` is unsafe in the threaded daemon)."""
    import os

    os.nice(19)
    if hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[-1]})


def main(argv: list[str] | None = None) -> int:
    """``python -m edged.frigate_ladder SRC FRAMES.npz`` (the daemon runs it); progress on
    stdout, the record as the last line (JSON) and in ``<sha>.int8.json``."""
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("src", type=Path)
    ap.add_argument("frames", type=Path)
    ap.add_argument("--model-type", default=None)
    ap.add_argument("--color", default="rgb", choices=("rgb", "bgr"))
    ap.add_argument("--low-priority", action="store_true", help="nice 19 on one CPU")
    args = ap.parse_args(argv)
    if args.low_priority:
        lowest_priority_one_core()
    _, record_path = paths(args.src)

    def say(msg: str) -> None:
        print(msg, flush=True)

    try:
        with np.load(args.frames, allow_pickle=False) as z:
            frames = z["frames"]
        record = build_and_check(args.src, frames, args.model_type, args.color, say)
    except Exception as e:  # the refusal is the outcome, recorded
        record = {"accepted": False, "error": f"{type(e).__name__}: {e}"[:2000]}
    from edged.model_store import atomic_write

    atomic_write(record_path, json.dumps(record).encode())
    print(json.dumps(record), flush=True)
    return 0 if record["accepted"] else 1


if __name__ == "__main__":
    sys.exit(main())
