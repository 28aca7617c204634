"""Starts a model's rung build in the background (the daemon's side), and reports on it.

Why apart from the build: the build is a child process (``edged.delivery.rung_child``: an
ONNX Runtime INT8 rung, and with OpenVINO installed its FP32 and INT8 rungs) at the lowest
priority on one core; this module starts it (for a model Frigate sent, once its endpoint's
ring holds enough frames; for a delivered version whose ladder has no rung below its top,
on its validation rows), turns its progress lines and its outcome (the ladder, each rung
accepted, refused, skipped or left off, and why) into an entry of ``edged status`` (an
endpoint's ``frigate_rungs``, a delivered model's ``delivery``) and the log, and hands a
ladder with more than the served model back to whoever offers it to the governor. Nothing
here touches a request.
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

from edged.delivery.rungs import TOP, ladder_path, lowest_priority_one_core

log = logging.getLogger("edged.delivery")


def _child_env() -> dict[str, str]:
    """The daemon's environment, with this ``edged`` importable from any folder."""
    import edged

    env = dict(os.environ)
    root = str(Path(edged.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def outcome(record: dict[str, Any], variants: list[str] | None = None) -> dict[str, Any]:
    """A build's record (the ladder file ``delivery.rungs`` keeps) as the endpoint's status
    entry: the state, the ladder, each rung's fate and why, and one line of it all."""
    ladder = list(record.get("ladder") or [TOP])
    rungs: dict[str, Any] = {}
    off = record.get("off") or {}
    for key, rec in (record.get("rungs") or {}).items():
        if key in ladder:
            fate = {"state": "on the ladder", "check": rec.get("check")}
        elif rec.get("accepted"):
            fate = {"state": "not on the ladder", "reason": off.get(key, "")}
        else:
            fate = {"state": "skipped" if rec.get("skipped") else "refused",
                    "reason": rec.get("error")}
        speed = rec.get("speed") or {}
        if speed.get("latency_ms_p50") is not None:
            fate["latency_ms_p50"] = speed["latency_ms_p50"]
        rungs[key] = fate
    if TOP not in ladder and TOP in off:
        rungs[TOP] = {"state": "not on the ladder", "reason": off[TOP]}
    parts = [" > ".join(ladder)]
    parts += [f"{k} {f['state']}" + (f" ({f['reason']})" if f.get("reason") else "")
              for k, f in rungs.items() if f["state"] != "on the ladder"]
    if record.get("error"):
        parts.append(str(record["error"]))
    entry: dict[str, Any] = {
        "state": "offered" if ladder != [TOP] else "refused", "ladder": ladder,
        "rungs": rungs, "build_s": record.get("build_s"), "progress": "; ".join(parts)[:600]}
    if variants is not None:
        entry["variants"] = variants
    if entry["state"] == "refused":
        entry["error"] = entry["progress"]
    return entry


class RungLauncher:
    def __init__(self) -> None:
        #: each key's (an endpoint's, a model's) rung build as ``edged status`` shows it
        self.entries: dict[str, dict[str, Any]] = {}

    def status(self, address: str, **entry: Any) -> None:
        self.entries[address] = {**self.entries.get(address, {}), **entry,
                                 "at": round(time.time(), 1)}

    def restored(self, address: str, served: Path, variants: list[str]) -> None:
        """A model whose rungs were built before (a restart, a re-served model): its
        status entry from the stored record, no build (blocking: reads a file)."""
        try:
            record = json.loads(ladder_path(served).read_text())
        except (OSError, ValueError):
            record = {"ladder": [TOP, "int8"] if len(variants) > 1 else [TOP]}
        self.status(address, model=served.name, **outcome(record, variants))

    async def build(self, key: str, who: str, served: Path, child: list[str],
                    save_frames: Callable[[Path], None], frames: int, source: str,
                    offer: Callable[[], Awaitable[str | None]] | None = None) -> dict[str, Any]:
        """Build, check and time the rungs of ``served`` in the child ``python -m
        CHILD[0] SERVED FRAMES.npz CHILD[1:]`` from the ``frames`` input tensors
        ``save_frames`` writes; ``offer`` the ladder when it has more than the served
        model. ``key`` names the status entry, ``who`` the log lines. The outcome entry."""
        self.status(key, state="building", model=served.name, frames=frames, error=None)
        log.info("%s: building rungs (INT8, and OpenVINO's when it is installed) for %s from "
                 "%d %s (background, nice 19, one core)", who, served.name, frames, source)
        with tempfile.TemporaryDirectory(prefix="edged-rung-") as tmp:
            path = Path(tmp) / "frames.npz"
            await asyncio.to_thread(save_frames, path)
            record = await self._run(key, who, served, path, child, Path(tmp))
        entry = outcome(record)
        for rung, fate in entry["rungs"].items():
            if fate["state"] == "on the ladder":
                log.info("%s: rung %s accepted (%s)", who, rung, fate.get("check"))
            else:
                log.warning("%s: rung %s %s: %s", who, rung, fate["state"], fate.get("reason"))
        if entry["state"] != "offered" or offer is None:
            self.status(key, **entry)
            if entry["state"] != "offered":
                log.warning("%s: no rung offered: %s", who, entry["progress"])
            return entry
        err = await offer()
        if err:
            entry = {**entry, "state": "failed", "error": err}
            self.status(key, **entry)
            log.error("%s: rungs built but not offered: %s", who, err)
            return entry
        self.status(key, **entry)
        log.info("%s: ladder %s offered to the governor", who, " > ".join(entry["ladder"]))
        return entry

    async def _run(self, key: str, who: str, served: Path, frames: Path, child: list[str],
                   cwd: Path) -> dict[str, Any]:
        """The child runs in ``cwd`` (a temporary folder): ONNX Runtime's quantizer leaves
        files in its working directory."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", child[0], str(served), str(frames), *child[1:],
            "--low-priority", stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, cwd=str(cwd), env=_child_env())
        lowest_priority_one_core(proc.pid)  # from its start, not after its imports
        last = ""
        try:
            assert proc.stdout is not None
            async for raw in proc.stdout:
                line = raw.decode("utf-8", "replace").strip()
                if not line:
                    continue
                last = line
                if not line.startswith("{"):
                    self.status(key, progress=line[:200])
                    log.info("%s: rungs: %s", who, line[:200])
            await proc.wait()
        except asyncio.CancelledError:  # the daemon stops: so does the build
            proc.kill()
            await proc.wait()
            raise
        try:
            record = json.loads(last)
        except ValueError:
            record = {"ladder": [TOP], "error": f"the build exited {proc.returncode}: "
                      f"{last[:300]}"}
        return record if isinstance(record, dict) else {"ladder": [TOP], "error": last}
