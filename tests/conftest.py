"""Shared fixtures: a real daemon in a subprocess on free ports and a temp ipc dir."""

from __future__ import annotations

import functools
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models" / "digits"
sys.path.insert(0, str(Path(__file__).resolve().parent))

from edged.harness import Daemon, free_port  # noqa: E402  (re-exported for the tests)

__all__ = ["MODELS", "ROOT", "Daemon", "digits_config", "free_port", "ort_session"]


@functools.cache
def ort_session(path: Path) -> Any:
    """One CPU session per model file for in-process model tests (1 thread, quiet)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def digits_config(tmp: Path, *, extra_models: str = "", governor: str = "", server: str = "",
                  model_extra: str = "", variants: tuple[str, ...] = ("cnn-fp32", "cnn-int8",
                                                                       "small-fp32")) -> Path:
    """A config serving the shipped digits model from ``tmp`` (paths are absolute)."""
    v = "\n".join(
        f'[[models.variants]]\nname = "{n}"\nbackend = "onnxruntime"\n'
        f'path = "{MODELS / (n + ".onnx")}"\n[models.variants.options]\nthreads = 1\n'
        for n in variants)
    drain = "" if "drain_timeout_s" in server else "drain_timeout_s = 5.0"
    text = f"""
[server]
{drain}
{server}
[metrics]
listen = "off"

[[models]]
name = "digits"
required = true
max_batch_size = 8
max_queue = 512
{model_extra}
[models.preprocess]
color = "gray"
width = 28
height = 28
layout = "NCHW"

{v}
{extra_models}
{governor}
"""
    p = tmp / "edged.toml"
    p.write_text(text)
    return p


@pytest.fixture
def make_daemon(tmp_path: Path) -> Iterator[Any]:
    started: list[Daemon] = []

    def make(config: Path | None = None, **kw: Any) -> Daemon:
        d = Daemon(config or digits_config(tmp_path), tmp_path, **kw)
        started.append(d)
        return d

    yield make
    for d in started:
        d.stop()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """One shared daemon on the shipped digits model for read-only tests."""
    tmp = tmp_path_factory.mktemp("daemon")
    d = Daemon(digits_config(tmp), tmp, metrics=True)
    yield d
    d.stop()
    shutil.rmtree(tmp, ignore_errors=True)
