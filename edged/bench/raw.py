"""The in-process references of ``edged bench``: the same model run by ONNX Runtime with
default session options, as a user would call it, and the daemon's own path for one image
(preprocess, run, post-process) in process.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from edged.testing.harness import percentiles_ms


def raw_ort(model: Path, duration: float, frames: list[Any],
            header: dict[str, Any], spinning: bool | None = None,
            threads: int = 0) -> dict[str, Any]:
    """The same model in process, ORT default session options: batch-1 latency and
    throughput at the best batch of 1/2/4/8 (what calling ORT yourself gives).
    ``spinning=False``: the same with the intra-op pool's spinning off; ``threads``: the
    intra-op pool's size (0: ORT's default)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    if spinning is not None:
        so.add_session_config_entry("session.intra_op.allow_spinning",
                                    "1" if spinning else "0")
    sess = ort.InferenceSession(str(model), sess_options=so,
                                providers=["CPUExecutionProvider"])
    specs = sess.get_inputs()
    rng = np.random.default_rng(0)
    type_map = {"tensor(float)": np.float32, "tensor(uint8)": np.uint8,
                "tensor(float16)": np.float16, "tensor(int64)": np.int64}

    def feeds(b: int) -> dict[str, np.ndarray]:
        f = {}
        for s in specs:
            shape = [b if i == 0 else (d if isinstance(d, int) else 1)
                     for i, d in enumerate(s.shape)]
            f[s.name] = (rng.random(shape) * (255 if s.type == "tensor(uint8)" else 1)).astype(
                type_map.get(s.type, np.float32))
        return f

    one = feeds(1)
    lat: list[float] = []
    end = time.monotonic() + duration / 2
    sess.run(None, one)
    while time.monotonic() < end:
        t = time.perf_counter()
        sess.run(None, one)
        lat.append(time.perf_counter() - t)
    best = 0.0
    per = duration / 2 / 4
    for b in (1, 2, 4, 8):
        try:
            f = feeds(b)
            sess.run(None, f)
        except Exception:  # a fixed-batch model: only its own size runs
            continue
        n, t0 = 0, time.monotonic()
        while time.monotonic() - t0 < per:
            sess.run(None, f)
            n += b
        best = max(best, n / (time.monotonic() - t0))
    return {"batch1": percentiles_ms(lat), "best_throughput": best}


def raw_pipeline(config: Path, model: str, header: dict[str, Any], frames: list[Any],
                 duration: float) -> dict[str, Any]:
    """One image (encoded, or a raw uint8 frame) through the model's whole pipeline in
    process, one at a time: what an application calling ORT itself does, with edged's
    own decode, preprocess and post-processing code so that only serving differs."""
    import onnxruntime as ort

    from edged.backends.onnxruntime import _spec
    from edged.config.file import load_config
    from edged.preprocess.preprocessor import Preprocessor, decode_image

    mc = load_config(config).model(model)
    if mc is None or mc.preprocess is None:
        raise SystemExit(f"edged bench: {config} has no model {model!r} with preprocessing")
    v = mc.variants[0]
    sess = ort.InferenceSession(str(v.path), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    pre = Preprocessor(mc.preprocess)
    data = bytes(frames[0])
    meta = header["inputs"][0]
    raw_frame = (np.frombuffer(data, np.uint8).reshape(meta["shape"])
                 if meta.get("encoding", "raw") == "raw" else None)

    def image() -> np.ndarray:
        if raw_frame is not None:
            return raw_frame
        return decode_image(data, 1 << 25, "jpeg" if data[:2] == b"\xff\xd8" else "png")

    step: Any
    if mc.postprocess is not None:
        from types import SimpleNamespace

        from edged.model.detect_head import DetectJob, build_postprocessor, detect_batch, fit_frame

        specs = SimpleNamespace(inputs=[_spec(a) for a in sess.get_inputs()],
                                outputs=[_spec(a) for a in sess.get_outputs()])
        post = build_postprocessor(mc.postprocess, mc.preprocess, specs,  # type: ignore[arg-type]
                                   v.path, mc.preprocess.input)
        names = [o.name for o in sess.get_outputs()]
        opts = post.parse_options({})

        def step() -> None:
            x, tf = fit_frame(post, pre, image(), "bgr" if raw_frame is None else None,
                              post.input_size)
            outs = dict(zip(names, sess.run(names, {name: x}), strict=True))
            detect_batch(post, outs, [DetectJob(opts, tf, post.input_size, None, None, False)])
    else:
        def step() -> None:
            sess.run(None, {name: pre.from_frame(image(), "bgr" if raw_frame is None else None)})

    step()
    lat: list[float] = []
    end = time.monotonic() + duration
    while time.monotonic() < end:
        t = time.perf_counter()
        step()
        lat.append(time.perf_counter() - t)
    return {"batch1": percentiles_ms(lat), "best_throughput": len(lat) / sum(lat)}
