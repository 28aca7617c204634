"""edged.host.systemd.Notifier against a real AF_UNIX datagram socket (what systemd listens on)."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.notify_socket import NotifySocket, notify_socket, parse_message

from edged.host.systemd import Notifier

__all__ = ["notify_socket"]  # the fixture, re-exported so pytest finds it here


@pytest.fixture(params=["path", "abstract"])
def any_socket(request: pytest.FixtureRequest):
    with NotifySocket(abstract=request.param == "abstract") as ns:
        yield ns


def _notifier(ns: NotifySocket, **extra: str) -> Notifier:
    return Notifier.from_env({**ns.env, **extra})


def test_ready_status_stopping_arrive_with_exact_fields(any_socket: NotifySocket) -> None:
    n = _notifier(any_socket)
    assert n.enabled
    assert n.ready()
    assert n.ready("serving 2 models")
    assert n.status("loading digits")
    assert n.stopping()
    assert n.stopping("draining 3 requests")
    raws = [m.raw for m in any_socket.messages]
    assert raws == [
        b"READY=1",
        b"READY=1\nSTATUS=serving 2 models",
        b"STATUS=loading digits",
        b"STOPPING=1",
        b"STOPPING=1\nSTATUS=draining 3 requests",
    ]


def test_messages_come_from_this_process(notify_socket: NotifySocket) -> None:
    """NotifyAccess=main: systemd checks the kernel-attached sender pid."""
    Notifier.from_env(notify_socket.env).watchdog()
    msg = notify_socket.wait_for("WATCHDOG", timeout=2)
    assert msg.pid == os.getpid()
    assert msg.uid == os.getuid()


def test_watchdog_and_trigger(any_socket: NotifySocket) -> None:
    n = _notifier(any_socket)
    assert n.watchdog()
    assert n.notify(WATCHDOG="trigger")  # what a wedged daemon would send (none does yet)
    assert [m.fields for m in any_socket.messages] == [
        {"WATCHDOG": "1"},
        {"WATCHDOG": "trigger"},
    ]


def test_reloading_carries_plausible_monotonic_usec(any_socket: NotifySocket) -> None:
    n = _notifier(any_socket)
    before = time.monotonic_ns() // 1000
    assert n.reloading()
    after = time.monotonic_ns() // 1000
    assert n.ready()
    reloading = any_socket.wait_for("RELOADING", timeout=2)
    assert reloading.fields.keys() == {"RELOADING", "MONOTONIC_USEC"}
    assert reloading["RELOADING"] == "1"
    stamp = int(reloading["MONOTONIC_USEC"])
    assert before <= stamp <= after
    # CLOCK_MONOTONIC, the clock systemd compares against, not wall time:
    clock = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert abs(clock - stamp) < 5_000_000
    assert any_socket.wait_for("READY", timeout=2).fields == {"READY": "1"}


def test_reloading_with_status(notify_socket: NotifySocket) -> None:
    Notifier.from_env(notify_socket.env).reloading("reloading /etc/edged/edged.toml")
    msg = notify_socket.wait_for("RELOADING", timeout=2)
    assert list(msg.fields) == ["RELOADING", "MONOTONIC_USEC", "STATUS"]
    assert msg["STATUS"] == "reloading /etc/edged/edged.toml"


@pytest.mark.parametrize(
    ("seconds", "usec"),
    [(30, "30000000"), (1.5, "1500000"), (0.000001, "1"), (0, "0"), (-3, "0")],
)
def test_extend_timeout(notify_socket: NotifySocket, seconds: float, usec: str) -> None:
    assert Notifier.from_env(notify_socket.env).extend_timeout(seconds)
    assert notify_socket.wait_for("EXTEND_TIMEOUT_USEC", timeout=2).raw == (
        b"EXTEND_TIMEOUT_USEC=" + usec.encode()
    )


def test_raw_notify_keeps_order_and_flattens_newlines(notify_socket: NotifySocket) -> None:
    n = Notifier.from_env(notify_socket.env)
    assert n.notify(STATUS="two\nlines", MAINPID=1234, FDSTORE=True, ERRNO=0)
    assert n.send("BUSERROR=org.example.Failed")
    assert n.send(b"READY=1\n")
    assert not n.notify()  # nothing to send
    raws = [m.raw for m in notify_socket.messages]
    assert raws == [
        b"STATUS=two lines\nMAINPID=1234\nFDSTORE=1\nERRNO=0",
        b"BUSERROR=org.example.Failed",
        b"READY=1\n",
    ]
    assert parse_message(raws[0])["STATUS"] == "two lines"


def test_wait_for_advances_past_previous_match(notify_socket: NotifySocket) -> None:
    n = Notifier.from_env(notify_socket.env)
    n.ready("first")
    n.reloading()
    n.ready("second")
    assert notify_socket.wait_for("READY", timeout=2)["STATUS"] == "first"
    notify_socket.wait_for("RELOADING", timeout=2)
    assert notify_socket.wait_for("READY", timeout=2)["STATUS"] == "second"
    with pytest.raises(TimeoutError, match="READY"):
        notify_socket.wait_for("READY", timeout=0.2)


def test_noop_when_notify_socket_unset() -> None:
    n = Notifier.from_env({})
    assert not n.enabled
    assert n.address is None
    assert not n.ready("x")
    assert not n.watchdog()
    assert not n.reloading()
    assert not n.stopping()
    assert not n.extend_timeout(5)
    assert not n.notify(READY=1)
    assert n.watchdog_interval() is None
    n.close()


def test_noop_when_empty_or_relative(caplog: pytest.LogCaptureFixture) -> None:
    assert not Notifier.from_env({"NOTIFY_SOCKET": ""}).enabled
    with caplog.at_level(logging.WARNING, logger="edged.host.systemd"):
        n = Notifier.from_env({"NOTIFY_SOCKET": "vsock:2:1234"})
    assert not n.enabled
    assert not n.ready()
    assert "vsock:2:1234" in caplog.text


def test_send_error_never_raises_and_logs_once(caplog: pytest.LogCaptureFixture) -> None:
    ns = NotifySocket()
    env = ns.env
    ns.close()  # the socket file is gone: every send fails with ENOENT
    n = Notifier.from_env(env)
    assert n.enabled
    with caplog.at_level(logging.DEBUG, logger="edged.host.systemd"):
        for _ in range(5):
            assert not n.watchdog()
        assert not n.ready()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert env["NOTIFY_SOCKET"] in warnings[0].getMessage()


def test_recovers_when_receiver_comes_back(caplog: pytest.LogCaptureFixture) -> None:
    """Unconnected socket: a receiver recreated at the same path is reached again."""
    with NotifySocket() as ns:
        path = ns.address
        n = Notifier(path)
        assert n.ready()
        ns._sock.close()
        os.unlink(path)
        assert not n.watchdog()
        again = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        again.bind(path)
        try:
            with caplog.at_level(logging.INFO, logger="edged.host.systemd"):
                assert n.watchdog()
            again.settimeout(2)
            assert again.recv(100) == b"WATCHDOG=1"
            assert "accepts messages again" in caplog.text
        finally:
            again.close()


def test_full_receiver_queue_does_not_block_forever(notify_socket: NotifySocket) -> None:
    """systemd not reading (jammed PID 1) must cost at most the send timeout per message."""
    n = Notifier(notify_socket.address, send_timeout=0.05)
    payload = "X" * 60000
    start = time.monotonic()
    results = [n.notify(STATUS=payload) for _ in range(40)]
    elapsed = time.monotonic() - start
    assert results[0]
    assert not all(results)  # the receive queue (net.unix.max_dgram_qlen) filled up
    assert elapsed < 40 * 0.05 + 3


def test_watchdog_interval_is_half_of_watchdog_usec(notify_socket: NotifySocket) -> None:
    n = Notifier.from_env({**notify_socket.env, "WATCHDOG_USEC": "10000000"})
    assert n.watchdog_interval() == pytest.approx(5.0)


def test_watchdog_interval_with_own_pid(notify_socket: NotifySocket) -> None:
    env = {**notify_socket.env, "WATCHDOG_USEC": "3000000", "WATCHDOG_PID": str(os.getpid())}
    assert Notifier.from_env(env).watchdog_interval() == pytest.approx(1.5)


def test_watchdog_interval_none_for_other_pid(notify_socket: NotifySocket) -> None:
    env = {**notify_socket.env, "WATCHDOG_USEC": "3000000", "WATCHDOG_PID": str(os.getpid() + 1)}
    assert Notifier.from_env(env).watchdog_interval() is None


@pytest.mark.parametrize("usec", [None, "", "0", "-5", "abc"])
def test_watchdog_interval_none_when_not_enabled(notify_socket: NotifySocket, usec) -> None:
    env = dict(notify_socket.env)
    if usec is not None:
        env["WATCHDOG_USEC"] = usec
    assert Notifier.from_env(env).watchdog_interval() is None


def test_watchdog_interval_none_without_socket() -> None:
    assert Notifier.from_env({"WATCHDOG_USEC": "10000000"}).watchdog_interval() is None


def test_unset_environment_hides_variables_from_children(
    notify_socket: NotifySocket, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", notify_socket.address)
    monkeypatch.setenv("WATCHDOG_USEC", "4000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    n = Notifier.from_env(unset_environment=True)
    assert n.enabled
    assert n.watchdog_interval() == pytest.approx(2.0)
    for key in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
        assert key not in os.environ
    assert n.ready()
    assert notify_socket.wait_for("READY", timeout=2).pid == os.getpid()


def test_subprocess_via_env_reports_its_own_pid(notify_socket: NotifySocket) -> None:
    """The fixture's intended use: a child gets ``.env`` and we see its pid."""
    code = (
        "from edged.host.systemd import Notifier\n"
        "n = Notifier.from_env()\n"
        "print(n.watchdog_interval())\n"
        "n.ready('child up')\n"
    )
    ns = NotifySocket(watchdog_usec=2_000_000)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, **ns.env},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            cwd=Path(__file__).resolve().parents[1],
        )
        assert proc.stdout.strip() == "1.0"
        msg = ns.wait_for("READY", timeout=5)
        assert msg["STATUS"] == "child up"
        assert msg.pid is not None and msg.pid != os.getpid()
    finally:
        ns.close()
