"""The shipped digits model's validation set as tests feed it, and ``edged`` run as a
command (as a user runs it: its own process, no inherited systemd sockets)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from support.paths import MODELS, ROOT

VAL = np.load(MODELS / "validation.npz")
X = VAL["x"]  # uint8 [M,28,28]
Y = VAL["y"]


def tensor(i: int) -> np.ndarray:
    """Validation image ``i`` as the model's [1,1,28,28] float input (x / 255)."""
    return (X[i].astype(np.float32) / 255.0)[None, None]


def run_edged(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("NOTIFY_SOCKET", None)
    try:
        return subprocess.run([sys.executable, "-m", "edged", *args], capture_output=True,
                              text=True, timeout=timeout, cwd=str(ROOT), env=env)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"`edged {' '.join(args)}` did not exit within {timeout} s: {e.stderr!r}")
