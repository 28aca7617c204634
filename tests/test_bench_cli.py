"""``edged bench`` against a real daemon, with the in-process ORT comparison."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from support.daemons import Daemon
from support.paths import MODELS, ROOT

from edged.bench.daemon_process import daemon_pid, same_endpoint
from edged.bench.threads import TICK_MS, read_stat
from edged.host.thread_names import name_os_thread

linux_only = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc")


def test_edged_bench_drives_the_daemon_and_reports_ratios(daemon: Daemon,
                                                          tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    p = subprocess.run(
        [sys.executable, "-m", "edged", "bench", "--endpoint", daemon.tcp, "--model", "digits",
         "--clients", "2", "--in-flight", "2", "--duration", "1.5", "--input", "image",
         "--file", str(MODELS / "samples" / "digit7_196.png"),
         "--raw", str(MODELS / "cnn-fp32.onnx"), "--json", str(out),
         "--control", daemon.control],
        capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert "p50 daemon/raw" in p.stdout and "round 1" in p.stderr  # progress shown
    r = json.loads(out.read_text())
    d = r["rounds"][0]["daemon"]
    assert d["ok"] > 10 and d["statuses"] == {"OK": d["ok"]}
    assert 0 < d["p50_ms"] <= d["p90_ms"] <= d["p99_ms"]
    # the daemon runs here: its process tree's CPU per request is printed beside the rest
    assert 0 < d["cpu_ms_per_request"] < 1000 and "ms/request" in p.stdout
    assert r["rounds"][0]["raw"]["best_throughput"] > 0
    assert r["ratios"]["p50 daemon/raw"] > 0
    assert r["machine"]["logical_cpus"] >= 1


def test_edged_bench_names_what_the_daemon_serves(daemon: Daemon) -> None:
    p = subprocess.run([sys.executable, "-m", "edged", "bench", "--endpoint", daemon.tcp,
                        "--model", "nope", "--duration", "1"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 2 and "does not serve 'nope'" in p.stderr and "digits" in p.stderr


THREADS = Path("/proc/self/task").is_dir()  # the floor run also reads its threads' CPU


def test_edged_bench_floor_reports_daemon_raw_and_both_floors(daemon: Daemon,
                                                              tmp_path: Path) -> None:
    """One run: raw ORT, the daemon and the two floor servers, each phase answered (and,
    on Linux, ``--threads``: each server's CPU per reply by thread, side by side)."""
    out = tmp_path / "floor.json"
    p = subprocess.run(
        [sys.executable, "-m", "edged", "bench", "--endpoint", daemon.ipc, "--model", "digits",
         "--floor", "--raw", str(MODELS / "cnn-fp32.onnx"), "--clients", "2",
         "--duration", "1", "--json", str(out), *(["--threads"] if THREADS else [])],
        capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    r = json.loads(out.read_text())
    load = r["machine"]["load_avg"][0]
    assert f"load average {load}" in p.stdout
    assert ("WARNING: load average" in p.stdout) == (load > 0.3)
    rnd = r["rounds"][0]
    for phase, clients in (("daemon_b1", 1), ("floor_b1", 1), ("daemon_n", 2), ("floor_n", 2)):
        d = rnd[phase]
        assert d["clients"] == clients and d["in_flight"] == 1, phase
        assert d["ok"] > 5 and d["statuses"] == {"OK": d["ok"]}, (phase, d)
        assert 0 < d["p50_ms"] <= d["p99_ms"], phase
    assert rnd["raw"]["best_throughput"] > 0
    assert set(r["ratios"]) == {
        "p50 daemon / one-thread floor", "p50 daemon / raw", "p50 one-thread floor / raw",
        "throughput daemon / batching floor", "throughput daemon / raw best",
        "throughput batching floor / raw best"}
    assert all(v > 0 for v in r["ratios"].values()), r["ratios"]
    assert "p50 daemon / one-thread floor" in p.stdout
    if not THREADS:
        return
    cols = r["threads"]["columns"]
    assert list(cols) == ["daemon, 1 client", "one-thread floor", "daemon, 2 clients",
                          "batching floor"]
    for label, key in zip(cols, ("daemon_b1", "floor_b1", "daemon_n", "floor_n"), strict=True):
        check_threads(cols[label], rnd[key], clients=rnd[key]["clients"])
    assert cols["one-thread floor"]["pid"] != cols["batching floor"]["pid"]
    assert cols["daemon, 1 client"]["pid"] == daemon.pid
    for label in ("one-thread floor", "batching floor"):  # one process, one thread serving
        assert not any(k.startswith("model worker") for k in cols[label]["roles"]), label
    assert "model worker digits" in cols["daemon, 2 clients"]["roles"]
    assert all(label in r["threads"]["table"][1] for label in cols)


def test_edged_bench_floor_needs_a_model_file_and_a_raw_tensor(daemon: Daemon) -> None:
    base = [sys.executable, "-m", "edged", "bench", "--endpoint", daemon.tcp, "--model",
            "digits", "--floor", "--duration", "1"]
    p = subprocess.run(base, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 2 and "--floor needs --raw" in p.stderr
    p = subprocess.run([*base, "--raw", str(MODELS / "cnn-fp32.onnx"), "--input", "image",
                        "--file", str(MODELS / "samples" / "digit7_196.png")],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 2 and "the floors take a raw tensor" in p.stderr


def check_threads(col: dict[str, Any], phase: dict[str, Any], clients: int) -> None:
    """A column of ``--threads``: the threads every server has, numbers that add up."""
    roles = col["roles"]
    assert {"main thread", "ZeroMQ I/O"} <= set(roles), roles
    assert roles["main thread"]["threads"] == 1 and roles["ZeroMQ I/O"]["threads"] == 1
    assert col["replies"] == phase["replies"] > 0
    assert sum(v["threads"] for v in roles.values()) == col["threads"]
    for name, v in [*roles.items(), ("process", col["process"]), ("clients", col["clients"])]:
        assert v["user_ms"] >= 0 and v["sys_ms"] >= 0, (name, v)
        assert v["user_ms_per_reply"] == pytest.approx(v["user_ms"] / col["replies"]), name
        assert v["sys_ms_per_reply"] == pytest.approx(v["sys_ms"] / col["replies"]), name
    total = col["process"]["user_ms_per_reply"] + col["process"]["sys_ms_per_reply"]
    assert total > 0
    threads = sum(v["user_ms_per_reply"] + v["sys_ms_per_reply"] for v in roles.values())
    assert threads + col["unattributed_ms"] / col["replies"] == pytest.approx(total)
    # The threads' counters add up to the process's: apart from threads that exited, by no
    # more than each counter's rounding to a clock tick (and what ran while /proc was read).
    slack = (col["threads"] + 3) * TICK_MS
    assert -slack <= col["unattributed_ms"], col
    if col["exited_threads"] == 0:
        assert col["unattributed_ms"] <= slack, col
    assert col["clients"]["processes"] == clients
    assert col["resolution_ms_per_reply"] == pytest.approx(TICK_MS / col["replies"])


@linux_only
def test_edged_bench_threads_reports_cpu_per_reply_by_thread(daemon: Daemon,
                                                             tmp_path: Path) -> None:
    out = tmp_path / "threads.json"
    p = subprocess.run(
        [sys.executable, "-m", "edged", "bench", "--endpoint", daemon.ipc, "--model", "digits",
         "--clients", "2", "--duration", "1.5", "--threads", "--json", str(out),
         "--input", "image", "--file", str(MODELS / "samples" / "digit7_196.png")],
        capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    r = json.loads(out.read_text())
    col = r["threads"]["columns"]["daemon"]
    check_threads(col, r["rounds"][0]["daemon"], clients=2)
    assert col["pid"] == daemon.pid
    assert col["roles"]["model worker digits"]["threads"] == 1  # named by the daemon
    assert 1 <= col["roles"]["decode pool"]["threads"] <= 2  # PNGs decoded off the loop
    assert "ZeroMQ reaper" in col["roles"]
    per_thread = r["rounds"][0]["daemon"]["cpu"]["threads"]
    assert {t["comm"] for t in per_thread} >= {"edged-digits_0", "ZMQbg/IO/0"}
    assert [t["tid"] for t in per_thread if t["role"] == "main thread"] == [daemon.pid]
    table = r["threads"]["table"]
    assert table and "\n".join(table) in p.stdout
    for row in ("main thread", "model worker digits", "ZeroMQ I/O", "process total",
                "clients (all processes)"):
        assert any(line.startswith(row) for line in table), row


@linux_only
def test_edged_bench_threads_finds_the_daemon_by_its_control_socket(daemon: Daemon,
                                                                    tmp_path: Path) -> None:
    base = [sys.executable, "-m", "edged", "bench", "--endpoint", daemon.tcp, "--model",
            "digits", "--duration", "1", "--threads"]
    p = subprocess.run([*base, "--control", f"ipc://{tmp_path}/none.sock"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 2 and f"no control socket at {tmp_path}/none.sock" in p.stderr


def test_a_daemon_endpoint_is_matched_however_the_client_names_it(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    assert same_endpoint(f"ipc://{tmp_path}/run/../run/e.sock", f"ipc://{tmp_path}/run/e.sock")
    assert not same_endpoint(f"ipc://{tmp_path}/a.sock", f"ipc://{tmp_path}/b.sock")
    assert same_endpoint("tcp://127.0.0.1:5555", "tcp://0.0.0.0:5555")
    assert same_endpoint("tcp://127.0.0.1:5555", "tcp://*:5555")
    assert same_endpoint("tcp://localhost:5555", "tcp://127.0.0.1:5555")
    assert not same_endpoint("tcp://127.0.0.1:5556", "tcp://0.0.0.0:5555")
    # 192.0.2.0/24 is reserved for documentation: never an address of this host
    assert not same_endpoint("tcp://192.0.2.7:5555", "tcp://0.0.0.0:5555")
    assert not same_endpoint("tcp://127.0.0.1:5555", "tcp://192.0.2.7:5555")
    assert not same_endpoint(f"ipc://{tmp_path}/a.sock", "tcp://127.0.0.1:5555")


@linux_only
def test_the_pid_comes_from_the_control_socket_of_the_daemon_benched(
        daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    assert daemon_pid(daemon.tcp, daemon.control) == (daemon.pid, None)
    assert daemon_pid(daemon.ipc, None) == (daemon.pid, None)  # control.sock beside it
    other = "tcp://192.0.2.7:5555"  # a daemon elsewhere, reached through this host's port
    pid, note = daemon_pid(other, daemon.control)  # named by hand: trusted, with a warning
    assert pid == daemon.pid and note is not None and f"not {other}" in note
    monkeypatch.setenv("EDGED_CONTROL", daemon.control)  # found, not named: refused
    with pytest.raises(RuntimeError, match="pass the --control of the daemon you bench"):
        daemon_pid(other, None)


def test_a_stat_line_is_read_whatever_the_thread_name_holds(tmp_path: Path) -> None:
    """The name sits in parentheses and may hold spaces and parentheses itself."""
    f = tmp_path / "stat"
    f.write_text("4242 (we) ird (x) R 1 4242 4242 0 -1 4194560 3 0 0 0 "
                 "731 52 0 0 20 0 7 0 1215561 3133440 366 18446744073709551615\n")
    t = read_stat(f)
    assert (t.comm, t.utime, t.stime) == ("we) ird (x", 731, 52)


@linux_only
def test_a_pool_thread_takes_its_python_name_in_the_kernel() -> None:
    def comm() -> str:
        tid = threading.get_native_id()
        return Path(f"/proc/self/task/{tid}/comm").read_text().rstrip("\n")

    with ThreadPoolExecutor(1, thread_name_prefix="edged-a-long-model-name",
                            initializer=name_os_thread) as pool:
        assert pool.submit(comm).result() == "edged-a-long-mo"  # 15 bytes, as Linux keeps
    with ThreadPoolExecutor(1, thread_name_prefix="edged-pre") as pool:
        assert pool.submit(comm).result() != "edged-pre_0"  # not named without it


def test_edged_bench_needs_a_model_unless_it_soaks() -> None:
    p = subprocess.run([sys.executable, "-m", "edged", "bench", "--duration", "1"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 2 and "--model is required" in p.stderr
    p = subprocess.run([sys.executable, "-m", "edged", "bench", "soak", "--help"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 0 and "--max-rss-growth" in p.stdout
