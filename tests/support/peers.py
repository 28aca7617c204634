"""The real peer servers (``edged.testing.peers``; their venvs: ``edged.testing.peer_venvs``)
as tests use them: built and started, or the test skipped with the reason, and a venv's
install progress shown as it happens.

Why the progress goes around pytest's capture: building a peer's venv takes a minute on a
clean machine, once; a suite silent for that long looks hung.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from edged.testing import peer_venvs, peers


def live_progress(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Print each line to the terminal now, whatever pytest captures."""
    capman = request.config.pluginmanager.getplugin("capturemanager")

    def say(line: str) -> None:
        with capman.global_and_fixture_disabled():
            print(line, file=sys.stderr, flush=True)

    return say


def venv_or_skip(request: pytest.FixtureRequest, kind: str) -> Path:
    """The python of ``kind``'s venv, built now if need be; the test skips if it cannot be."""
    try:
        return peer_venvs.peer_python(kind, live_progress(request))
    except peer_venvs.PeerUnavailable as e:
        pytest.skip(str(e))


def started_or_skip(request: pytest.FixtureRequest, kind: str, onnx: Path, workdir: Path,
                    **kw: Any) -> peers.Peer:
    """A running peer of ``kind`` serving ``onnx``; the test skips if it cannot run here."""
    try:
        p = peers.Peer(kind, onnx, workdir, progress=live_progress(request), **kw)
        p.start()
    except peer_venvs.PeerUnavailable as e:
        pytest.skip(str(e))
    return p
