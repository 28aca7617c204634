"""The thread plan reaches ORT sessions: with spare cores the intra-op pool
spins while Run computes and stops when it returns, on small devices it does not spin; a
variant's options override either way; OpenCV runs on the plan's thread count."""

from __future__ import annotations

from typing import Any

import pytest
from support.paths import MODELS

from edged.backends.onnxruntime import OnnxRuntimeBackend
from edged.config.runtimes import OnnxRuntimeOptions
from edged.config.schema import Table
from edged.host import threadplan


def session_entries(opts: dict[str, Any]) -> dict[str, str]:
    problems: list[str] = []
    o = OnnxRuntimeOptions.from_table(Table(opts, "models[0].variants[0].options", "t.toml",
                                            problems))
    assert not problems
    b = OnnxRuntimeBackend(MODELS / "cnn-fp32.onnx", o)
    so = b.session.get_session_options()
    keys = ("session.intra_op.allow_spinning", "session.force_spinning_stop")
    return {k: _entry(so, k) for k in keys}


def _entry(so: Any, key: str) -> str:
    try:
        return str(so.get_session_config_entry(key))
    except Exception:  # ORT raises when the key was never set
        return ""


def test_default_follows_the_plan_for_this_machine() -> None:
    p = threadplan.current()
    e = session_entries({})
    assert e["session.intra_op.allow_spinning"] == ("1" if p.ort_spinning else "0")
    assert e["session.force_spinning_stop"] == ("1" if p.ort_spinning else "")


def test_plan_spins_during_run_only_with_spare_cores() -> None:
    small, big = threadplan.plan(2), threadplan.plan(threadplan.SPIN_MIN_CORES)
    assert not small.ort_spinning
    assert big.ort_spinning and not big.ort_spin_between_runs


@pytest.mark.parametrize(("opts", "spin", "stop"), [
    ({"allow_spinning": False}, "0", ""),
    ({"allow_spinning": True, "spin_between_runs": True}, "1", ""),
    ({"allow_spinning": True}, "1", "1"),
])
def test_variant_options_override_the_plan(opts: dict[str, Any], spin: str, stop: str) -> None:
    e = session_entries(opts)
    assert e["session.intra_op.allow_spinning"] == spin
    assert e["session.force_spinning_stop"] == stop


def test_plan_is_pure_and_sets_opencv_threads() -> None:
    import cv2

    p = threadplan.plan(2)
    assert p.cores == 2 and p.opencv_threads == 1 and p.ort_threads == 0
    before = cv2.getNumThreads()
    try:
        threadplan.apply_process_wide(p)
        assert cv2.getNumThreads() == 1
    finally:
        cv2.setNumThreads(before)
