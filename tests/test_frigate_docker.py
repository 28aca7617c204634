"""examples/frigate/docker/: Frigate in a container, edged on the host, run for real as far
as this machine allows (no Docker here).

- The example's files agree: each compose file mounts or networks what its Frigate
  config's endpoint needs, and that endpoint is one the example's edged config binds.
- The example's edged config, with only its folders moved under the test's tmp (the
  socket folder, the models), serves both endpoints to a client that behaves as
  Frigate's zmq detector does (``edged.testing.frigate_plugin``): the handshake, then a
  person found in the shipped sample photo, over the shared socket and over loopback TCP.
- ``edged check`` refuses an ``ipc://`` path whose folder does not exist, and a relative
  one on a Frigate endpoint (which Frigate cannot know).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml
from support.daemons import Daemon, free_port
from support.paths import ROOT

from edged.testing.frigate_plugin import FrigateDetector

EXAMPLE = ROOT / "examples" / "frigate" / "docker"
PHOTO = ROOT / "models" / "person" / "samples" / "astronaut.jpg"


def edged_config() -> str:
    return (EXAMPLE / "edged.toml").read_text()


def frigate_endpoint(name: str) -> str:
    return yaml.safe_load((EXAMPLE / name).read_text())["detectors"]["edged"]["endpoint"]


def test_the_compose_files_give_frigate_the_endpoint_edged_binds() -> None:
    import tomllib

    bound = {f["endpoint"] for f in tomllib.loads(edged_config())["server"]["frigate"]}
    ipc = frigate_endpoint("frigate-ipc.yml")
    assert ipc in bound and ipc.startswith("ipc:///")
    folder = str(Path(ipc[len("ipc://"):]).parent)
    volumes = yaml.safe_load((EXAMPLE / "docker-compose.yml").read_text())[
        "services"]["frigate"]["volumes"]
    assert f"{folder}:{folder}" in volumes  # the same path inside the container and out
    tcp = frigate_endpoint("frigate-tcp.yml")
    assert tcp in bound and tcp.startswith("tcp://127.0.0.1:")
    host = yaml.safe_load((EXAMPLE / "docker-compose.host-network.yml").read_text())
    assert host["services"]["frigate"]["network_mode"] == "host"


@pytest.fixture(scope="module")
def host_edged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The example's edged.toml with /run/edged and /var/lib/edged/models moved under tmp,
    and its TCP ports made free ones."""
    tmp = tmp_path_factory.mktemp("docker")
    run = tmp / "run-edged"
    run.mkdir(mode=0o750)
    text = edged_config().replace("/run/edged", str(run))
    text = text.replace("/var/lib/edged/models", str(ROOT / "models"))
    port = free_port()
    text = text.replace("tcp://127.0.0.1:5556", f"tcp://127.0.0.1:{port}")
    text = re.sub(r'listen = "[^"]*"', 'listen = "off"', text)
    cfg = tmp / "edged.toml"
    cfg.write_text(text)
    d = Daemon(cfg, tmp)
    try:
        yield {"ipc": frigate_endpoint("frigate-ipc.yml").replace("/run/edged", str(run)),
               "tcp": f"tcp://127.0.0.1:{port}", "config": str(cfg), "tmp": str(tmp)}
    finally:
        d.stop()


@pytest.mark.parametrize("how", ["ipc", "tcp"])
def test_a_frigate_detector_finds_the_person_over_each_way(host_edged: dict[str, str],
                                                           how: str) -> None:
    det = FrigateDetector(host_edged[how], "/config/edged-person.onnx", "ssd",
                          request_timeout_ms=5000)
    try:
        assert det.ready, det.events
        frame = cv2.cvtColor(cv2.resize(cv2.imread(str(PHOTO)), (300, 300)),
                             cv2.COLOR_BGR2RGB)
        rows = det.detect_raw(frame[None].astype(np.uint8))
        assert rows[0][0] == 0 and rows[0][1] > 0.5, rows[:3]  # class 0 (person), scored
    finally:
        det.close()


def _check(config: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "edged", "check", str(config)],
                          capture_output=True, text=True, env=env, timeout=120)


def test_check_refuses_a_socket_folder_that_does_not_exist(tmp_path: Path) -> None:
    text = edged_config().replace("/var/lib/edged/models", str(ROOT / "models"))
    text = text.replace("/run/edged", str(tmp_path / "missing"))
    (tmp_path / "edged.toml").write_text(text)
    r = _check(tmp_path / "edged.toml")
    assert r.returncode == 1, r.stdout
    assert (f"server.frigate[0].endpoint: ipc://{tmp_path}/missing/frigate.sock: its folder "
            f"{tmp_path}/missing does not exist") in r.stdout, r.stdout


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write any folder")
def test_check_refuses_a_socket_folder_it_cannot_write(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    text = edged_config().replace("/var/lib/edged/models", str(ROOT / "models"))
    (tmp_path / "edged.toml").write_text(text.replace("/run/edged", str(ro)))
    r = _check(tmp_path / "edged.toml")
    assert r.returncode == 1 and "is not writable by this user" in r.stdout, r.stdout


def test_check_refuses_a_relative_frigate_socket(tmp_path: Path) -> None:
    text = edged_config().replace("/var/lib/edged/models", str(ROOT / "models"))
    text = text.replace("/run/edged", str(tmp_path))
    text = text.replace(f'"ipc://{tmp_path}/frigate.sock"', '"ipc://frigate.sock"')
    (tmp_path / "edged.toml").write_text(text)
    r = _check(tmp_path / "edged.toml")
    assert r.returncode == 1, r.stdout
    assert "server.frigate[0].endpoint: ipc://frigate.sock is relative" in r.stdout
    assert "which Frigate cannot know" in r.stdout
