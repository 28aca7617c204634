"""The daemon's log lines in the journald format (edged/host/logs.py), read from its stderr.

Under systemd (JOURNAL_STREAM set) every line is ``<N>logger: event key=value ...``:
an sd-daemon priority prefix journald turns into PRIORITY, no timestamp (journald
adds one), one event per line. tests/test_systemd_real.py checks the same lines as
journald stored them; this test needs no namespace.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Any

import numpy as np
from support.configs import digits_config
from support.waits import wait_until

LINE = re.compile(r"^<(?P<prio>[0-7])>(?P<logger>edged(\.[a-z_]+)*): (?P<event>[a-z][\w -]*?)"
                  r"(?P<fields>( [a-z_]+=\S+)*)$")


def test_journald_lines_have_priorities_and_key_values(make_daemon: Any, tmp_path: Path) -> None:
    cfg = digits_config(tmp_path)
    # A config problem at reload gives an error line; the start gives info lines.
    d = make_daemon(cfg, env={"JOURNAL_STREAM": "8:12345"})
    with d.client() as c:
        assert c.infer("digits", np.zeros((1, 1, 28, 28), np.float32)).ok
    cfg.write_text(cfg.read_text().replace("max_queue = 512", "max_queue = -1"))
    d.signal(signal.SIGHUP)  # rejected reload: logged at error level, daemon goes on
    with d.client() as c:
        def rejected() -> bool:
            assert c.health().ok  # serving all along
            return "reload rejected" in d.log()

        wait_until(rejected, 10, "the reload rejected", interval=0.1)
    assert d.stop() == 0
    lines = [ln for ln in d.log().splitlines() if ln.strip()]
    edged_lines = [ln for ln in lines if ln.startswith("<")]
    assert len(edged_lines) >= 4, lines
    assert all(not re.match(r"^\d{4}-\d\d-\d\dT", ln) for ln in lines), "timestamps"
    for ln in edged_lines:
        assert "\t" not in ln and "\r" not in ln, ln
    parsed = {m.group("event"): m for m in map(LINE.match, edged_lines) if m}
    ready = parsed.get("ready")
    assert ready is not None and ready.group("prio") == "6", edged_lines
    assert ready.group("logger") == "edged.server"
    fields = dict(f.split("=", 1) for f in ready.group("fields").split())
    assert fields["models"] == "digits" and float(fields["startup_ms"]) > 0
    rejected = [ln for ln in edged_lines if "reload rejected" in ln]
    assert rejected and rejected[0].startswith("<3>edged.server: reload rejected"), rejected
    assert "max_queue" in rejected[0]  # the error names the bad key, on the same line
    stopped = parsed.get("stopped")
    assert stopped is not None and stopped.group("prio") == "6"
