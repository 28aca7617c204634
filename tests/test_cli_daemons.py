"""The ``edged`` command against two real daemons: which one each command talks to, and
replies a person reads.

Two daemons run side by side, each with its runtime directory where a daemon puts one
when nothing names it (``$TMPDIR/edged-*``), as two ``edged serve`` started by hand
would. Every command is run as the user types it (a subprocess of ``edged``), with a
``TMPDIR`` that holds those two directories and nothing else:

- no flag: refused, naming both daemons and the flag that picks one;
- ``--config``, ``--control``, ``--endpoint`` or ``EDGED_*``: that daemon, silently;
- one daemon running (a stale socket of a dead one beside it): used, and said so;
- ``status`` lists every listener (native, Frigate, KServe) in columns and says why a
  model is below its top rung (the swap budget after ``ctl level auto``);
- ``health`` is one line, ``ctl`` actions one line each, ``--json`` the reply;
- a closed pipe and Ctrl-C end without a traceback.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.configs import digits_config, model_table, variant
from support.daemons import Daemon, free_port
from support.governor import LEVELS
from support.paths import ROOT
from support.waits import wait_until

from edged.cli import main as cli
from edged.cli.requests import health_line

DET = ROOT / "models" / "digits-det"


def _start(tmp: Path, name: str, config: Path) -> tuple[Daemon, Path]:
    """A daemon whose runtime directory is ``TMPDIR/edged-NAME`` (its control socket
    there, found as a daemon started without --runtime-dir would be)."""
    runtime = tmp / f"edged-{name}"
    work = tmp / f"work-{name}"
    (work / "run").mkdir(parents=True)  # the harness's own ipc endpoint lives there
    d = Daemon(config, work, args=("--runtime-dir", str(runtime)))
    d.control = f"ipc://{runtime}/control.sock"
    return d, runtime


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("pair")
    (tmp / "a").mkdir()
    (tmp / "b").mkdir()
    sysfs = tmp / "empty-sysfs"
    sysfs.mkdir()
    grpc, http = free_port(), free_port()
    det = model_table("digits-det", [variant("det-fp32", DET / "det-fp32.onnx")],
                      preprocess={"color": "rgb", "width": 160, "height": 160},
                      extra='[models.postprocess]\nkind = "detect"\ndecoder = "yolov8"\n')
    a_cfg = digits_config(tmp / "a", extra_models=det, server=f"""
[[server.frigate]]
endpoint = "tcp://127.0.0.1:{free_port()}"
model = "digits-det"

[server.kserve]
grpc = "127.0.0.1:{grpc}"
http = "127.0.0.1:{http}"
""", governor=f"""
[governor]
enabled = true
sysfs_root = "{sysfs}"
interval_s = 0.2
swap_min_interval_s = 600
{LEVELS}
""")
    b_cfg = digits_config(tmp / "b", variants=("small-fp32",))
    a, a_run = _start(tmp, "a", a_cfg)
    b, b_run = _start(tmp, "b", b_cfg)
    try:
        yield {"tmp": tmp, "a": a, "b": b, "a_cfg": a_cfg, "b_cfg": b_cfg,
               "a_control": f"ipc://{a_run}/control.sock",
               "b_control": f"ipc://{b_run}/control.sock", "kserve": (grpc, http)}
    finally:
        a.stop()
        b.stop()


def edged(tmpdir: Path, *args: str, env: dict[str, str] | None = None,
          timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``edged ARGS`` as a user runs it, seeing only the daemons under ``tmpdir``."""
    e = {k: v for k, v in os.environ.items()
         if k not in ("XDG_RUNTIME_DIR", "RUNTIME_DIRECTORY", "EDGED_CONTROL", "EDGED_ENDPOINT")}
    e.update(TMPDIR=str(tmpdir), PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run([sys.executable, "-m", "edged", *args], capture_output=True,
                          text=True, env=e, timeout=timeout, cwd=str(tmpdir))


def test_two_daemons_are_never_guessed_between(pair: dict[str, Any]) -> None:
    for cmd, flag in ((["status"], "--control"), (["health"], "--endpoint"),
                      (["models"], "--endpoint"), (["ctl", "reload"], "--control")):
        r = edged(pair["tmp"], *cmd)
        assert r.returncode == 2, (cmd, r.stdout, r.stderr)
        assert "2 daemons are running" in r.stderr, r.stderr
        assert pair["a_control"] in r.stderr and pair["b_control"] in r.stderr
        assert flag in r.stderr and str(pair["a_cfg"]) in r.stderr
        assert "Traceback" not in r.stderr


def test_control_client_refuses_to_guess_between_two(pair: dict[str, Any],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """``ControlClient()`` with no endpoint, as a Python script on the device writes it:
    two daemons answer, so it names both instead of talking to the newest."""
    import tempfile

    from edged.client import ControlClient
    from edged.client.discover import Ambiguous

    if Path("/run/edged/control.sock").exists():
        pytest.skip("a system daemon's control socket exists on this machine")
    for k in ("EDGED_CONTROL", "RUNTIME_DIRECTORY", "XDG_RUNTIME_DIR"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("TMPDIR", str(pair["tmp"]))
    monkeypatch.setattr(tempfile, "tempdir", None)
    with pytest.raises(Ambiguous) as e:
        ControlClient()
    assert pair["a_control"] in str(e.value) and pair["b_control"] in str(e.value)
    assert "--control" in str(e.value)


def test_a_refused_request_is_a_sentence(pair: dict[str, Any]) -> None:
    image = next((ROOT / "models" / "digits" / "samples").glob("*.png"))
    r = edged(pair["tmp"], "infer", "digit", str(image), "--endpoint", pair["b"].tcp)
    assert r.returncode == 1 and r.stdout == "", r.stdout
    line = r.stderr.strip()
    assert line.startswith("edged: the daemon refused (NOT_FOUND): ") and "{" not in line
    assert "edged models" in line and len(line.splitlines()) == 1, line
    r = edged(pair["tmp"], "ctl", "swap", "digits", "no-such-variant", "--control",
              pair["b_control"])
    assert r.returncode == 1 and "the daemon refused (" in r.stderr and "{" not in r.stderr


def test_bench_finds_its_daemon_the_same_way(pair: dict[str, Any]) -> None:
    r = edged(pair["tmp"], "bench", "--model", "digits", "--duration", "0.5")
    assert r.returncode == 2 and "2 daemons are running" in r.stderr, r.stderr
    assert "--endpoint ENDPOINT" in r.stderr
    r = edged(pair["tmp"], "bench", "--model", "digits", "--duration", "0.5",
              env={"EDGED_ENDPOINT": pair["b"].tcp})
    assert r.returncode == 0 and "talking to" not in r.stderr, r.stderr


def test_the_config_picks_one_and_every_command_reaches_the_same_daemon(
        pair: dict[str, Any]) -> None:
    tmp, a = pair["tmp"], pair["a"]
    st = edged(tmp, "status", "--config", str(pair["a_cfg"]), "--json")
    assert st.returncode == 0, st.stderr
    import json

    assert json.loads(st.stdout)["pid"] == a.pid
    assert f"talking to {pair['a_control']} (the daemon serving {pair['a_cfg']}" in st.stderr
    health = edged(tmp, "health", "--config", str(pair["a_cfg"]), "--json")
    assert health.returncode == 0 and "OK" in health.stdout
    assert f"pid {a.pid}" in health.stderr and "--endpoint picks another" in health.stderr
    models = edged(tmp, "models", "--config", str(pair["b_cfg"]))
    assert models.returncode == 0, models.stderr
    assert models.stdout.splitlines()[1].split()[:3] == ["digits", "ready", "small-fp32"]
    assert f"pid {pair['b'].pid}" in models.stderr


def test_named_daemons_are_used_without_a_word(pair: dict[str, Any]) -> None:
    tmp = pair["tmp"]
    r = edged(tmp, "health", "--control", pair["b_control"])
    assert (r.returncode, r.stdout, r.stderr) == (0, "OK\n", "")
    r = edged(tmp, "health", "--endpoint", pair["a"].tcp)
    assert (r.returncode, r.stdout, r.stderr) == (0, "OK\n", "")
    r = edged(tmp, "status", env={"EDGED_CONTROL": pair["a_control"]})
    assert r.returncode == 0 and r.stderr == "" and f"pid {pair['a'].pid}" in r.stdout
    r = edged(tmp, "models", env={"EDGED_ENDPOINT": pair["b"].tcp})
    assert r.returncode == 0 and r.stderr == "" and "small-fp32" in r.stdout


def test_the_one_running_daemon_is_used_and_named(pair: dict[str, Any], tmp_path: Path) -> None:
    """A TMPDIR with daemon A's runtime directory and a dead daemon's socket file."""
    os.symlink(pair["tmp"] / "edged-a", tmp_path / "edged-a")
    dead = tmp_path / "edged-dead"
    dead.mkdir(mode=0o750)
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(dead / "control.sock"))  # a socket file nothing listens on
    s.close()
    r = edged(tmp_path, "health")
    assert r.returncode == 0 and r.stdout == "OK\n", r.stderr
    assert "the only running daemon" in r.stderr and f"pid {pair['a'].pid}" in r.stderr
    r = edged(tmp_path, "status")
    assert r.returncode == 0 and f"talking to ipc://{tmp_path}/edged-a/control.sock" in r.stderr
    empty = tmp_path / "none"
    empty.mkdir()
    r = edged(empty, "status")
    assert r.returncode == 3 and "no running daemon found" in r.stderr


def test_status_lists_every_listener_in_columns(pair: dict[str, Any]) -> None:
    r = edged(pair["tmp"], "status", "--control", pair["a_control"])
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("LISTENER"))
    rows = lines[head + 1:head + 6]
    grpc, http = pair["kserve"]
    assert [row.split()[0] for row in rows] == ["native", "native", "frigate", "kserve-grpc",
                                                "kserve-http"], r.stdout
    assert f"127.0.0.1:{grpc}" in rows[3] and f"127.0.0.1:{http}" in rows[4]
    assert rows[2].split()[-1] == "digits-det"
    # Columns never run together: each row's SERVES cell starts under the header's, after
    # a gap, however long the address before it.
    col = lines[head].index("SERVES")
    assert all(row[col - 2:col] == "  " and row[col] != " " for row in rows), rows
    model = next(ln for ln in lines if ln.startswith("digits-det"))
    assert model.split()[:2] == ["digits-det", "ready"]
    assert "artifact: " in r.stdout and "sha256 " in r.stdout


def test_ctl_actions_answer_in_one_line_and_status_says_why_below_the_top(
        pair: dict[str, Any]) -> None:
    tmp, control = pair["tmp"], ["--control", pair["a_control"]]
    r = edged(tmp, "ctl", "level", "hot", *control)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("level hot (pinned by operator"), r.stdout
    assert len(r.stdout.splitlines()) == 1
    wait_until(lambda: pair["a"].ctl({"op": "status"})["models"][0]["active_variant"]
               == "small-fp32", 30, "digits on its lightest rung")
    r = edged(tmp, "ctl", "level", "auto", *control)
    assert r.returncode == 0 and r.stdout.startswith("level normal (automatic)"), r.stdout
    st = edged(tmp, "status", *control).stdout
    why = next(ln for ln in st.splitlines() if "below its top rung" in ln)
    assert "swap budget: level normal wants 0 step(s) down, 2 applied" in why, st
    assert "steps back one rung in" in why
    # The swap budget still holds the lightest rung: the pin says it waits for it.
    r = edged(tmp, "ctl", "swap", "digits", "cnn-int8", *control)
    assert r.returncode == 0 and r.stdout.splitlines() == [
        "digits: small-fp32 serves (pinned by operator); governor level normal needs at "
        "least small-fp32; the pin applies when it relaxes"], r.stdout
    # The daemon's options go before the action too, as operators' scripts write them.
    r = edged(tmp, "ctl", *control, "--timeout", "30", "swap", "digits", "auto", "--json")
    assert r.returncode == 0 and r.stdout.lstrip().startswith("{")
    r = edged(tmp, "ctl", "reload", *control)
    assert r.stdout == "reload: nothing changed" + r.stdout[len("reload: nothing changed"):]
    assert len(r.stdout.splitlines()) == 1
    r = edged(tmp, "ctl", "level", "scorching", *control)
    assert r.returncode == 1 and "scorching" in r.stderr and "Traceback" not in r.stderr


def test_health_is_one_line() -> None:
    assert health_line({"status": "OK", "models": {"digits": "ready"}}) == "OK"
    line = health_line({"status": "UNAVAILABLE", "state": "starting",
                        "models": {"digits": "ready", "person": "loading"}})
    assert line == "NOT READY: daemon starting; not ready: person loading"


def test_a_closed_pipe_ends_quietly(pair: dict[str, Any]) -> None:
    """``edged models | head``: the reader is gone before the command writes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGED_")}
    env.update(PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-m", "edged", "ctl", "status", "--control",
                          pair["a_control"]], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(60) == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err

    class Closed(io.StringIO):
        def write(self, s: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    real = sys.stdout
    fake = Closed()
    fake.fileno = real.fileno  # type: ignore[method-assign]
    try:
        sys.stdout = fake
        code = cli.main(["models", "--endpoint", pair["a"].tcp])
    finally:
        sys.stdout = real
    assert code == 141


def test_ctrl_c_ends_quietly(tmp_path: Path) -> None:
    if shutil.which("true") is None:  # pragma: no cover - any Linux has it
        pytest.skip("no coreutils")
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGED_")}
    env.update(PYTHONPATH=str(ROOT))
    # A port that takes the connection and never answers: the command waits for its
    # timeout (a port nothing listens on is refused at once: no daemon there).
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen(8)
        port = mute.getsockname()[1]
        # SIGINT as a terminal's Ctrl-C finds it: a shell without job control starts
        # background commands with SIGINT ignored, and so would this child be (CI under
        # `nohup ... &`): Python then installs no KeyboardInterrupt handler.
        p = subprocess.Popen([sys.executable, "-m", "edged", "health", "--endpoint",
                              f"tcp://127.0.0.1:{port}", "--timeout", "60"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        mute.settimeout(120)
        peer, _ = mute.accept()  # connected: imported and waiting for the reply (however
        with peer:               # long the imports took on a busy machine)
            time.sleep(0.2)
            p.send_signal(signal.SIGINT)
            _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert b"Traceback" not in err
