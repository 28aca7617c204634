"""The ORT backend's optimized-model cache (``optimized_model_path``), with real sessions.

A valid cache (newer than the source, same ORT version, machine and session
options) is loaded instead of re-optimizing; anything else rebuilds it. Which of the
two happened is read from the backend's log and from the cache file's inode/mtime.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from edged.backends import onnxruntime as ortb
from edged.backends.support import ort_cache
from edged.config.runtimes import OnnxRuntimeOptions

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "models" / "digits" / "cnn-fp32.onnx"
X = np.random.default_rng(0).random((2, 1, 28, 28), dtype=np.float32)


@pytest.fixture
def model(tmp_path: Path) -> Path:
    dst = tmp_path / "cnn-fp32.onnx"
    shutil.copy(MODEL, dst)
    return dst


def _open(model: Path, cache: Path | None, **kw) -> ortb.OnnxRuntimeBackend:
    kw.setdefault("threads", 1)
    return ortb.open_backend(model, OnnxRuntimeOptions(optimized_model_path=cache, **kw), 1)


def _stamp(p: Path) -> tuple[int, int]:
    st = p.stat()
    return st.st_ino, st.st_mtime_ns


@pytest.mark.parametrize("suffix", [".onnx", ".ort"])  # ORT picks the format by suffix
def test_first_load_writes_the_cache_and_the_second_loads_it(model, tmp_path, caplog,
                                                             suffix: str) -> None:
    cache = tmp_path / "cache" / f"cnn.opt{suffix}"
    cache.parent.mkdir()
    caplog.set_level(logging.INFO, logger="edged.backends.support.ort_cache")
    ref = _open(model, None).run({"input": X})["logits"]

    first = _open(model, cache).run({"input": X})["logits"]
    assert cache.is_file() and ort_cache.key_path(cache).is_file()
    assert "rebuilding (no cache yet)" in caplog.text
    key = json.loads(ort_cache.key_path(cache).read_text())
    assert key["onnxruntime"] and key["session_options"]["graph_optimization_level"] == "all"
    assert key["source"]["size"] == model.stat().st_size
    stamp = _stamp(cache)
    assert not list(cache.parent.glob(".*tmp*")), "temporary files left behind"

    caplog.clear()
    second = _open(model, cache).run({"input": X})["logits"]
    assert "loaded from its optimized-model cache" in caplog.text
    assert "rebuilding" not in caplog.text
    assert _stamp(cache) == stamp  # not rewritten
    np.testing.assert_allclose(first, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(second, ref, rtol=1e-5, atol=1e-5)


def test_a_newer_source_rebuilds_the_cache(model, tmp_path, caplog) -> None:
    cache = tmp_path / "cnn.opt.onnx"
    _open(model, cache)
    src = model.stat().st_mtime_ns
    os.utime(cache, ns=(src - 10**9, src - 10**9))  # i.e. the source was edited after it
    caplog.set_level(logging.INFO, logger="edged.backends.support.ort_cache")
    _open(model, cache)
    assert "rebuilding (older than the source model)" in caplog.text
    assert cache.stat().st_mtime_ns > model.stat().st_mtime_ns
    caplog.clear()
    _open(model, cache)
    assert "loaded from its optimized-model cache" in caplog.text


@pytest.mark.parametrize(("change", "field"), [
    ({"graph_optimization_level": "basic"}, "session_options"),
    ({"threads": 2}, "session_options"),
    ("ort-version", "onnxruntime"),
])
def test_a_different_key_rebuilds_the_cache(model, tmp_path, caplog, change, field) -> None:
    cache = tmp_path / "cnn.opt.onnx"
    _open(model, cache)
    kw: dict = {}
    if change == "ort-version":  # a cache written by another ORT release
        kp = ort_cache.key_path(cache)
        kp.write_text(json.dumps({**json.loads(kp.read_text()), "onnxruntime": "1.0.0"}))
    else:
        kw = change
    caplog.set_level(logging.INFO, logger="edged.backends.support.ort_cache")
    _open(model, cache, **kw)
    assert f"rebuilding (key differs in {field})" in caplog.text
    stored = json.loads(ort_cache.key_path(cache).read_text())
    if change == "ort-version":
        import onnxruntime

        assert stored["onnxruntime"] == onnxruntime.__version__
    else:
        for k, v in change.items():
            assert stored["session_options"][k] == v


def test_a_corrupt_cache_is_discarded_and_rebuilt(model, tmp_path, caplog) -> None:
    cache = tmp_path / "cnn.opt.onnx"
    _open(model, cache)
    cache.write_bytes(b"not an onnx model")  # newer than the source, key still matching
    caplog.set_level(logging.INFO, logger="edged.backends.support.ort_cache")
    out = _open(model, cache).run({"input": X})["logits"]
    assert "could not be loaded; rebuilding it" in caplog.text
    assert cache.stat().st_size > 1000
    ref = _open(model, None).run({"input": X})["logits"]
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_a_cache_without_its_key_file_is_not_trusted(model, tmp_path, caplog) -> None:
    """What the old backend left behind: an optimized file, no key."""
    cache = tmp_path / "cnn.opt.onnx"
    _open(model, cache)
    ort_cache.key_path(cache).unlink()
    caplog.set_level(logging.INFO, logger="edged.backends.support.ort_cache")
    _open(model, cache)
    assert "no readable key file" in caplog.text and ort_cache.key_path(cache).is_file()


def test_an_unwritable_cache_folder_only_costs_time(model, tmp_path, caplog) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache folder should be")
    caplog.set_level(logging.INFO, logger="edged.backends.support.ort_cache")
    out = _open(model, blocker / "sub" / "cnn.opt.onnx").run({"input": X})["logits"]
    assert out.shape == (2, 10)
    assert "folder not writable; loading cnn-fp32.onnx without a cache" in caplog.text


def test_a_missing_cache_folder_is_created(model, tmp_path) -> None:
    cache = tmp_path / "var" / "cache" / "edged" / "cnn.opt.onnx"
    _open(model, cache)
    assert cache.is_file()
