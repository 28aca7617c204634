"""Shared fixtures: a real daemon in a subprocess on free ports and a temp ipc dir."""

from __future__ import annotations

import functools
import shutil
import subprocess
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


# -- the suite leaves the checkout as it found it ------------------------------------------

_CHECKOUT_BEFORE = pytest.StashKey[str]()


def _checkout_status() -> str | None:
    """``git status --porcelain`` of the checkout, or None outside a git checkout."""
    try:
        r = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain",
                            "--untracked-files=all"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout if r.returncode == 0 else None


@pytest.fixture(scope="session", autouse=True)
def _checkout_untouched(request: pytest.FixtureRequest) -> None:
    """Record the checkout's state before the first test (checked in pytest_sessionfinish):
    tests write into tmp_path, never into the repository."""
    before = _checkout_status()
    if before is not None:
        request.config.stash[_CHECKOUT_BEFORE] = before


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config.stash.get(_CHECKOUT_BEFORE, None)
    after = _checkout_status() if before is not None else None
    if before is None or after is None or after == before:
        return
    old, new = set(before.splitlines()), set(after.splitlines())
    lines = [f"  now:    {ln}" for ln in sorted(new - old)]
    lines += [f"  before: {ln}" for ln in sorted(old - new)]
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    title = f"the suite changed the checkout {ROOT} (git status --porcelain); tests must " \
        "write into tmp_path"
    if tr is not None:
        tr.write_sep("=", title, red=True)
        for ln in lines:
            tr.write_line(ln)
    else:
        print(title, *lines, sep="\n", file=sys.stderr)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
