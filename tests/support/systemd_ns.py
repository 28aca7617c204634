"""A real systemd (252) as PID 1 of private PID+mount+net+UTS+IPC namespaces, for tests.

Why: the hardened unit must be seen to start under a real service manager, not only
parsed. ``unshare`` gives systemd its own PID 1; everything it could write on the
host is redirected first, because a booting systemd runs ``systemd-tmpfiles
--boot``, which *empties /tmp* (``D /tmp`` in tmp.conf), and writes /etc, /var and
the journal:

* /etc, /var, /opt, /usr/local: overlayfs over the host directory, the upper layer
  in the test's own folder (install, useradd, the journal land there);
* /tmp, /var/tmp, /run: fresh tmpfs; /proc: a new procfs with /proc/sys read-only
  (no host-wide sysctl is changed by systemd-sysctl).

The host's /sys, cgroup v1 hierarchy and the checkout stay shared (read-only for the unit
through ProtectSystem=strict). ``stop()`` powers systemd off and kills it if needed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

SYSTEMD = "/lib/systemd/systemd"
REPO = Path(__file__).resolve().parents[2]
OVERLAID = ("etc", "var", "opt", "usr/local")

BOOT = rf"""
set -e
W="$1"
R="$2"
# The repository (scripts/ops/install, its .venv) may live under a directory that gets a
# fresh tmpfs below (a CI clone in /tmp): keep a handle on it and bind it back after.
mkdir -p /dev/shm/.edged-repo-stash 2>/dev/null || true
mount --bind "$R" /dev/shm/.edged-repo-stash
mount -t proc proc /proc
mount --bind /proc/sys /proc/sys
mount -o remount,bind,ro /proc/sys
mount -t tmpfs -o mode=0755 tmpfs /run
for d in etc var opt usr/local; do
    n=$(echo "$d" | tr / _)
    mkdir -p "$W/$n-up" "$W/$n-work"
    mount -t overlay overlay -o "lowerdir=/$d,upperdir=$W/$n-up,workdir=$W/$n-work" "/$d"
done
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=1777 tmpfs /var/tmp
if [ ! -e "$R/pyproject.toml" ]; then
    mkdir -p "$R"
    mount --bind /dev/shm/.edged-repo-stash "$R"
fi
umount /dev/shm/.edged-repo-stash
hostname edged-test
export container=edged-test
echo booting
exec {SYSTEMD} --system --unit=basic.target
"""


def unavailable() -> str | None:
    """Why this machine cannot run the namespace, or None when it can."""
    if os.geteuid() != 0:
        return "needs root (unshare --pid --mount --net)"
    if not Path(SYSTEMD).exists():
        return f"no {SYSTEMD}"
    for tool in ("unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"no {tool} (util-linux)"
    r = subprocess.run(["unshare", "--pid", "--fork", "--mount", "--net", "--uts", "--ipc",
                        "--propagation", "private", "true"], capture_output=True, text=True)
    if r.returncode != 0:
        return f"namespaces not allowed here: unshare: {r.stderr.strip()}"
    return None


class NamespaceUnavailable(Exception):
    """The namespaces or overlays could not be set up here (before systemd ran)."""


class SystemdNamespace:
    """Boot, enter (``run``/``popen``) and power off a namespaced systemd."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.log_path = workdir / "boot.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid = 0  # systemd's PID on the host

    def start(self, timeout: float = 40.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount", "--net", "--uts", "--ipc",
             "--propagation", "private", "sh", "-c", BOOT, "boot", str(self.workdir),
             str(REPO)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        end = time.monotonic() + timeout
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        while time.monotonic() < end and not self.pid:
            if self.proc.poll() is not None:
                if "booting" not in self.boot_log():  # a mount or unshare was refused
                    raise NamespaceUnavailable(self.boot_log().strip()[-300:])
                raise RuntimeError(f"systemd exited while booting:\n{self.boot_log()}")
            try:
                kids = children.read_text().split()
            except OSError:
                kids = []
            if kids and Path(f"/proc/{kids[0]}/exe").resolve() == Path(SYSTEMD).resolve():
                self.pid = int(kids[0])
            time.sleep(0.05)
        state = ""
        while time.monotonic() < end:
            state = self.run("systemctl", "is-system-running", check=False).stdout.strip()
            if state in ("running", "degraded"):
                return
            time.sleep(0.2)
        raise RuntimeError(f"systemd not running after {timeout} s (state {state!r}):\n"
                           f"{self.boot_log()}")

    def boot_log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def _enter(self) -> list[str]:
        return ["nsenter", "-t", str(self.pid), "-p", "-m", "-n", "-u", "-i"]

    def run(self, *cmd: str, check: bool = True, timeout: float = 60.0,
            input: bytes | str | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``cmd`` inside the namespaces; text output."""
        data = input.encode() if isinstance(input, str) else input
        r = subprocess.run([*self._enter(), *cmd], input=data, capture_output=True,
                           timeout=timeout)
        out = subprocess.CompletedProcess(r.args, r.returncode, r.stdout.decode(errors="replace"),
                                          r.stderr.decode(errors="replace"))
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} -> {r.returncode}\n{out.stdout}\n{out.stderr}")
        return out

    def popen(self, *cmd: str) -> subprocess.Popen[str]:
        return subprocess.Popen([*self._enter(), *cmd], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def show(self, unit: str, *props: str) -> dict[str, str]:
        out = self.run("systemctl", "show", unit, "-p", ",".join(props)).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def stop(self) -> None:
        """Power off; SIGKILL systemd (which ends the PID namespace) if it lingers."""
        if self.proc is None:
            return
        if self.pid and self.proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.run("systemctl", "poweroff", check=False, timeout=10)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(20)
        if self.proc.poll() is None:
            # PID 1 of the namespace first (its death kills every process in it), then
            # unshare; also whatever child unshare has if systemd was never identified.
            children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
            kids: list[int] = []
            with contextlib.suppress(OSError):
                kids = [int(k) for k in children.read_text().split()]
            for pid in [self.pid, *kids, self.proc.pid]:
                if pid:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            self.proc.wait(10)
