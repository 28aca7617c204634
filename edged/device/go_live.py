"""``edged check --verify``: would every variant of a config go live on *this* device?

Why a command and not only the daemon's swap check: an operator putting edged on a new
kind of device (an AVX2-only box, a Pi, a Jetson) wants to know before the governor
needs a lighter rung whether that rung passes here. ONNX Runtime's INT8 kernels round
differently per CPU, so the answer is only known on the device. This opens each model's
reference variant and every other variant in process, exactly as a swap does (the
contract check, then ``edged.verify``'s task-level check against the reference computed
here), and prints every measure. The reference is checked against itself, which passes
by construction but shows how far this device's runtime is from the build machine's
recorded outputs (``*.vs_build_machine``). ``scripts/ops/isa-check`` runs it under emulated
CPUs. Nothing is served and no socket is opened.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from edged.backends.base import TensorSpec
from edged.config.file import load_config
from edged.config.models import ModelConfig
from edged.errors import EdgedError
from edged.metrics import Metrics
from edged.model.heads import Head, open_head
from edged.model.open import Loaded, check_candidate, open_batch_member, open_with_head
from edged.preprocess.preprocessor import Preprocessor
from edged.verify.compare import VerifyRefused
from edged.verify.verifier import Opened, Reference, Verifier

#: CPU features that decide which ONNX Runtime kernels run (numpy's CPUID names)
ISA_FEATURES = ("AVX2", "FMA3", "AVX512F", "AVX512VNNI", "AVX512_VNNI", "AVXVNNI", "ASIMD",
                "ASIMDDP")


@dataclass
class VariantResult:
    """One variant's answer: ``role`` is reference, checked or unverified."""

    model: str
    variant: str
    role: str
    ok: bool
    precision: str = ""
    inputs: str = ""
    measures: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0


def simd_features() -> dict[str, Any]:
    """The machine and the SIMD features this process sees (CPUID, as the runtime reads
    them; under qemu-user these are the emulated CPU's, unlike /proc/cpuinfo)."""
    features: dict[str, bool] = {}
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as found
    except ImportError:  # numpy < 2
        try:
            from numpy.core._multiarray_umath import __cpu_features__ as found
        except ImportError:
            found = {}
    features = {k: bool(found[k]) for k in ISA_FEATURES if k in found}
    return {"machine": platform.machine(),
            "features": sorted(k for k, v in features.items() if v)}


def verify_model(m: ModelConfig) -> list[VariantResult]:
    """Open ``m``'s reference and check every other variant against it, in process."""
    pre = Preprocessor(m.preprocess) if m.preprocess else None
    verifier = Verifier(m, pre)
    head = open_head(m, Metrics(), pre)  # the head's series; nothing is exported
    ri = verifier.reference_index
    t0 = time.perf_counter()
    try:
        ref = open_with_head(m, ri, head)
    except Exception as e:
        why = _message(e)
        return [VariantResult(m.name, v.name, "reference", False, error=why) if i == ri else
                VariantResult(m.name, v.name, "checked", False,
                              error=f"the reference {verifier.reference_name!r} did not open: "
                                    f"{why}")
                for i, v in enumerate(m.variants)]
    session = _Session(m, verifier, head, ref)
    try:
        return [session.measure(ri, ref, t0)] + [
            session.candidate(i, member) for i, v in enumerate(m.variants)
            for member in (False, True) if (i != ri or member)
            and (not member or v.batch_variant is not None)]
    finally:
        ref.backend.close()


class _Session:
    """One model's check: its verifier and its reference variant, open."""

    def __init__(self, m: ModelConfig, verifier: Verifier, head: Head, ref: Loaded) -> None:
        self.m, self.verifier, self.head, self.ref = m, verifier, head, ref
        self.spec = _check_spec(m, ref)

    def with_reference(self, job: Callable[[Opened], Reference]) -> Reference:
        return job(self.ref)

    def candidate(self, index: int, member: bool = False) -> VariantResult:
        """Open variant ``index`` (``member``: its rung's ``batch_variant``, checked on the
        rung's inputs) as a swap would, check its contract, then measure it."""
        v = self.m.variants[index]
        v = v.batch_variant if member and v.batch_variant is not None else v
        t0 = time.perf_counter()
        if not v.verify.enabled:
            return VariantResult(self.m.name, v.name, "unverified", True,
                                 error="verify = false: goes live unchecked")
        try:
            cand = (open_batch_member if member else open_with_head)(self.m, index, self.head)
            check_candidate(v, cand.backend, list(self.ref.backend.inputs),
                            list(self.ref.backend.outputs))  # closes it on failure
        except Exception as e:
            return VariantResult(self.m.name, v.name, "checked", False, error=_message(e),
                                 seconds=time.perf_counter() - t0)
        try:
            return self.measure(index, cand, t0)
        finally:
            cand.backend.close()

    def measure(self, index: int, cand: Loaded, t0: float) -> VariantResult:
        """The real check of ``cand`` against the reference's results on its inputs (the
        reference against itself: what it computes here against the build machine)."""
        role = "reference" if cand is self.ref else "checked"
        result = VariantResult(self.m.name, cand.config.name, role, False)
        if role == "reference":
            try:
                self.verifier.check_inputs(index, self.spec)
            except VerifyRefused:  # it goes live unchecked by definition
                result.ok, result.error = True, "no check inputs: nothing measured"
                return result
        try:
            reference = self.verifier.reference(index, self.spec, self.with_reference)
            result.inputs = reference.inputs.source
            result.precision, result.measures = self.verifier.measure(cand, reference)
            result.ok = True
        except Exception as e:
            result.error = _message(e)
        result.seconds = time.perf_counter() - t0
        return result


def _check_spec(m: ModelConfig, ref: Loaded) -> TensorSpec | None:
    """The input validation frames are made for: the preprocessed one, else the only one."""
    inputs = list(ref.backend.inputs)
    want = m.preprocess.input if m.preprocess and m.preprocess.input else None
    if want is None and len(inputs) == 1:
        want = inputs[0].name
    return next((s for s in inputs if s.name == want), None)


def _message(e: Exception) -> str:
    return str(e) if isinstance(e, EdgedError) else f"{type(e).__name__}: {e}"


def format_result(r: VariantResult) -> str:
    head = f"{'ok  ' if r.ok else 'FAIL'} {r.model}/{r.variant}"
    if r.role == "unverified":
        return f"{head} unverified ({r.error})"
    if not r.ok or r.error:  # refused, or a reference with nothing to measure
        return f"{head} ({r.role}): {r.error}"
    what = "reference, against itself" if r.role == "reference" else "checked"
    measures = " ".join(f"{k}={v:.4g}" for k, v in r.measures.items())
    return f"{head} {r.precision} {what} on {r.inputs} in {r.seconds:.1f} s: {measures}"


def cmd_check_verify(args: argparse.Namespace) -> int:
    """``edged check --verify [--json] CONFIG``: 0 when every variant would go live; an
    invalid config raises its ``ConfigError`` (the command prints it, with its code)."""
    cfg = load_config(args.config)
    cpu = simd_features()
    results = [r for m in cfg.models for r in verify_model(m)]
    failed = [r for r in results if not r.ok]
    if args.json:
        print(json.dumps({"config": str(args.config), "cpu": cpu, "ok": not failed,
                          "variants": [asdict(r) for r in results]}, indent=2))
        return 1 if failed else 0
    print(f"cpu: {cpu['machine']} {' '.join(cpu['features']) or '(no SIMD features known)'}")
    for r in results:
        print(format_result(r))
    verdict = f"{len(failed)} FAILED" if failed else "OK"
    print(f"{args.config}: {len(results)} variant(s) of {len(cfg.models)} model(s) checked "
          f"against their reference on this device: {verdict}")
    return 1 if failed else 0
