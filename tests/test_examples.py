"""examples/ against a real daemon: the C client is built with the system's compiler and
libzmq and run; the streamer streams a video file this test writes with OpenCV."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from support.daemons import Daemon, free_port
from support.paths import MODELS, ROOT

EXAMPLES = ROOT / "examples"
VAL = dict(np.load(MODELS / "validation.npz"))


def run(args: list[str], timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=str(ROOT))


def _libzmq_dev() -> bool:
    if shutil.which("cc") is None or shutil.which("make") is None:
        return False
    probe = subprocess.run(["pkg-config", "--exists", "libzmq"], capture_output=True) \
        if shutil.which("pkg-config") else None
    return (probe is not None and probe.returncode == 0) or Path("/usr/include/zmq.h").exists()


@pytest.fixture(scope="module")
def c_client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not _libzmq_dev():
        pytest.skip("needs a C compiler, make and libzmq headers (apt-get install "
                    "build-essential libzmq3-dev pkg-config)")
    build = tmp_path_factory.mktemp("c_client")
    shutil.copytree(EXAMPLES / "c_client", build, dirs_exist_ok=True)
    made = subprocess.run(["make", "-C", str(build)], capture_output=True, text=True,
                          timeout=120)
    assert made.returncode == 0, made.stdout + made.stderr
    assert "warning" not in made.stderr, made.stderr
    return build / "edged_client"


def write_ppm(path: Path, bgr: np.ndarray) -> Path:
    h, w, _ = bgr.shape
    path.write_bytes(f"P6\n{w} {h}\n255\n".encode() + np.ascontiguousarray(bgr[..., ::-1])
                     .tobytes())
    return path


def test_c_client_sends_a_generated_frame_and_prints_the_reply(daemon: Daemon,
                                                               c_client: Path) -> None:
    r = run([str(c_client), daemon.tcp, "digits", "--size", "48x64"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert '"status":"OK"' in r.stdout and '"id":"c-1"' in r.stdout
    assert re.search(r"^output 0: name=logits dtype=float32 shape=\[1,10\] bytes=40 "
                     r"argmax=\d value=", r.stdout, re.M), r.stdout


def test_c_client_gets_the_same_answer_as_the_python_client(daemon: Daemon, c_client: Path,
                                                            tmp_path: Path) -> None:
    for i in range(3):
        frame = cv2.cvtColor(VAL["x"][i], cv2.COLOR_GRAY2BGR)  # uint8 28x28x3
        with daemon.client() as c:
            want = int(np.argmax(c.infer("digits", frame).outputs["logits"]))
        r = run([str(c_client), daemon.ipc, "digits",
                 "--image", str(write_ppm(tmp_path / f"d{i}.ppm", frame))])
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"argmax={want} " in r.stdout, r.stdout


def test_c_client_shm_mode_gets_the_same_answer_and_leaves_nothing(
        daemon: Daemon, c_client: Path, tmp_path: Path) -> None:
    from edged.protocols.native.shm_rings import SHM_DIR, available

    if not available():
        pytest.skip("needs /dev/shm")
    frame = cv2.cvtColor(VAL["x"][3], cv2.COLOR_GRAY2BGR)
    with daemon.client() as c:
        want = int(np.argmax(c.infer("digits", frame).outputs["logits"]))
    r = run([str(c_client), daemon.ipc, "digits", "--shm",
             "--image", str(write_ppm(tmp_path / "s.ppm", frame))])
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"argmax={want} " in r.stdout, r.stdout
    assert not list(SHM_DIR.glob(f"edged-{daemon.pid}-*"))  # the ring was given back


def test_c_client_reports_a_status_and_a_missing_daemon(daemon: Daemon, c_client: Path) -> None:
    r = run([str(c_client), daemon.tcp, "no-such-model"])
    assert r.returncode == 1 and "status: NOT_FOUND" in r.stdout, r.stdout
    assert "no-such-model" in r.stdout
    r = run([str(c_client), f"tcp://127.0.0.1:{free_port()}", "digits", "--timeout-ms", "200"])
    assert r.returncode == 3 and "no reply" in r.stderr, r.stdout + r.stderr
    r = run([str(c_client), daemon.tcp, 'bad"name'])
    assert r.returncode == 2 and "model name" in r.stderr


# -- the streamer -----------------------------------------------------------------------------

def write_video(path: Path, frames: int) -> Path:
    out = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 30, (64, 48))
    assert out.isOpened(), "OpenCV cannot write MJPG .avi here"
    for i in range(frames):
        digit = cv2.resize(VAL["x"][i % len(VAL["x"])], (48, 48))
        frame = np.zeros((48, 64, 3), np.uint8)
        frame[:, 8:56] = cv2.cvtColor(digit, cv2.COLOR_GRAY2BGR)
        out.write(frame)
    out.release()
    return path


def test_streamer_streams_a_video_file(daemon: Daemon, tmp_path: Path) -> None:
    video = write_video(tmp_path / "cam.avi", 40)
    r = run([sys.executable, str(EXAMPLES / "streamer.py"), "--endpoint", daemon.tcp,
             "--model", "digits", "--source", str(video), "--duration", "30",
             "--in-flight", "3", "--stream", "test-cam"])
    assert r.returncode == 0, r.stdout + r.stderr
    answered = re.findall(r"^frame (\d+): logits top (\d+): ", r.stdout, re.M)
    dropped = re.findall(r"^frame (\d+): dropped", r.stdout, re.M)
    summary = re.search(r"^sent (\d+) frames in [\d.]+ s: (\d+) answered, (\d+) dropped as "
                        r"stale, (\d+) failed; achieved ([\d.]+) fps$", r.stdout, re.M)
    assert summary, r.stdout
    sent, ok, stale, failed = map(int, summary.groups()[:4])
    assert (sent, failed) == (40, 0) and ok + stale == 40 and ok >= 1
    assert len(answered) == ok and len(dropped) == stale
    assert sorted(int(f) for f, *_ in answered + [(d,) for d in dropped]) == list(range(40))
    assert float(summary.group(5)) > 0


def test_streamer_generates_frames_and_stops_after_its_duration(daemon: Daemon) -> None:
    r = run([sys.executable, str(EXAMPLES / "streamer.py"), "--endpoint", daemon.ipc,
             "--model", "digits", "--duration", "1", "--width", "64", "--height", "48"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"^sent \d+ frames .* 0 failed; achieved", r.stdout, re.M), r.stdout


def test_streamer_show_without_a_gui_build_says_so() -> None:
    info = cv2.getBuildInformation()
    if "NONE" not in info.split("GUI:")[1].split("\n")[0]:
        pytest.skip("this OpenCV has a GUI")
    r = run([sys.executable, str(EXAMPLES / "streamer.py"), "--model", "digits", "--show"])
    assert r.returncode == 2 and "--show needs an OpenCV build with a GUI" in r.stderr


# -- docs/protocol.md's byte-by-byte example ------------------------------------------------

def test_protocol_doc_example_is_what_the_daemon_sends(daemon: Daemon, tmp_path: Path) -> None:
    script = str(ROOT / "scripts" / "docs" / "protocol_example.py")
    doc = ROOT / "docs" / "protocol.md"
    r = run([sys.executable, script, "--endpoint", daemon.tcp, "--check", str(doc)])
    assert r.returncode == 0, r.stdout + r.stderr
    # A doc whose request bytes or reply shape drifted is caught.
    stale = tmp_path / "protocol.md"
    stale.write_text(doc.read_text().replace('"shape":[1,10]', '"shape":[1,11]')
                     .replace("00000000  00 00 00 00 00 00 00 00 00 3c",
                              "00000000  00 00 00 00 00 00 00 00 00 3d"))
    r = run([sys.executable, script, "--endpoint", daemon.tcp, "--check", str(stale)])
    assert r.returncode == 1
    assert "request frame 1 differs" in r.stderr and "reply header changed" in r.stderr
