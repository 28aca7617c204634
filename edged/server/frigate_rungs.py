"""Builds the INT8 rung of a model Frigate sent, in the background, and reports on it.

Why a room of its own: the build is a child process (``edged.frigate_ladder``) at the
lowest priority on one core, started once an endpoint's ring holds enough frames
Frigate sent; this module starts it, turns its progress lines into the endpoint's entry
in ``edged status`` (``frigate_rungs``) and the log, and hands an accepted rung back to
``frigate_manage`` to be offered to the governor. Nothing here touches a request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from edged.frigate_ladder import FrameRing
from edged.server.state import ServerState

log = logging.getLogger("edged.frigate")


def _child_env() -> dict[str, str]:
    """The daemon's environment, with this ``edged`` importable from any folder."""
    import edged

    env = dict(os.environ)
    root = str(Path(edged.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


class Rungs:
    def __init__(self, state: ServerState) -> None:
        self.state = state

    def status(self, address: str, **entry: Any) -> None:
        self.state.frigate_rungs[address] = {**self.state.frigate_rungs.get(address, {}),
                                             **entry, "at": round(time.time(), 1)}

    async def build(self, address: str, served: Path, model_type: str, color: str,
                    ring: FrameRing, offer: Callable[[], Awaitable[str | None]]) -> None:
        """Build and check the rung of ``served`` from ``ring``; on success ``offer`` it."""
        self.status(address, state="building", model=served.name, frames=len(ring))
        log.info("frigate %s: building an INT8 rung for %s from %d frames Frigate sent "
                 "(background, nice 19, one core)", address, served.name, len(ring))
        with tempfile.TemporaryDirectory(prefix="edged-rung-") as tmp:
            frames = Path(tmp) / "frames.npz"
            await asyncio.to_thread(ring.save, frames)
            record = await self._run(address, served, frames, model_type, color, Path(tmp))
        if not record.get("accepted"):
            self.status(address, state="refused", error=record.get("error"))
            log.warning("frigate %s: INT8 rung refused: %s", address, record.get("error"))
            return
        err = await offer()
        if err:
            self.status(address, state="failed", error=err)
            log.error("frigate %s: INT8 rung built but not offered: %s", address, err)
            return
        self.status(address, state="offered", build_s=record.get("build_s"),
                    check=record.get("check"))
        log.info("frigate %s: INT8 rung accepted (%s) and offered to the governor", address,
                 record.get("check"))

    async def _run(self, address: str, served: Path, frames: Path, model_type: str,
                   color: str, cwd: Path) -> dict[str, Any]:
        """The child runs in ``cwd`` (a temporary folder): ONNX Runtime's quantizer leaves
        files in its working directory."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "edged.frigate_ladder", str(served), str(frames),
            "--model-type", model_type, "--color", color, "--low-priority",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd=str(cwd),
            env=_child_env())
        last = ""
        try:
            assert proc.stdout is not None
            async for raw in proc.stdout:
                line = raw.decode("utf-8", "replace").strip()
                if not line:
                    continue
                last = line
                if not line.startswith("{"):
                    self.status(address, progress=line[:200])
                    log.info("frigate %s: INT8 rung: %s", address, line[:200])
            await proc.wait()
        except asyncio.CancelledError:  # the daemon stops: so does the build
            proc.kill()
            await proc.wait()
            raise
        try:
            record = json.loads(last)
        except ValueError:
            record = {"accepted": False, "error": f"the build exited {proc.returncode}: "
                      f"{last[:300]}"}
        return record if isinstance(record, dict) else {"accepted": False, "error": last}
