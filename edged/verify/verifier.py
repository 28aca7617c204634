"""One model's verifier: its reference's results on each variant's check inputs, and the
answer to "may this variant go live" (``check``).

Why the model's own object: the reference outputs are computed once per variant on this
device (at load, in the background, or at the first swap) and kept, and the ring of
served inputs is per model. The model supplies only ``with_reference``: run a function
with the reference variant loaded, on the thread that may use it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from edged.backends.base import Backend, TensorSpec, run_batch
from edged.config.models import ModelConfig, VariantConfig
from edged.config.verify import tolerances
from edged.detect.geometry import Transform, fit
from edged.preprocess.preprocessor import Preprocessor
from edged.verify import golden
from edged.verify.check_inputs import (
    CheckInputs,
    RecentInputs,
    fit_feeds,
    from_golden,
    from_validation,
    validation_file,
)
from edged.verify.compare import (
    RELAXED,
    VerifyRefused,
    compare_detections,
    compare_outputs,
    rel_err_by_input,
)

log = logging.getLogger("edged.verify")


class Opened(Protocol):
    """What the verifier needs of an open variant (``edged.model.live_variant.Loaded``)."""

    index: int
    config: VariantConfig
    backend: Backend
    post: Any


@dataclass(frozen=True)
class Reference:
    """The reference variant's results on one candidate's check inputs, on this device."""

    variant: str
    inputs: CheckInputs
    outputs: dict[str, np.ndarray]
    #: a detector's boxes per check input, normalised to the input, down to RELAXED*conf
    detections: list[np.ndarray] | None


WithReference = Callable[[Callable[[Opened], Reference]], Reference]


class Verifier:
    def __init__(self, cfg: ModelConfig, preprocessor: Preprocessor | None) -> None:
        self.preprocessor = preprocessor
        self._layout = cfg.preprocess.layout if cfg.preprocess else None
        self._cache: dict[int, Reference] = {}
        self._lock = threading.Lock()
        self.recent: RecentInputs | None = None
        self.cfg = replace(cfg, variants=())
        self.take_ladder(cfg)

    def take_ladder(self, cfg: ModelConfig) -> None:
        """``cfg``'s ladder: at load, and when rungs are added below the ones served (a
        sent model's built ladder), whose cached reference results stay valid: their
        indices do not move."""
        known = {v.name for v in self.cfg.variants}
        self.cfg = cfg
        self.reference_index = next((i for i, v in enumerate(cfg.variants) if v.reference), 0)
        ring = [v.name for i, v in enumerate(cfg.variants)
                if not self.trusted(i) and not _has_stable_inputs(v)]
        if ring and cfg.verify.recent_inputs and self.recent is None:
            self.recent = RecentInputs(cfg.verify.recent_inputs)
        for v in cfg.variants:
            if not v.verify.enabled and v.name not in known:
                log.warning("variant %s of model %s is unverified (verify = false): it goes "
                            "live without a check against the reference", v.name, cfg.name)
        if set(ring) - known:
            log.info("model %s: variants %s have no golden file or validation data; they are "
                     "checked on the last %d inputs served", cfg.name, ", ".join(ring),
                     cfg.verify.recent_inputs)

    @property
    def reference_name(self) -> str:
        return self.cfg.variants[self.reference_index].name

    def trusted(self, index: int) -> bool:
        """The reference itself, or a variant marked ``verify = false``."""
        return index == self.reference_index or not self.cfg.variants[index].verify.enabled

    def record(self, feeds: dict[str, np.ndarray]) -> None:
        """A batch is about to compute (worker thread): remember its first row."""
        if self.recent is not None:
            self.recent.add(feeds)

    def describe(self) -> dict[str, Any]:
        return {"reference": self.reference_name,
                "unverified": [v.name for v in self.cfg.variants if not v.verify.enabled],
                "recent_inputs": len(self.recent) if self.recent else 0,
                "recent_bytes": self.recent.nbytes if self.recent else 0}

    # -- check inputs and the reference's results ------------------------------------
    def can_check(self, index: int, spec: TensorSpec | None) -> bool:
        """Variant ``index`` exists and can go live: trusted, or it has check inputs."""
        if index >= len(self.cfg.variants):
            return False
        if self.trusted(index):
            return True
        try:
            self.check_inputs(index, spec)
        except VerifyRefused:
            return False
        return True

    def check_inputs(self, index: int, spec: TensorSpec | None) -> CheckInputs:
        """The candidate's check inputs (golden file, validation data, served inputs)."""
        v = self.cfg.variants[index]
        found = from_golden(v.path)
        if found is None and spec is not None:
            found = from_validation(v.path, spec, self._to_tensor(spec))
        if found is None and self.recent is not None:
            found = self.recent.snapshot()
        if found is None:
            raise VerifyRefused(
                f"variant {v.name!r} of model {self.cfg.name!r} has no check inputs, so it "
                f"cannot be compared with the reference {self.reference_name!r}: add a golden "
                f"file ({v.path.name}.golden.npz, written by `edged compile`), name validation "
                f"data in {v.path.parent / 'model.json'} (\"validation\": \"FILE.npz\"), let "
                "the model serve a few requests first (the last "
                f"{self.cfg.verify.recent_inputs} are kept), or set verify = false on the "
                "variant")
        return found

    def reference(self, index: int, spec: TensorSpec | None,
                  with_reference: WithReference) -> Reference:
        """The reference's results on variant ``index``'s check inputs (kept when the
        inputs are fixed ones: golden file, validation data)."""
        with self._lock:
            hit = self._cache.get(index)
        if hit is not None:
            return hit
        inputs = self.check_inputs(index, spec)

        def job(ref: Opened) -> Reference:
            outs = self._run(ref, inputs, f"reference {ref.config.name!r}")
            dets = self._detections(ref, outs, inputs.count)
            return Reference(ref.config.name, inputs, outs, dets)

        result = with_reference(job)
        if inputs.fixed:
            with self._lock:
                self._cache[index] = result
        return result

    def warm(self, spec: TensorSpec | None, with_reference: WithReference) -> None:
        """Compute the reference's results for every variant with fixed check inputs."""
        for i, v in enumerate(self.cfg.variants):
            if self.trusted(i) or not _has_stable_inputs(v):
                continue
            try:
                self.reference(i, spec, with_reference)
            except Exception as e:  # the swap that needs it will say why
                log.debug("reference results for %s/%s not cached: %s", self.cfg.name, v.name, e)

    # -- the check ---------------------------------------------------------------------
    def check(self, cand: Opened, ref: Reference) -> str:
        """Refuse (VerifyRefused) or return what was measured, for the log."""
        precision, report = self.measure(cand, ref)
        return (f"vs {ref.variant} on {ref.inputs.source} ({precision}): "
                + " ".join(f"{k}={val:.3g}" for k, val in report.items()))

    def measure(self, cand: Opened, ref: Reference) -> tuple[str, dict[str, float]]:
        """The check itself: refuse (VerifyRefused), or return the candidate's precision
        and the measures by name (``edged check --verify`` prints them)."""
        v = cand.config
        precision = v.precision or golden.precision_of(v.path, v.name)
        tol = tolerances(precision, self.cfg.verify, v.verify)
        where = (f"variant {v.name!r} against the reference {ref.variant!r} on "
                 f"{ref.inputs.source}")
        outs = self._run(cand, ref.inputs, f"variant {v.name!r}")
        if ref.detections is not None:
            dets = self._detections(cand, outs, ref.inputs.count)
            assert dets is not None and self.cfg.postprocess is not None
            report = compare_detections(where, dets, ref.detections,
                                        cand.post.defaults.conf, tol)
        else:
            report = compare_outputs(where, outs, ref.outputs, tol, precision)
        report.update(_recorded_drift(outs, ref.inputs.recorded))
        return precision, report

    def _run(self, opened: Opened, inputs: CheckInputs, who: str) -> dict[str, np.ndarray]:
        feeds = fit_feeds(inputs.feeds, opened.backend.inputs, self._layout)
        if feeds is None:
            got = {k: list(a.shape) for k, a in inputs.feeds.items()}
            want = {s.name: list(s.shape) for s in opened.backend.inputs}
            raise VerifyRefused(f"{who} cannot take the check inputs ({inputs.source}: {got}; "
                                f"it takes {want})")
        # One row at a time: a check must not grow the runtime's buffers to a batch the
        # model never serves (8 golden inputs on a max_batch_size 4 detector).
        n = inputs.count
        rows = [run_batch(opened.backend, {k: a[i:i + 1] for k, a in feeds.items()})
                for i in range(n)]
        return {s.name: np.concatenate([r[s.name] for r in rows])
                for s in opened.backend.outputs if s.name in rows[0]}

    def _detections(self, opened: Opened, outs: dict[str, np.ndarray],
                    n: int) -> list[np.ndarray] | None:
        post = opened.post
        if post is None:
            return None
        w, h = post.input_size
        opts = replace(post.defaults, conf=post.defaults.conf * RELAXED)
        dets = post.run(outs, [Transform.identity(w, h)] * n, [opts] * n)
        scale = np.array([w, h, w, h], np.float32)
        for d in dets:
            d[:, :4] /= scale
        return dets

    def _to_tensor(self, spec: TensorSpec) -> Callable[[np.ndarray], np.ndarray] | None:
        pre = self.preprocessor
        if pre is None:
            return None
        post_cfg = self.cfg.postprocess
        if post_cfg is None:
            return pre.from_frame
        size = pre.cfg.input_size(spec.shape)

        def letterboxed(frame: np.ndarray) -> np.ndarray:
            fitted, _ = fit(frame, post_cfg.resize, size[0], size[1], post_cfg.pad_value)
            return pre.from_frame(fitted, size=size)

        return letterboxed


def _has_stable_inputs(v: VariantConfig) -> bool:
    try:
        return golden.golden_path(v.path).exists() or validation_file(v.path) is not None
    except Exception:
        return False


def _recorded_drift(outs: dict[str, np.ndarray],
                    recorded: dict[str, np.ndarray] | None) -> dict[str, float]:
    """How far this device is from the build machine's recorded outputs (log only)."""
    drift: dict[str, float] = {}
    for name, r in (recorded or {}).items():
        a = outs.get(name)
        if a is not None and a.shape == r.shape and r.dtype.kind == "f":
            drift[f"{name}.vs_build_machine"] = float(rel_err_by_input(a, r).max())
    return drift
