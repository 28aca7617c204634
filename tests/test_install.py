"""scripts/ops/install and scripts/ops/uninstall, run for real into a temporary root.

``--prefix`` makes the scripts install under a directory and skip everything
outside it (useradd, chown, systemctl), and ``--no-pip`` skips the venv, so
these tests run in about a second and never touch the machine. The source is a
small fake checkout (the real scripts and units, a config and models made
here), so the tests do not depend on which models the repo ships today.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
INSTALL = REPO / "scripts" / "ops" / "install"
UNINSTALL = REPO / "scripts" / "ops" / "uninstall"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")

SAMPLE_CONFIG = """\
[server]
endpoints = ["ipc://edged.sock", "tcp://127.0.0.1:5555"]

[[models]]
name = "digits"

[[models.variants]]
name = "digits-cnn-fp32"
backend = "onnxruntime"
path = "models/digits/cnn-fp32.onnx"

[[models.variants]]
name = "digits-cnn-int8"
backend = "onnxruntime"
path   =  './models/digits/cnn-int8.onnx'

[[models.variants]]
name = "elsewhere"
backend = "tvm"
path = "/srv/other/model.so"
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A minimal edged checkout: the real scripts/units/docs plus a made-up config+models."""
    src = tmp_path / "src"
    (src / "scripts" / "ops").mkdir(parents=True)
    for script in (INSTALL, UNINSTALL):
        shutil.copy2(script, src / "scripts" / "ops" / script.name)
    shutil.copytree(REPO / "systemd", src / "systemd")
    (src / "docs").mkdir()
    for doc in ("operations.md", "metrics.md"):
        if (REPO / "docs" / doc).exists():
            shutil.copy2(REPO / "docs" / doc, src / "docs" / doc)
    shutil.copy2(REPO / "pyproject.toml", src / "pyproject.toml")
    (src / "config.toml").write_text(SAMPLE_CONFIG)
    models = src / "models" / "digits"
    models.mkdir(parents=True)
    (models / "cnn-fp32.onnx").write_bytes(b"fp32 model")
    (models / "cnn-int8.onnx").write_bytes(b"int8 model")
    (models / "README.md").write_text("how these were made\n")
    (models / "__pycache__").mkdir()
    (models / "__pycache__" / "x.pyc").write_bytes(b"junk")
    return src


def _run(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(script), *args], capture_output=True, text=True, timeout=60, check=False
    )


def _install(src: Path, root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    proc = _run(src / "scripts" / "ops" / "install", "--prefix", str(root), "--no-pip", *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_install_into_prefix(checkout: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    proc = _install(checkout, root, "--no-jetson")
    out = proc.stdout

    unit = root / "usr/local/lib/systemd/system/edged.service"
    assert unit.read_text() == (checkout / "systemd/edged.service").read_text()
    assert not (unit.parent / "edged.service.d/jetson.conf").exists()

    config = root / "etc/edged/edged.toml"
    assert config.stat().st_mode & 0o777 == 0o640
    text = config.read_text()
    # Relative model paths now point at the installed models; others untouched.
    assert 'path = "/var/lib/edged/models/digits/cnn-fp32.onnx"' in text
    assert "path   =  '/var/lib/edged/models/digits/cnn-int8.onnx'" in text
    assert 'path = "/srv/other/model.so"' in text
    paths = [v["path"] for m in tomllib.loads(text)["models"] for v in m["variants"]]
    assert all(p.startswith("/") for p in paths)

    models = root / "var/lib/edged/models/digits"
    assert (models / "cnn-fp32.onnx").read_bytes() == b"fp32 model"
    assert (models / "README.md").exists()
    assert not (models / "__pycache__").exists()
    assert not list(models.glob("*.installing"))
    assert "3 files" in out

    link = root / "usr/local/bin/edged"
    assert link.is_symlink() and str(link.readlink()) == "/opt/edged/venv/bin/edged"

    # Nothing outside the prefix: those steps are reported as skipped.
    assert re.search(r"skipped \(--prefix\): useradd .*edged", out)
    assert "skipped (--prefix): chown -R edged:edged /var/lib/edged" in out
    assert "daemon-reload" in out and "systemctl enable --now edged" in out
    assert "skipped (--no-pip)" in out


def test_existing_config_is_never_overwritten(checkout: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    _install(checkout, root, "--no-jetson")
    config = root / "etc/edged/edged.toml"
    config.write_text("# operator's own\n")
    (checkout / "models/digits/cnn-fp32.onnx").write_bytes(b"fp32 model v2")
    extra = root / "var/lib/edged/models/mine/custom.onnx"
    extra.parent.mkdir(parents=True)
    extra.write_bytes(b"operator model")

    proc = _install(checkout, root, "--no-jetson")
    assert config.read_text() == "# operator's own\n"
    assert "exists: kept as is" in proc.stdout
    # Shipped models are updated, operator-added ones kept.
    assert (root / "var/lib/edged/models/digits/cnn-fp32.onnx").read_bytes() == b"fp32 model v2"
    assert extra.read_bytes() == b"operator model"


def test_jetson_dropin(checkout: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    proc = _install(checkout, root, "--jetson")
    dropin = root / "usr/local/lib/systemd/system/edged.service.d/jetson.conf"
    assert dropin.read_text() == (checkout / "systemd/jetson.conf").read_text()
    assert re.search(r"usermod --append --groups video edged", proc.stdout)
    # Re-installing without Jetson removes the stale drop-in.
    _install(checkout, root, "--no-jetson")
    assert not dropin.exists()


def test_dry_run_changes_nothing(checkout: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    proc = _install(checkout, root, "--dry-run", "--jetson")
    assert not root.exists()
    out = proc.stdout
    assert "dry run" in out
    for expected in (
        "/usr/local/lib/systemd/system/edged.service",
        "edged.service.d/jetson.conf",
        "models/digits/cnn-fp32.onnx -> /var/lib/edged/models/digits/cnn-fp32.onnx",
        "/etc/edged/edged.toml",
    ):
        assert expected in out


def test_dry_run_of_real_checkout_into_real_root() -> None:
    """What an operator would see: real paths, pip with extras, nothing changed."""
    proc = _run(INSTALL, "--dry-run", "--extras", "tvm", "--no-systemctl", "--no-jetson")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "useradd --system" in out or "user edged exists" in out
    assert "-m venv /opt/edged/venv" in out or "/opt/edged/venv/bin/python" in out
    assert re.search(r"pip install /\S*tvm", out)
    assert "install -m 0644 " + str(REPO / "systemd/edged.service") in out


def test_real_shipped_config_paths_are_rewritten(tmp_path: Path) -> None:
    """The repo's own config.toml, once installed, names only absolute model paths."""
    if not (REPO / "config.toml").exists():
        pytest.skip("the checkout has no config.toml yet")
    root = tmp_path / "root"
    proc = _run(INSTALL, "--prefix", str(root), "--no-pip", "--no-jetson")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = tomllib.loads((root / "etc/edged/edged.toml").read_text())
    for model in data.get("models", []):
        for variant in model.get("variants", []):
            assert variant["path"].startswith("/var/lib/edged/models/"), variant
            installed = root / variant["path"].lstrip("/")
            assert installed.exists(), f"{variant['path']} not installed"


def test_unknown_option_fails() -> None:
    proc = _run(INSTALL, "--bogus")
    assert proc.returncode == 2
    assert "unknown option: --bogus" in proc.stderr


def test_uninstall_keeps_data_unless_purge(checkout: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    _install(checkout, root, "--jetson")
    (root / "opt/edged/venv/bin").mkdir(parents=True)  # as if pip had run
    operator_dropin = root / "etc/systemd/system/edged.service.d/override.conf"
    operator_dropin.parent.mkdir(parents=True)
    operator_dropin.write_text("[Service]\n")
    uninstall = checkout / "scripts" / "ops" / "uninstall"

    dry = _run(uninstall, "--prefix", str(root), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert (root / "usr/local/lib/systemd/system/edged.service").exists()

    proc = _run(uninstall, "--prefix", str(root))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (root / "usr/local/lib/systemd/system/edged.service").exists()
    assert not (root / "usr/local/lib/systemd/system/edged.service.d").exists()
    assert not (root / "opt/edged").exists()
    assert not (root / "usr/local/bin/edged").is_symlink()
    assert "skipped (--prefix): userdel edged" in proc.stdout
    assert (root / "etc/edged/edged.toml").exists()
    assert (root / "var/lib/edged/models/digits/cnn-fp32.onnx").exists()
    assert operator_dropin.exists()

    proc = _run(uninstall, "--prefix", str(root), "--purge")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (root / "etc/edged").exists()
    assert not (root / "var/lib/edged").exists()
    assert not operator_dropin.parent.exists()


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_scripts_are_shellcheck_clean() -> None:
    proc = subprocess.run(
        ["shellcheck", str(INSTALL), str(UNINSTALL)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout


def test_help_lists_every_extra() -> None:
    proc = _run(INSTALL, "--help")
    assert proc.returncode == 0
    for extra in ("openvino", "tvm", "kserve", "tensorrt", "gpu"):
        assert extra in proc.stdout, extra
    assert "--ladder DIR" in proc.stdout and "--config FILE" in proc.stdout


def test_an_openvino_rung_brings_its_extra_and_drop_in(checkout: Path, tmp_path: Path) -> None:
    cfg = checkout / "config.toml"
    cfg.write_text(SAMPLE_CONFIG + '\n[[models.variants]]\nname = "ov"\nbackend = "openvino"\n'
                   'path = "models/digits/cnn-ov-fp32.xml"\n\n[server.kserve]\n'
                   'grpc = "127.0.0.1:8001"\n')
    root = tmp_path / "root"
    proc = _install(checkout, root, "--no-jetson")
    dropin = root / "usr/local/lib/systemd/system/edged.service.d/openvino.conf"
    assert dropin.read_text() == (checkout / "systemd/openvino.conf").read_text()
    assert "serves an OpenVINO variant: adding the openvino extra" in proc.stdout
    assert "adding the kserve extra" in proc.stdout
    assert "adding the tvm extra" in proc.stdout  # SAMPLE_CONFIG has a TVM variant
    # pip would install them: the dry run of the real root shows the spec.
    dry = _run(checkout / "scripts/ops/install", "--dry-run", "--no-systemctl", "--no-jetson",
               "--extras", "track")
    assert "track\\,openvino\\,tvm\\,kserve" in dry.stdout, dry.stdout  # printf %q escapes
    # The OpenVINO variant removed from the installed config: the drop-in goes too.
    installed = root / "etc/edged/edged.toml"
    installed.write_text(installed.read_text().replace('backend = "openvino"',
                                                       'backend = "onnxruntime"'))
    _install(checkout, root, "--no-jetson")
    assert not dropin.exists()


def test_a_compiled_ladder_is_copied_and_the_config_points_at_it(checkout: Path,
                                                                tmp_path: Path) -> None:
    ladder = checkout / "build" / "people"
    ladder.mkdir(parents=True)
    for name, data in (("det-fp32.onnx", b"fp32"), ("det-int8.onnx", b"int8"),
                       ("det-int8.onnx.json", b"{}"), ("edged.toml", b"# the ladder\n")):
        (ladder / name).write_bytes(data)
    cfg = checkout / "my.toml"
    cfg.write_text(SAMPLE_CONFIG + '\n[[models]]\nname = "people"\n\n[[models.variants]]\n'
                   'name = "fp32"\nbackend = "onnxruntime"\npath = "build/people/det-fp32.onnx"\n'
                   '\n[[models.variants]]\nname = "int8"\nbackend = "onnxruntime"\n'
                   'path = "./build/people/det-int8.onnx"\n')
    root = tmp_path / "root"
    proc = _install(checkout, root, "--no-jetson", "--config", str(cfg), "--ladder", str(ladder))
    installed = root / "var/lib/edged/models/people"
    assert (installed / "det-int8.onnx").read_bytes() == b"int8"
    assert (installed / "edged.toml").exists() and "4 files" in proc.stdout
    data = tomllib.loads((root / "etc/edged/edged.toml").read_text())
    paths = [v["path"] for m in data["models"] for v in m["variants"]]
    assert "/var/lib/edged/models/people/det-fp32.onnx" in paths
    assert "/var/lib/edged/models/people/det-int8.onnx" in paths
    assert "/var/lib/edged/models/digits/cnn-fp32.onnx" in paths
    bad = _run(checkout / "scripts/ops/install", "--prefix", str(root), "--no-pip",
               "--ladder", str(tmp_path / "nope"))
    assert bad.returncode == 2 and "--ladder" in bad.stderr and "no such folder" in bad.stderr
