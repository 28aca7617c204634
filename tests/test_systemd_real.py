"""The shipped unit under a real systemd 252 (PID 1 of private namespaces).

``scripts/ops/install --no-pip`` installs edged into the namespace exactly as on a
device (user, /etc/edged/edged.toml, /var/lib/edged/models, the unit in
/usr/local/lib/systemd/system). Adaptations, each for this test machine, not for
the unit (docs/operations.md, "Under a real systemd"):

1. /opt/edged/venv is a symlink to the test's venv (no pip install in a test);
2. a drop-in sets ``PYTHONPATH`` to the tree under test, and, because the test
   venv's base interpreter may live under a home directory (pyenv; hidden by
   ProtectHome=yes), uses ``ProtectHome=tmpfs`` + ``BindReadOnlyPaths=`` its
   ``sys.base_prefix``;
3. the config's ``stall_timeout_s`` is 2 s (30 s shipped) and a "slow" model (a
   real ORT Loop, tests/support/slow_model.py) is added, so a stall is quick to provoke;
4. only when the tree under test is checked out under /tmp or /var/tmp (a CI clone),
   the namespace binds it back over its fresh /tmp (tests/support/systemd_ns.py) and the
   drop-in binds it into the service's private /tmp (``PrivateTmp=yes``).

Then: active (running) only after READY, reload under load with no failed request,
a stalled inference makes the watchdog restart it, stop drains, the hardening
directives do not fail the start, and journald gets the daemon's log lines with
their priorities.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.slow_model import make_slow_model
from support.systemd_ns import NamespaceUnavailable, SystemdNamespace, unavailable

ROOT = Path(__file__).resolve().parent.parent
PY = str(Path(sys.prefix) / "bin" / "python")
CLIENT = str(ROOT / "tests" / "support" / "ns_client.py")
TCP = "tcp://127.0.0.1:5555"
UNIT = "edged.service"

_why = unavailable()
pytestmark = [pytest.mark.skipif(_why is not None, reason=_why or ""),
              pytest.mark.timeout(240)]

DROP_IN = f"""[Service]
# test adaptation 2: the tree under test, and the base interpreter the test venv runs
Environment=PYTHONPATH={ROOT}
ProtectHome=tmpfs
BindReadOnlyPaths={sys.base_prefix}
"""
# test adaptation 4, only for a tree checked out under /tmp or /var/tmp (a CI clone):
# PrivateTmp=yes gives the service its own empty /tmp, so the tree and its venv are bound in.
_HIDDEN = tuple(p for p in {str(ROOT), sys.prefix}
                if p.startswith(("/tmp/", "/var/tmp/")))
if _HIDDEN:
    DROP_IN += "".join(f"BindReadOnlyPaths={p}\n" for p in sorted(_HIDDEN))

SLOW_MODEL = """
[[models]]
name = "slow"
max_batch_size = 1
max_queue = 64
[[models.variants]]
name = "loop"
backend = "onnxruntime"
path = "/var/lib/edged/models/slow.onnx"
[models.variants.options]
threads = 1
"""


def _client(ns: SystemdNamespace, *args: str) -> Any:
    return ns.popen("env", f"PYTHONPATH={ROOT}", PY, CLIENT, *args)


def _result(proc: Any, timeout: float = 90) -> dict[str, Any]:
    out, err = proc.communicate(timeout=timeout)
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, f"client failed: {out}\n{err}"
    return json.loads(lines[-1])


def journal(ns: SystemdNamespace, *args: str) -> list[dict[str, Any]]:
    out = ns.run("journalctl", "--no-pager", "-o", "json", *args).stdout
    return [json.loads(ln) for ln in out.splitlines() if ln.strip()]


def _message(e: dict[str, Any]) -> str:
    m = e.get("MESSAGE", "")
    return bytes(m).decode(errors="replace") if isinstance(m, list) else str(m)


def _wait_state(ns: SystemdNamespace, want: str, timeout: float) -> list[str]:
    """Poll ActiveState/SubState until ActiveState == want; return the states seen."""
    seen: list[str] = []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        s = ns.show(UNIT, "ActiveState", "SubState")
        state = f"{s['ActiveState']} ({s['SubState']})"
        if not seen or seen[-1] != state:
            seen.append(state)
        if s["ActiveState"] == want or s["ActiveState"] == "failed":
            return seen
        time.sleep(0.05)
    raise AssertionError(f"{UNIT} not {want} after {timeout} s; states {seen}")


@pytest.fixture(scope="module")
def ns(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SystemdNamespace]:
    work = tmp_path_factory.mktemp("systemd-ns")
    slow = make_slow_model(work / "slow.onnx", 2000).read_bytes()
    n = SystemdNamespace(work / "ns")
    try:
        try:
            n.start()
        except NamespaceUnavailable as e:
            pytest.skip(f"cannot set up the namespace here: {e}")
        n.run(str(ROOT / "scripts" / "ops" / "install"), "--no-pip", "--no-jetson", timeout=120)
        n.run("ln", "-sfn", sys.prefix, "/opt/edged/venv")  # adaptation 1
        n.run("sh", "-c", "cat > /var/lib/edged/models/slow.onnx", input=slow)
        n.run("chown", "edged:edged", "/var/lib/edged/models/slow.onnx")
        n.run("sed", "-i", "s/^stall_timeout_s = .*/stall_timeout_s = 2.0/",
              "/etc/edged/edged.toml")  # adaptation 3
        n.run("sh", "-c", "cat >> /etc/edged/edged.toml", input=SLOW_MODEL)
        n.run("mkdir", "-p", "/etc/systemd/system/edged.service.d")
        n.run("sh", "-c", "cat > /etc/systemd/system/edged.service.d/50-test.conf",
              input=DROP_IN)
        n.run("systemctl", "daemon-reload")
        yield n
    finally:
        if n.pid:  # kept beside the overlays for a failed run's post-mortem
            (n.workdir / "journal.txt").write_text(
                n.run("journalctl", "-b", "--no-pager", check=False).stdout)
        n.stop()


def test_active_running_only_after_ready(ns: SystemdNamespace) -> None:
    ns.run("systemctl", "start", "--no-block", UNIT)
    states = _wait_state(ns, "active", 90)
    if states[-1] != "active (running)":
        dump = ns.workdir / "journal.txt"
        dump.write_text(ns.run("journalctl", "-b", "--no-pager", check=False).stdout)
        raise AssertionError(f"{UNIT}: states {states}; journal in {dump}")
    assert states[0] == "activating (start)", states  # the model load was seen in progress
    health = _result(_client(ns, "load", TCP, "0.3"))  # answered at once after active
    assert health["statuses"].get("OK", 0) > 0 and set(health["statuses"]) == {"OK"}, health
    # systemd logs "Starting" before it forks and "Started" when READY=1 arrives; the
    # daemon reports how long it took from its own start to READY. (The daemon's
    # "ready" line itself may be stamped after "Started": journald reads the
    # service's stdout stream asynchronously.)
    entries = journal(ns, "-b", "-u", UNIT)
    ready = [e for e in entries if _message(e).startswith("edged.server: ready models=")]
    starting = [e for e in entries if _message(e).startswith("Starting")]
    started = [e for e in entries if _message(e).startswith("Started")]
    assert ready and starting and started, [_message(e) for e in entries]
    startup_us = float(_message(ready[0]).rsplit("startup_ms=", 1)[1]) * 1000
    gap_us = int(started[0]["__REALTIME_TIMESTAMP"]) - int(starting[0]["__REALTIME_TIMESTAMP"])
    assert gap_us >= startup_us > 100_000, (gap_us, startup_us)
    main = ns.show(UNIT, "MainPID", "Type", "NotifyAccess", "WatchdogUSec")
    assert main["Type"] == "notify" and int(main["MainPID"]) > 0
    assert main["WatchdogUSec"] == "10s"


def test_no_hardening_directive_fails_the_start(ns: SystemdNamespace) -> None:
    unit_log = [_message(e) for e in journal(ns, "-b", "-u", UNIT)]
    failures = [m for m in unit_log if "Failed to" in m or "Failed at step" in m
                or "failed with result" in m]
    assert not failures, failures
    assert any(m.startswith("edged.server: ready") for m in unit_log)
    # Nothing in the unit or its drop-ins was ignored or refused when systemd parsed it.
    parsing = [m for m in map(_message, journal(ns, "-b", "_PID=1"))
               if "edged.service" in m and any(w in m for w in
                                               ("Unknown", "ignoring", "Ignoring", "invalid"))]
    assert not parsing, parsing
    s = ns.show(UNIT, "NoNewPrivileges", "ProtectSystem", "PrivateDevices", "PrivateUsers",
                "MemoryDenyWriteExecute", "SystemCallFilter", "RestrictAddressFamilies")
    assert s["NoNewPrivileges"] == "yes" and s["ProtectSystem"] == "strict"
    assert s["PrivateDevices"] == "yes" and s["PrivateUsers"] == "yes"
    assert s["MemoryDenyWriteExecute"] == "yes" and s["SystemCallFilter"]
    # The service really runs as the static user, with no capabilities.
    pid = ns.show(UNIT, "MainPID")["MainPID"]
    status = ns.run("cat", f"/proc/{pid}/status").stdout
    uid = ns.run("id", "-u", "edged").stdout.strip()
    assert f"Uid:\t{uid}\t{uid}\t{uid}\t{uid}" in status, status
    assert "CapEff:\t0000000000000000" in status and "NoNewPrivs:\t1" in status


def test_reload_under_load_fails_no_request(ns: SystemdNamespace) -> None:
    client = _client(ns, "load", TCP, "6")
    assert client.stdout is not None
    assert json.loads(client.stdout.readline()).get("started")
    pid = ns.show(UNIT, "MainPID")["MainPID"]
    for _ in range(2):
        time.sleep(1.5)
        ns.run("systemctl", "reload", UNIT)
    res = _result(client)
    assert set(res["statuses"]) == {"OK"} and res["statuses"]["OK"] > 50, res
    assert ns.show(UNIT, "MainPID")["MainPID"] == pid  # reloaded, not restarted
    done = [m for m in map(_message, journal(ns, "-b", "-u", UNIT))
            if m.startswith("edged.server: reload done")]
    assert len(done) >= 2, done


def test_stalled_inference_makes_the_watchdog_restart_it(ns: SystemdNamespace) -> None:
    before = ns.show(UNIT, "MainPID", "NRestarts")
    hang = _client(ns, "slow", TCP, "1", "1e9")  # a Loop of ~1e9 steps: hangs the worker
    end = time.monotonic() + 60
    after = before
    while time.monotonic() < end:
        after = ns.show(UNIT, "MainPID", "NRestarts", "ActiveState")
        if int(after["NRestarts"]) > int(before["NRestarts"]) and after["ActiveState"] == "active":
            break
        time.sleep(0.5)
    hang.kill()
    assert int(after["NRestarts"]) == int(before["NRestarts"]) + 1, after
    assert after["MainPID"] != before["MainPID"]
    _wait_state(ns, "active", 60)
    msgs = [_message(e) for e in journal(ns, "-b", "-u", UNIT)]
    assert any("Watchdog timeout" in m for m in msgs), msgs[-30:]
    assert any("watchdog: no progress on model(s) slow" in m for m in msgs), msgs[-30:]
    res = _result(_client(ns, "load", TCP, "0.3"))
    assert set(res["statuses"]) == {"OK"}, res


def test_stop_drains_queued_requests(ns: SystemdNamespace) -> None:
    _wait_state(ns, "active", 60)
    # Six requests of ~0.25 s each here (3e4 extra Loop steps), so some are still
    # queued when the stop arrives, and all fit well within drain_timeout_s (10 s).
    client = _client(ns, "slow", TCP, "6", "3e4")
    assert client.stdout is not None
    assert json.loads(client.stdout.readline()).get("sent") == 6
    time.sleep(0.1)
    ns.run("systemctl", "stop", UNIT, timeout=60)
    res = _result(client)
    assert res["statuses"] == {"OK": 6}, res
    s = ns.show(UNIT, "ActiveState", "Result", "ExecMainStatus")
    assert s["ActiveState"] == "inactive" and s["Result"] == "success", s
    msgs = [_message(e) for e in journal(ns, "-b", "-u", UNIT)]
    draining = [m for m in msgs if m.startswith("edged.server: draining")]
    assert draining and int(draining[-1].rsplit("queued=", 1)[1]) >= 1, draining
    assert any(m.startswith("edged.server: stopped answered=") for m in msgs)


def test_journald_gets_priorities_and_one_event_per_line(ns: SystemdNamespace) -> None:
    """edged/host/logs.py: under systemd each line is ``<N>logger: event key=value ...``;
    journald turns ``<N>`` into PRIORITY and keeps the rest as MESSAGE."""
    entries = [e for e in journal(ns, "-b", "-u", UNIT) if e.get("_COMM") != "systemd"
               and e.get("_PID") != "1" and e.get("SYSLOG_IDENTIFIER") != "systemd"]
    daemon = [e for e in entries if _message(e).startswith("edged.")]
    assert len(daemon) > 10
    for e in daemon:
        m = _message(e)
        assert "\n" not in m and not m.startswith("<"), m
        assert e["PRIORITY"] in {"2", "3", "4", "6", "7"}, e
    by_prio = {e["PRIORITY"] for e in daemon}
    assert {"6", "3"} <= by_prio, by_prio  # info, and the watchdog's error line
    ready = next(_message(e) for e in daemon if "ready models=" in _message(e))
    assert "models=digits,person,slow" in ready and "startup_ms=" in ready
    err = next(e for e in daemon if "watchdog: no progress" in _message(e))
    assert err["PRIORITY"] == "3"
    assert all(e.get("_TRANSPORT") == "stdout" for e in daemon)
