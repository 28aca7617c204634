"""systemd/edged.service and its drop-ins: directives, `systemd-analyze verify`, exposure score.

`systemd-analyze` ships in Debian's `systemd` package; it works without systemd
running as PID 1 (containers, CI). When it is missing the analyzer tests skip
and only the plain-text checks run.

Why verify a copy: `systemd-analyze verify` fails when ExecStart's binary does
not exist, and /opt/edged/venv/bin/edged exists only after scripts/ops/install. The
copy differs from the shipped unit in that one line (ExecStart -> /bin/true, with
the same arguments), so everything else is verified as shipped. Drop-ins are
placed in ``<copy>.d/``, which systemd-analyze reads next to the unit file.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
UNIT_DIR = REPO / "systemd"
UNIT = UNIT_DIR / "edged.service"
MAX_EXPOSURE = 2.0
EXEC_START = "ExecStart=/opt/edged/venv/bin/edged serve --config /etc/edged/edged.toml"

ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(
    ANALYZE is None,
    reason="systemd-analyze not found (apt-get install systemd)",
)


def directives(path: Path) -> dict[str, list[str]]:
    """Key -> values (in order) from a unit file, ignoring comments and sections."""
    out: dict[str, list[str]] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        out.setdefault(key.strip(), []).append(value.strip())
    return out


def systemd_version() -> int:
    assert ANALYZE is not None
    out = subprocess.run(
        [ANALYZE, "--version"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    match = re.search(r"systemd (\d+)", out)
    assert match, out
    return int(match.group(1))


def unit_copy(tmp_path: Path, *dropins: str) -> Path:
    """The shipped unit with ExecStart pointing at an existing binary, plus drop-ins."""
    text = UNIT.read_text()
    assert EXEC_START in text
    copy = tmp_path / "edged.service"
    copy.write_text(
        text.replace(EXEC_START, EXEC_START.replace("/opt/edged/venv/bin/edged", "/bin/true"))
    )
    if dropins:
        d = tmp_path / "edged.service.d"
        d.mkdir()
        for name in dropins:
            shutil.copy2(UNIT_DIR / name, d / name)
    return copy


def analyze(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    assert ANALYZE is not None
    return subprocess.run(
        [ANALYZE, *args], capture_output=True, text=True, timeout=120, check=False, cwd=cwd
    )


def exposure(proc: subprocess.CompletedProcess[str]) -> float:
    match = re.search(
        r"Overall exposure level for edged\.service:\s*([0-9.]+)\s+(\w+)", proc.stdout
    )
    assert match, f"no exposure line in:\n{proc.stdout}\n{proc.stderr}"
    return float(match.group(1))


# -- plain text ---------------------------------------------------------------


def test_required_directives() -> None:
    d = directives(UNIT)
    expected = {
        "Type": ["notify"],
        "NotifyAccess": ["main"],
        "ExecStart": [EXEC_START.partition("=")[2]],
        "ExecReload": ["/bin/kill -HUP $MAINPID"],
        "WatchdogSec": ["10s"],
        "Restart": ["on-failure"],
        "TimeoutStartSec": ["120s"],
        "RuntimeDirectory": ["edged"],
        "RuntimeDirectoryMode": ["0750"],
        "StateDirectory": ["edged"],
        "CacheDirectory": ["edged"],
        "User": ["edged"],
        "Environment": [
            "PYTHONUNBUFFERED=1",
            "PYTHONFAULTHANDLER=1",
            "XDG_CACHE_HOME=/var/cache/edged",
        ],
        "IPAddressDeny": ["any"],
        "IPAddressAllow": ["localhost"],
        "PrivateDevices": ["yes"],
        "ProtectSystem": ["strict"],
        "NoNewPrivileges": ["yes"],
        "CapabilityBoundingSet": [""],
    }
    for key, value in expected.items():
        assert d.get(key) == value, f"{key}: {d.get(key)} != {value}"
    assert "RestartSec" in d
    assert "WantedBy" in d


def test_stop_timeout_exceeds_drain_timeout() -> None:
    """TimeoutStopSec must leave room for [server] drain_timeout_s (default 10 s)."""
    stop = directives(UNIT)["TimeoutStopSec"][0]
    assert stop.endswith("s")
    assert float(stop[:-1]) >= 10.0 + 5.0


def test_sys_stays_readable() -> None:
    """The governor reads /sys (thermal zones, hwmon, get_throttled): never hide it."""
    d = directives(UNIT)
    for key in ("InaccessiblePaths", "TemporaryFileSystem"):
        for value in d.get(key, []):
            assert "/sys" not in value, f"{key}={value} hides /sys"
    assert d.get("ProcSubset", ["all"]) == ["all"]  # psutil needs /proc/stat etc.


def test_jetson_dropin_opens_the_gpu() -> None:
    d = directives(UNIT_DIR / "jetson.conf")
    assert d["SupplementaryGroups"] == ["video"]
    assert d["PrivateDevices"] == ["no"]
    assert d["DevicePolicy"] == ["closed"]
    assert d["MemoryDenyWriteExecute"] == ["no"]
    allowed = {v.split()[0] for v in d["DeviceAllow"]}
    assert {"/dev/nvmap", "/dev/nvhost-ctrl-gpu", "/dev/nvgpu/igpu0/ctrl"} <= allowed


def test_notify_reload_dropin() -> None:
    d = directives(UNIT_DIR / "notify-reload.conf")
    assert d["Type"] == ["notify-reload"]
    assert d["ExecReload"] == [""]  # reset: systemd itself sends ReloadSignal=


# -- systemd-analyze ------------------------------------------------------------


@needs_analyze
def test_verify_shipped_unit_only_complains_about_missing_binary() -> None:
    """The unit as shipped: the only finding may be the not-yet-installed ExecStart."""
    proc = analyze("verify", str(UNIT))
    findings = [line for line in proc.stderr.splitlines() if line.strip()]
    unexpected = [f for f in findings if "/opt/edged/venv/bin/edged" not in f]
    assert not unexpected, proc.stderr


@needs_analyze
@pytest.mark.parametrize("dropins", [(), ("jetson.conf",)], ids=["cpu", "jetson"])
def test_verify_clean(tmp_path: Path, dropins: tuple[str, ...]) -> None:
    proc = analyze("verify", str(unit_copy(tmp_path, *dropins)))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "", proc.stderr


@needs_analyze
def test_verify_notify_reload_dropin(tmp_path: Path) -> None:
    version = systemd_version()
    if version < 253:
        pytest.skip(f"Type=notify-reload needs systemd >= 253; this is systemd {version}")
    proc = analyze("verify", str(unit_copy(tmp_path, "notify-reload.conf")))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "", proc.stderr


@needs_analyze
def test_security_exposure_of_shipped_unit() -> None:
    """`systemd-analyze security --offline=true systemd/edged.service` <= 2.0."""
    proc = analyze("security", "--offline=true", str(UNIT))
    assert exposure(proc) <= MAX_EXPOSURE, proc.stdout


@needs_analyze
def test_security_exposure_with_jetson_dropin(tmp_path: Path) -> None:
    """The GPU drop-in opens devices and W+X memory; it must stay 'OK' too."""
    proc = analyze("security", "--offline=true", str(unit_copy(tmp_path, "jetson.conf")))
    assert exposure(proc) <= MAX_EXPOSURE, proc.stdout
