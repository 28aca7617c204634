"""A rung of two members (docs/compile.md, "Pairs"): its variant computes lone rows, its
``batch_variant`` every batch of more rows, in the real daemon on real runtimes (ONNX
Runtime for the lone rows, OpenVINO for batches, as ``edged compile`` pairs them).

Why these checks: the member is chosen per batch the worker computes (rows == 1 or not),
so a one-row request and a four-row request are deterministic batches of 1 and 4; the
reply names the member that computed it, the compute series counts each member's
batches, and the governor, which steps rungs, moves both members at once."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.configs import digits_config, variant
from support.daemons import metric, metrics
from support.governor import one_step_warm
from support.paths import MODELS
from support.slow_model import make_slow_model
from support.sysfs import make_thermal_zone
from support.waits import wait_until

from edged.cli.requests import models_table
from edged.cli.status_text import format_status
from edged.testing.configs import keys, table

pytestmark = pytest.mark.skipif(importlib.util.find_spec("openvino") is None,
                                reason="OpenVINO is not installed")

X = (np.load(MODELS / "validation.npz")["x"][:4].astype(np.float32) / 255.0)[:, None]
COMPUTED = "edged_compute_duration_seconds_count"


def pair(name: str, path: Path, member: str, member_path: Path, tmp: Path) -> str:
    """An ONNX Runtime rung whose batch_variant is OpenVINO (one thread each)."""
    ov = {"threads": 1, "cache_dir": tmp / "ov-cache"}
    head = {"name": member, "backend": "openvino", "path": member_path}
    return (variant(name, path) + f"[models.variants.batch_variant]\n{keys(head)}"
            + table("models.variants.batch_variant.options", ov))


def ladder(tmp: Path, member_path: Path = MODELS / "cnn-fp32.onnx", governor: str = "") -> Path:
    return digits_config(tmp, governor=governor, variant_tables=[
        pair("ort-fp32", MODELS / "cnn-fp32.onnx", "ov-fp32", member_path, tmp),
        variant("ort-int8", MODELS / "cnn-int8.onnx")])


def served_by(d: Any, rows: int) -> str:
    with d.client() as c:
        r = c.infer("digits", X[:rows])
        assert r.ok and r.outputs["logits"].shape == (rows, 10)
        return str(r.header["variant"])


def model_status(d: Any) -> dict[str, Any]:
    return d.ctl({"op": "status"})["models"][0]


def test_a_lone_row_takes_the_b1_member_and_a_batch_the_batch_member(
        make_daemon: Any, tmp_path: Path) -> None:
    root = tmp_path / "sysroot"
    make_thermal_zone(root, 0, "cpu-thermal", 45000)
    d = make_daemon(ladder(tmp_path, governor=one_step_warm(root)), metrics=True)
    m = model_status(d)
    assert (m["active_variant"], m["batch_variant"]) == ("ort-fp32", "ov-fp32")
    assert m["pairs"] == {"ort-fp32": "ov-fp32"} and m["variants"] == ["ort-fp32", "ort-int8"]
    assert "ladder: [ort-fp32+ov-fp32] > ort-int8" in format_status(d.ctl({"op": "status"}))
    with d.client() as c:
        assert "ort-fp32+ov-fp32 > ort-int8" in models_table(c.models().header["models"])
    assert served_by(d, 1) == "ort-fp32" and served_by(d, 4) == "ov-fp32"
    with d.client() as c:  # the batch member computes what the reference does
        ref = c.infer("digits", X[:1]).outputs["logits"]
        np.testing.assert_allclose(c.infer("digits", X[:4]).outputs["logits"][:1], ref,
                                   atol=1e-3)
    text = metrics(d)
    for member in ("ort-fp32", "ov-fp32"):
        assert metric(text, COMPUTED, model="digits", variant=member) >= 1, member
    assert metric(text, "edged_variant_checks_total", variant="ov-fp32", result="ok") == 1

    # The governor steps rungs: one step down leaves the pair whole, back up brings both.
    assert d.ctl({"op": "level", "level": "warm"})["status"] == "OK"
    wait_until(lambda: model_status(d)["active_variant"] == "ort-int8", timeout=60,
               what="warm -> ort-int8")
    assert model_status(d)["batch_variant"] is None
    assert served_by(d, 1) == "ort-int8" and served_by(d, 4) == "ort-int8"
    assert d.ctl({"op": "level", "level": "auto"})["status"] == "OK"
    wait_until(lambda: model_status(d)["active_variant"] == "ort-fp32", timeout=60,
               what="auto -> ort-fp32")
    assert model_status(d)["batch_variant"] == "ov-fp32"
    assert served_by(d, 4) == "ov-fp32" and served_by(d, 1) == "ort-fp32"


def test_a_batch_member_that_cannot_serve_leaves_its_rung_serving_alone(
        make_daemon: Any, tmp_path: Path) -> None:
    wrong = make_slow_model(tmp_path / "other.onnx", 10)  # input x [N,64]: not the contract
    d = make_daemon(ladder(tmp_path, member_path=wrong))
    m = model_status(d)
    assert (m["active_variant"], m["batch_variant"]) == ("ort-fp32", None)
    assert m["pairs"] == {"ort-fp32": "ov-fp32"}
    assert served_by(d, 4) == "ort-fp32" and served_by(d, 1) == "ort-fp32"
    assert "its batch_variant ov-fp32 was not taken" in d.log()
    assert "batch_variant ov-fp32 not taken: ort-fp32 computes every batch" in format_status(
        d.ctl({"op": "status"}))


def test_edged_check_verify_checks_a_pairs_batch_variant(tmp_path: Path) -> None:
    """``edged check --verify``'s check, in process: the member measured against the
    reference on its rung's inputs like any variant."""
    from edged.config.file import load_config
    from edged.device.go_live import verify_model

    results = verify_model(load_config(ladder(tmp_path)).models[0])
    got = {r.variant: (r.role, r.ok, r.error) for r in results}
    assert got == {"ort-fp32": ("reference", True, None), "ov-fp32": ("checked", True, None),
                   "ort-int8": ("checked", True, None)}, got
    member = next(r for r in results if r.variant == "ov-fp32")
    assert member.precision == "fp32" and member.measures


def test_a_delivered_versions_ladder_keeps_its_pair(tmp_path: Path) -> None:
    """A bundle's ``variants.toml`` with a pair (as ``edged compile`` writes it): both
    members are the bundle's files, named for the version; a member missing from the
    bundle refuses the ladder, naming its key."""
    import shutil
    from types import SimpleNamespace

    from edged.config.file import load_config
    from edged.delivery.download import Refused
    from edged.delivery.gate import version_config

    base = load_config(ladder(tmp_path)).models[0]
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    shutil.copy(MODELS / "cnn-fp32.onnx", bundle / "a.onnx")
    shutil.copy(MODELS / "cnn-fp32.onnx", bundle / "b.onnx")
    text = ('[[models.variants]]\nname = "a"\nbackend = "onnxruntime"\npath = "a.onnx"\n'
            '[models.variants.batch_variant]\nname = "b"\nbackend = "openvino"\n'
            'path = "sub/b.onnx"\n')
    (bundle / "variants.toml").write_text(text)
    version, manifest = SimpleNamespace(path=bundle), SimpleNamespace(ladder=None, version="v2")
    (v,) = version_config(base, version, manifest).variants  # type: ignore[arg-type]
    assert v.name == "a@v2" and v.batch_variant is not None
    assert (v.batch_variant.name, v.batch_variant.path) == ("b@v2", bundle / "b.onnx")
    (bundle / "variants.toml").write_text(text.replace("sub/b.onnx", "c.onnx"))
    with pytest.raises(Refused, match=r"models.variants\[0\].batch_variant.path: c.onnx is "
                                      "not a file of the bundle"):
        version_config(base, version, manifest)  # type: ignore[arg-type]
