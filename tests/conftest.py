"""Fixtures and hooks only: a real daemon on free ports, and the check that the suite
leaves the checkout as it found it. Helpers live in ``tests/support/``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.configs import digits_config
from support.daemons import Daemon
from support.paths import ROOT


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
