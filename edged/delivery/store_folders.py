"""The store's bytes: one folder per version under its digest, and the downloads under way.

Why apart from the index (``store_index``): the folders are what a version *is*, the index
what the store *says* of it; keeping the two apart keeps the crash rule of the store
(``edged.delivery.store``) in one place each: a version's folder is complete before the
index names it (written under a temporary name in ``incoming/``, every file fsynced, then
one rename into ``versions/``), and a folder leaves ``versions/`` in one rename before it
is deleted, so a crash never leaves a half-written or half-deleted folder under a digest.
The folders are content-addressed: the same bytes, whichever model or name they arrive
under, are one folder.

Not thread-safe by itself: the store calls it under its lock.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path

from edged.delivery.atomic import atomic_write, fsync_dir


def folder_bytes(path: Path) -> int:
    """Bytes of every file under ``path`` (0 when it is gone)."""
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, f)).st_size
    return total


class VersionFolders:
    """``versions/<digest>/`` and ``incoming/<digest>/`` under the store's root, and the
    bytes of each version folder the index names (``sizes``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.versions_dir = root / "versions"
        self.incoming_dir = root / "incoming"
        #: bytes of each version the index names (rungs built later included)
        self.sizes: dict[str, int] = {}

    def path(self, digest: str) -> Path:
        return self.versions_dir / digest

    def on_disk(self) -> set[str]:
        """The digests with a folder under ``versions/``."""
        if not self.versions_dir.is_dir():
            return set()
        return {p.name for p in self.versions_dir.iterdir() if p.is_dir()}

    def measure(self, digest: str) -> None:
        """Count the bytes of ``digest``'s folder (again)."""
        self.sizes[digest] = folder_bytes(self.path(digest))

    def incoming_bytes(self) -> int:
        return folder_bytes(self.incoming_dir)

    def used_bytes(self) -> int:
        """Every version named, and every partial download: what the quota counts."""
        return sum(self.sizes.values()) + self.incoming_bytes()

    # -- writing -----------------------------------------------------------------------
    def write_file(self, digest: str, filename: str, data: bytes) -> None:
        """``data`` as the one file ``filename`` of version ``digest``'s folder, written
        whole in ``incoming/`` and renamed into place; nothing when the folder is there
        already (the same bytes, stored before)."""
        final = self.path(digest)
        if final.is_dir():
            return
        self.incoming_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = Path(tempfile.mkdtemp(dir=self.incoming_dir, prefix=f".{digest[:12]}."))
        try:
            atomic_write(tmp / filename, data)
            self._commit_folder(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def incoming(self, digest: str) -> Path:
        """The folder a version being downloaded is written to (kept across restarts, so
        a download resumes; counted in the quota)."""
        p = self.incoming_dir / digest
        p.mkdir(parents=True, exist_ok=True, mode=0o700)
        return p

    def drop_incoming(self, keep: str | None = None) -> None:
        """Partial downloads given up (all but ``keep``)."""
        if self.incoming_dir.is_dir():
            for p in self.incoming_dir.iterdir():
                if p.name != keep:
                    shutil.rmtree(p, ignore_errors=True)

    def commit(self, folder: Path, digest: str) -> None:
        """A complete, verified download in ``folder`` becomes ``digest``'s folder (one
        rename); dropped when that folder is there already."""
        final = self.path(digest)
        if final.is_dir():
            shutil.rmtree(folder, ignore_errors=True)
        else:
            self._commit_folder(folder, final)

    def _commit_folder(self, tmp: Path, final: Path) -> None:
        for dirpath, _, files in os.walk(tmp):
            for f in files:
                with open(os.path.join(dirpath, f), "rb") as fh:
                    os.fsync(fh.fileno())
        self.versions_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.replace(tmp, final)
        fsync_dir(self.versions_dir)

    # -- removing ----------------------------------------------------------------------
    def drop_unreferenced(self, referenced: set[str]) -> None:
        """Every counted folder whose digest no model names any more goes."""
        for digest in [d for d in self.sizes if d not in referenced]:
            self.sizes.pop(digest, None)
            self.remove(digest)

    def remove(self, digest: str) -> None:
        """Renamed out of ``versions/`` first (one atomic step), then deleted."""
        path = self.path(digest)
        if not path.exists():
            return
        trash = self.root / f".trash-{path.name}-{os.getpid()}-{time.monotonic_ns()}"
        try:
            os.replace(path, trash)
        except OSError:
            trash = path
        shutil.rmtree(trash, ignore_errors=True)
