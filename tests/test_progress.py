"""Progress bars are drawn on a terminal only: through a pipe (a log, CI, ``| tee``) the
same command writes plain lines, no carriage returns or bar characters.

Both sides are run, so the test could fail: the INT8 step's calibration bar appears on a
pseudo-terminal and is absent through a pipe.
"""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

from support.paths import ROOT

MODEL = ROOT / "models" / "digits" / "cnn-fp32.onnx"
BAR = ("\r", "█", "it/s", "|#")


def _compile(out: Path) -> list[str]:
    return [sys.executable, "-m", "edged", "compile", str(MODEL), "--out", str(out),
            "--steps", "int8", "--calib-limit", "16", "--bench-runs", "2", "--threads", "1"]


def test_a_pipe_gets_no_progress_bar_and_a_terminal_does(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    piped = subprocess.run(_compile(tmp_path / "piped"), capture_output=True, text=True,
                           env=env, timeout=600, cwd=str(ROOT))
    assert piped.returncode == 0, piped.stderr
    said = piped.stdout + piped.stderr
    assert not [b for b in BAR if b in said], said
    assert "int8" in said  # the step ran (and so would have drawn its bar)

    leader, follower = pty.openpty()
    # a terminal has a size (a fresh pseudo-terminal is 0 x 0, where a bar draws nothing)
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    with subprocess.Popen(_compile(tmp_path / "tty"), stdout=subprocess.DEVNULL,
                          stderr=follower, env=env, cwd=str(ROOT)) as p:
        os.close(follower)
        chunks = []
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        assert p.wait(timeout=600) == 0
    os.close(leader)
    drawn = b"".join(chunks).decode(errors="replace")
    assert "\r" in drawn and "calibrat" in drawn.lower(), drawn[-2000:]
