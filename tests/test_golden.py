"""Golden checks before a swap (issue 14): a variant with perturbed weights still loads,
but is refused, with a log line and a metric; the shipped variants pass."""

from __future__ import annotations

import re
import shutil
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from conftest import MODELS, Daemon
from onnx import numpy_helper

from edged import golden
from edged.backends import backend_module
from edged.schema import Table


def perturbed_copy(src: Path, dst: Path, scale: float = 0.5) -> Path:
    """``src`` with noise on every weight, and ``src``'s golden file beside it."""
    m = onnx.load(str(src))
    rng = np.random.default_rng(0)
    for init in m.graph.initializer:
        w = numpy_helper.to_array(init)
        if w.dtype == np.float32 and w.size > 16:
            noisy = w + rng.normal(0, scale * (float(np.abs(w).std()) or 1.0), w.shape)
            init.CopyFrom(numpy_helper.from_array(noisy.astype(np.float32), init.name))
    onnx.save(m, str(dst))
    shutil.copy(golden.golden_path(src), golden.golden_path(dst))
    return dst


def open_ort(path: Path) -> Any:
    mod = backend_module("onnxruntime")
    return mod.open_backend(path, mod.Options.from_table(Table({}, "", "-")), 8)


@pytest.mark.parametrize("name", ["cnn-fp32", "cnn-int8", "small-fp32"])
def test_shipped_variants_pass_their_golden_check(name: str) -> None:
    path = MODELS / f"{name}.onnx"
    g = golden.read_golden(path)
    assert g is not None and g.precision == ("int8" if "int8" in name else "fp32")
    be = open_ort(path)
    report = golden.check(name, be, g)
    assert report["logits.top1"] == 1.0
    be.close()


def test_perturbed_weights_fail_the_golden_check(tmp_path: Path) -> None:
    bad = perturbed_copy(MODELS / "cnn-fp32.onnx", tmp_path / "cnn-fp32.onnx")
    be = open_ort(bad)
    with pytest.raises(golden.GoldenMismatch, match="strays"):
        golden.check("bad", be, golden.read_golden(bad))
    be.close()


def test_golden_file_is_no_pickle_and_bounded(tmp_path: Path) -> None:
    art = tmp_path / "m.onnx"
    big = {"x": np.zeros((golden.MAX_BYTES // 4 + 1,), np.float32)}
    assert golden.write_golden(art, big, {}, "fp32") is None
    p = golden.write_golden(art, {"x": np.ones((2, 3), np.float32)},
                            {"y": np.ones((2, 3), np.float32)}, "int8")
    assert p is not None
    with np.load(p, allow_pickle=False) as z:
        assert {"in:x", "out:y", "meta"} <= set(z.files)
    assert golden.read_golden(art).precision == "int8"  # type: ignore[union-attr]
    golden.golden_path(art).write_bytes(b"not a zip")
    with pytest.raises(Exception, match="unreadable golden file"):
        golden.read_golden(art)


def test_daemon_refuses_a_swap_to_a_corrupted_variant(make_daemon: Any, tmp_path: Path) -> None:
    bad = perturbed_copy(MODELS / "cnn-fp32.onnx", tmp_path / "corrupt.onnx")
    cfg = tmp_path / "edged.toml"
    cfg.write_text(f"""
[server]
drain_timeout_s = 2.0
[[models]]
name = "digits"
max_batch_size = 4
[models.preprocess]
color = "gray"
width = 28
height = 28
layout = "NCHW"
[[models.variants]]
name = "cnn-fp32"
backend = "onnxruntime"
path = "{MODELS / 'cnn-fp32.onnx'}"
[[models.variants]]
name = "cnn-int8"
backend = "onnxruntime"
path = "{MODELS / 'cnn-int8.onnx'}"
[[models.variants]]
name = "corrupt"
backend = "onnxruntime"
path = "{bad}"
""")
    d: Daemon = make_daemon(cfg, metrics=True)
    assert d.ctl({"op": "swap", "model": "digits", "variant": "cnn-int8"})["status"] == "OK"
    r = d.ctl({"op": "swap", "model": "digits", "variant": "corrupt"})
    assert r["status"] == "INTERNAL" and "golden" in r["error"], r
    assert r["model"]["active_variant"] == "cnn-int8"  # still serving the good one
    assert r["pin"] is None  # a refused pin is dropped, not retried every tick
    log = d.log()
    assert "golden check ok model=digits variant=cnn-int8" in log
    assert re.search(r"golden check failed: swap refused model=digits variant=corrupt: .*strays",
                     log)
    with d.client() as c:
        r2 = c.infer("digits", MODELS / "samples" / "digit7_196.png")
        assert r2.variant == "cnn-int8"
    text = urllib.request.urlopen(f"http://127.0.0.1:{d.metrics_port}/metrics").read().decode()
    assert ('edged_golden_checks_total{model="digits",result="refused",variant="corrupt"} 1.0'
            in text)
