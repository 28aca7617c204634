"""CURVE on the inference endpoints, the network-exposure guard and ipc permissions.

Real daemon, real sockets, real keys written by `edged keys generate`. CURVE covers
the daemon's tcp:// endpoints; ipc:// endpoints rely on file permissions, so the
tests wait for readiness and read status over ipc and the control socket.

ZAP authenticates a peer once, at the CURVE handshake. Adding or revoking a key
(`edged ctl reload`) therefore applies to *new* connections; a connection that was
already authenticated stays up until it disconnects (docs/security.md).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zmq
import zmq.auth
from support.configs import digits_config
from support.daemons import Daemon, free_port
from support.digits import VAL, run_edged, tensor
from support.paths import ROOT

from edged.client import Client, ClientTimeout, build_infer


class Keys:
    """Server and client certificates made by the real CLI."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.server_dir = root / "server"
        self.issued = root / "issued"  # every client key pair ever made
        self.clients_dir = root / "clients"  # the allow-list the daemon reads
        self.clients_dir.mkdir(parents=True)
        r = run_edged("keys", "generate", "server", "--dir", str(self.server_dir))
        assert r.returncode == 0, r.stderr
        for name in ("alice", "bob", "mallory"):
            r = run_edged("keys", "generate", name, "--dir", str(self.issued))
            assert r.returncode == 0, r.stderr
        assert stat.S_IMODE((self.server_dir / "server.key_secret").stat().st_mode) == 0o600

    @property
    def server_public(self) -> Path:
        return self.server_dir / "server.key"

    @property
    def server_secret(self) -> Path:
        return self.server_dir / "server.key_secret"

    def allow(self, name: str) -> None:
        shutil.copy(self.issued / f"{name}.key", self.clients_dir / f"{name}.key")

    def revoke(self, name: str) -> None:
        (self.clients_dir / f"{name}.key").unlink()

    def client(self, endpoint: str, name: str, timeout_s: float = 10.0) -> Client:
        return Client(endpoint, timeout_s=timeout_s, server_public_key=self.server_public,
                      client_secret_key=self.issued / f"{name}.key_secret",
                      context=zmq.Context.instance())


def wait_ready_ipc(d: Daemon, timeout: float = 60.0) -> None:
    """Daemon.wait_ready over ipc: plain tcp is refused by CURVE, ipc has no CURVE."""
    d.wait_ready(timeout, endpoint=d.ipc)


def answered(d: Daemon) -> int:
    return int(d.ctl({"op": "status"})["answered"])


def served(keys: Keys, d: Daemon, name: str, timeout_s: float = 5.0) -> bool:
    """A fresh CURVE connection as ``name``: is a real inference answered correctly?"""
    with keys.client(d.tcp, name, timeout_s=timeout_s) as c:
        # A refused handshake leaves the DEALER without a peer; Client bounds send() itself
        # (test_client_with_a_refused_key_times_out_instead_of_hanging): belt and braces.
        c.sock.setsockopt(zmq.SNDTIMEO, int(timeout_s * 1000))
        try:
            r = c.infer("digits", tensor(0))
        except (ClientTimeout, zmq.Again):
            return False
    assert r.ok, r.header
    assert int(np.argmax(r.outputs["logits"])) == int(VAL["y"][0])
    return True


def silent(endpoint: str, frames: list[bytes], timeout_s: float = 1.5,
           setup: Any = None) -> bool:
    """Send ``frames`` from a fresh DEALER; True if nothing at all came back."""
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    if setup is not None:
        setup(s)
    s.setsockopt(zmq.SNDTIMEO, int(timeout_s * 1000))
    s.connect(endpoint)
    try:
        try:
            s.send_multipart(frames)
        except zmq.Again:  # no connection came up at all: nothing was sent or answered
            return True
        return not s.poll(int(timeout_s * 1000))
    finally:
        s.close()


def infer_frames(rid: str) -> list[bytes]:
    h, f = build_infer("digits", tensor(1), id=rid)
    return [json.dumps({"v": 1, **h}).encode(), *[bytes(x) for x in f]]


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    return Keys(tmp_path / "keys")


def curve_config(tmp: Path, keys: Keys) -> Path:
    return digits_config(tmp, variants=("cnn-fp32",), server=f"""
[server.curve]
server_secret_key = "{keys.server_secret}"
clients_dir = "{keys.clients_dir}"
""")


@pytest.fixture
def curve_daemon(make_daemon: Any, tmp_path: Path, keys: Keys) -> Daemon:
    keys.allow("alice")
    d: Daemon = make_daemon(curve_config(tmp_path, keys), wait=False)
    wait_ready_ipc(d)
    return d


# -- who is served ----------------------------------------------------------------------

def test_allowed_client_is_served_over_curve(curve_daemon: Daemon, keys: Keys) -> None:
    assert served(keys, curve_daemon, "alice")
    with keys.client(curve_daemon.tcp, "alice") as c:
        assert c.health().ok
    # ipc is not CURVE: file permissions guard it, and it keeps working.
    with curve_daemon.client(curve_daemon.ipc) as c:
        assert c.infer("digits", tensor(0)).ok


def test_unknown_key_and_plain_clients_get_nothing(curve_daemon: Daemon, keys: Keys) -> None:
    d = curve_daemon
    before = answered(d)
    # A client whose public key is not in clients_dir.
    assert not served(keys, d, "mallory", timeout_s=1.5)
    # No CURVE at all: a plain DEALER, valid and malformed requests alike.
    assert silent(d.tcp, infer_frames("plain-1"))
    assert silent(d.tcp, [b"{not json"])
    # CURVE with an allowed client key pair but the wrong server key: no handshake.
    wrong_server = keys.issued / "bob.key"

    def wrong_server_key(s: zmq.Socket[Any]) -> None:
        pub, sec = zmq.auth.load_certificate(str(keys.issued / "alice.key_secret"))
        s.curve_serverkey = zmq.auth.load_certificate(str(wrong_server))[0]
        s.curve_publickey, s.curve_secretkey = pub, sec

    assert silent(d.tcp, infer_frames("wrong-server"), setup=wrong_server_key)
    # Raw bytes that are not even ZMTP.
    with socket.create_connection(("127.0.0.1", d.port), timeout=2) as raw:
        raw.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + os.urandom(512))
        raw.settimeout(1.0)
        try:
            data = raw.recv(4096)
        except (TimeoutError, ConnectionResetError):
            data = b""
        assert b"status" not in data
    # None of it reached the request handler: the daemon answered nothing new...
    assert answered(d) == before
    # ...and it still serves the allowed client.
    assert served(keys, d, "alice")
    assert d.proc.poll() is None


def test_reload_adds_and_revokes_client_keys(curve_daemon: Daemon, keys: Keys) -> None:
    d = curve_daemon
    assert not served(keys, d, "bob", timeout_s=1.5)

    # Add bob: copy his public key in, reload over the control socket.
    keys.allow("bob")
    r = d.ctl({"op": "reload"})
    assert r["status"] == "OK", r
    assert served(keys, d, "bob")

    # Keep an authenticated alice connection open across her revocation.
    existing = keys.client(d.tcp, "alice")
    try:
        assert existing.infer("digits", tensor(2)).ok
        keys.revoke("alice")
        r = d.ctl({"op": "reload"})
        assert r["status"] == "OK", r
        # New connections are refused from now on...
        assert not served(keys, d, "alice", timeout_s=1.5)
        # ...while the connection authenticated before the reload persists until it
        # reconnects (ZAP runs once per handshake; documented in docs/security.md).
        assert existing.infer("digits", tensor(3)).ok
    finally:
        existing.close()
    # Bob was untouched by alice's revocation.
    assert served(keys, d, "bob")


REFUSED_CLIENT = """
import sys, time
from edged.client import Client, ClientTimeout
ep, server, key = sys.argv[1:4]
for _ in range(6):
    c = Client(ep, timeout_s=0.5, server_public_key=server, client_secret_key=key)
    time.sleep(0.3)  # the daemon refuses the handshake meanwhile
    try:
        c.health()
    except ClientTimeout:
        pass
    c.close()
print("all timed out cleanly")
"""


def test_client_with_a_refused_key_times_out_instead_of_hanging(curve_daemon: Daemon,
                                                                 keys: Keys) -> None:
    try:
        r = subprocess.run([sys.executable, "-c", REFUSED_CLIENT, curve_daemon.tcp,
                            str(keys.server_public), str(keys.issued / "mallory.key_secret")],
                           capture_output=True, text=True, timeout=10, cwd=str(ROOT))
    except subprocess.TimeoutExpired:
        pytest.fail("Client blocked in send() after a refused CURVE handshake")
    assert "all timed out cleanly" in r.stdout, r.stderr


def test_reload_with_an_emptied_client_dir_locks_everyone_out(curve_daemon: Daemon,
                                                               keys: Keys) -> None:
    d = curve_daemon
    keys.revoke("alice")
    assert d.ctl({"op": "reload"})["status"] == "OK"
    assert not served(keys, d, "alice", timeout_s=1.5)
    with d.client(d.ipc) as c:  # the local ipc endpoint still serves
        assert c.health().ok


def test_turning_curve_on_by_reload_is_not_silently_ignored(make_daemon: Any, tmp_path: Path,
                                                            keys: Keys) -> None:
    d: Daemon = make_daemon(digits_config(tmp_path, variants=("cnn-fp32",)))
    with d.client() as c:
        assert c.health().ok  # plain tcp, no CURVE yet
    curve_config(tmp_path, keys)  # rewrites the same config file, now with [server.curve]
    r = d.ctl({"op": "reload"})
    if r["status"] == "OK":
        with d.client(timeout_s=1.5) as c:
            try:
                plain_served = c.health().ok
            except ClientTimeout:
                plain_served = False
        assert not plain_served, "reload said OK, yet plain clients are still served"
    else:
        assert "restart" in r.get("error", ""), r


# -- the network-exposure guard ------------------------------------------------------------

def serve_args(config: Path, tmp: Path, *endpoints: str) -> list[str]:
    run = tmp / "run"
    args = ["serve", "--config", str(config), "--runtime-dir", str(run),
            "--control", f"ipc://{run}/control.sock", "--metrics", "off"]
    for e in endpoints:
        args += ["--endpoint", e]
    return args


@pytest.mark.parametrize("host", ["0.0.0.0", "*", "[::]"])
def test_network_endpoint_without_curve_refuses_to_start(tmp_path: Path, host: str) -> None:
    cfg = digits_config(tmp_path, variants=("cnn-fp32",))
    ep = f"tcp://{host}:{free_port()}"
    r = run_edged(*serve_args(cfg, tmp_path, ep), timeout=60)
    assert r.returncode == 1, (r.returncode, r.stderr)
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("edged: cannot start: endpoint " + ep), r.stderr
    assert "CURVE" in last and "insecure = true" in last
    assert "Traceback" not in r.stderr
    # It refused before loading models or binding anything.
    assert "model loaded" not in r.stderr


def test_insecure_true_starts_on_a_network_endpoint_with_a_warning(tmp_path: Path) -> None:
    cfg = digits_config(tmp_path, variants=("cnn-fp32",), server="insecure = true")
    port = free_port()
    run = tmp_path / "run"
    log_path = tmp_path / "insecure.log"
    env = dict(os.environ)
    env.pop("NOTIFY_SOCKET", None)
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "edged",
             *serve_args(cfg, tmp_path, f"ipc://{run}/edged.sock", f"tcp://0.0.0.0:{port}")],
            stdout=log, stderr=subprocess.STDOUT, cwd=str(ROOT), env=env)
    try:
        with Client(f"tcp://127.0.0.1:{port}", timeout_s=1.0) as c:
            end = time.monotonic() + 60
            ok = False
            while time.monotonic() < end and not ok:
                assert proc.poll() is None, log_path.read_text()
                try:
                    ok = c.health().ok
                except ClientTimeout:
                    time.sleep(0.1)
            assert ok, log_path.read_text()
            assert c.infer("digits", tensor(0)).ok  # unauthenticated, as asked
        text = log_path.read_text()
        warn = [ln for ln in text.splitlines() if "WARNING" in ln and "insecure" in ln]
        assert warn and f"tcp://0.0.0.0:{port}" in warn[0], text
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


@pytest.mark.parametrize("kind", ["public-only", "garbage"])
def test_a_bad_server_key_file_is_a_one_line_startup_error(tmp_path: Path, keys: Keys,
                                                            kind: str) -> None:
    key = keys.server_public
    if kind == "garbage":
        key = tmp_path / "server.key_secret"
        key.write_bytes(os.urandom(300))
    cfg = digits_config(tmp_path, variants=("cnn-fp32",), server=f"""
[server.curve]
server_secret_key = "{key}"
clients_dir = "{keys.clients_dir}"
""")
    # Fails in _bind, before any model loads: seconds even on a busy machine (a daemon
    # that printed its error but hangs in ctx.term() fails the test by the timeout).
    r = run_edged(*serve_args(cfg, tmp_path, f"tcp://127.0.0.1:{free_port()}"), timeout=8)
    assert r.returncode == 1, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("edged: cannot start:") and str(key) in last, r.stderr
    assert "Traceback" not in r.stderr


def test_a_malformed_client_key_fails_the_reload_loudly(curve_daemon: Daemon,
                                                        keys: Keys) -> None:
    d = curve_daemon
    keys.revoke("alice")
    (keys.clients_dir / "broken.key").write_text("metadata\ncurve\n    nothing here\n")
    r = d.ctl({"op": "reload"}, timeout=10)
    assert d.ctl({"op": "status"}, timeout=5)["status"] == "OK"  # control still answers
    if r["status"] == "OK":
        # Accepting the reload is only fine if the revocation really took effect.
        assert not served(keys, d, "alice", timeout_s=1.5), \
            "reload said OK but the revoked key is still accepted"
    else:
        assert "broken.key" in r.get("error", ""), r


def test_a_malformed_client_key_at_start_up_is_a_one_line_error(tmp_path: Path,
                                                                keys: Keys) -> None:
    keys.allow("alice")
    (keys.clients_dir / "broken.key").write_bytes(os.urandom(200))
    cfg = curve_config(tmp_path, keys)
    r = run_edged(*serve_args(cfg, tmp_path, f"tcp://127.0.0.1:{free_port()}"), timeout=30)
    assert r.returncode == 1, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("edged: cannot start:") and "broken.key" in last, r.stderr
    assert "Traceback" not in r.stderr


# -- ipc permissions ----------------------------------------------------------------------

def test_ipc_sockets_are_0660_and_the_runtime_dir_0750(make_daemon: Any,
                                                       tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        d: Daemon = make_daemon(digits_config(tmp_path, variants=("cnn-fp32",)))
    finally:
        os.umask(old)
    assert stat.S_IMODE(d.runtime_dir.stat().st_mode) == 0o750
    for sock in (d.runtime_dir / "edged.sock", d.runtime_dir / "control.sock"):
        st = sock.stat()
        assert stat.S_ISSOCK(st.st_mode), sock
        assert stat.S_IMODE(st.st_mode) == 0o660, (sock, oct(st.st_mode))
    # Socket files are removed on a clean stop.
    assert d.stop() == 0
    assert not (d.runtime_dir / "edged.sock").exists()
    assert not (d.runtime_dir / "control.sock").exists()


def test_an_existing_world_writable_runtime_dir_is_tightened_or_refused(
        tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    os.chmod(run, 0o777)
    cfg = digits_config(tmp_path, variants=("cnn-fp32",))
    port = free_port()
    env = dict(os.environ)
    env.pop("NOTIFY_SOCKET", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "edged",
         *serve_args(cfg, tmp_path, f"ipc://{run}/edged.sock", f"tcp://127.0.0.1:{port}")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=str(ROOT), env=env)
    try:
        with Client(f"tcp://127.0.0.1:{port}", timeout_s=1.0) as c:
            end = time.monotonic() + 60
            while time.monotonic() < end and proc.poll() is None:
                try:
                    if c.health().ok:
                        break
                except ClientTimeout:
                    pass
        refused = proc.poll() not in (None, 0)
        assert refused or stat.S_IMODE(run.stat().st_mode) == 0o750
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
