"""The ONNX Runtime optimized-model cache (``optimized_model_path``).

Why: graph optimization (constant folding, fusions, NCHWc layout at level "all")
runs on every session creation and is a large share of a variant's load time; a
governor swap or a restart pays it again. ORT can write the optimized graph out,
and a session created from that file with optimizations off skips the work.

A cached graph is only valid for the exact inputs that produced it, so it is used
only when all of these hold, else it is rebuilt (and rewritten) from the source:

* the cache file is newer than the source model;
* its key file (``CACHE.key.json``) matches: ORT version, machine and CPU model
  (level "all" bakes in this CPU's vector width), the source's path, size and
  mtime, and every session option the backend sets.

The cache is written to a temporary name and renamed, then the key is written, so
a crash mid-write leaves no cache that looks valid.
"""

from __future__ import annotations

import json
import logging
import os
import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edged.backends.support import isa
from edged.errors import ArtifactError

log = logging.getLogger(__name__)

FORMAT = "edged-ort-cache/1"


@dataclass(frozen=True)
class CachePlan:
    """What to open and what to write; see :func:`plan`."""

    load: Path  # the model file to give InferenceSession
    from_cache: bool  # True: ``load`` is the cache, open it with optimizations off
    write_to: Path | None  # rebuild: ORT writes the optimized graph here (temporary);
    # None when the cache folder cannot be written (the model still loads, uncached)
    cache: Path
    key: dict[str, Any]


def key_path(cache: Path) -> Path:
    return cache.with_name(cache.name + ".key.json")


def make_key(source: Path, ort_version: str, settings: dict[str, Any]) -> dict[str, Any]:
    st = source.stat()
    return {
        "format": FORMAT,
        "onnxruntime": ort_version,
        "machine": platform.machine(),
        "cpu": isa.cpu_name(),
        "source": {"path": str(source.resolve()), "size": st.st_size,
                   "mtime_ns": st.st_mtime_ns},
        "session_options": settings,
    }


def plan(source: Path, cache: Path, key: dict[str, Any]) -> CachePlan:
    """Load ``cache`` if it is newer than ``source`` and its key matches, else rebuild."""
    reason = _stale(source, cache, key)
    if reason is None:
        return CachePlan(cache, True, None, cache, key)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        writable = os.access(cache.parent, os.W_OK)
    except OSError:
        writable = False
    if not writable:
        log.warning("optimized-model cache %s: folder not writable; loading %s without a "
                    "cache (%s)", cache, source.name, reason)
        return CachePlan(source, False, None, cache, key)
    log.info("optimized-model cache %s: rebuilding (%s)", cache, reason)
    tmp = cache.with_name(f".{cache.stem}.{os.getpid()}.tmp{cache.suffix}")
    return CachePlan(source, False, tmp, cache, key)


def _stale(source: Path, cache: Path, key: dict[str, Any]) -> str | None:
    """Why the cache cannot be used, or None when it can."""
    if not cache.is_file():
        return "no cache yet"
    if cache.stat().st_mtime_ns < source.stat().st_mtime_ns:  # equal: one clock tick
        return "older than the source model"
    try:
        stored = json.loads(key_path(cache).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return f"no readable key file {key_path(cache).name}"
    if stored != key:
        changed = sorted(k for k in set(stored) | set(key) if stored.get(k) != key.get(k))
        return f"key differs in {', '.join(changed)}"
    return None


def commit(p: CachePlan) -> None:
    """After a rebuild's session was created: move the new cache in place, write its key.

    Best effort: a cache that cannot be written (read-only folder) only costs start-up
    time, so it is logged, never raised.
    """
    if p.write_to is None:
        return
    try:
        if not p.write_to.is_file():
            log.warning("optimized-model cache %s: onnxruntime wrote nothing", p.cache)
            return
        key_path(p.cache).unlink(missing_ok=True)
        p.write_to.replace(p.cache)
        tmp_key = key_path(p.write_to)
        tmp_key.write_text(json.dumps(p.key, indent=2) + "\n")
        tmp_key.replace(key_path(p.cache))
    except OSError as e:
        log.warning("optimized-model cache %s not written: %s", p.cache, e)
    finally:
        p.write_to.unlink(missing_ok=True)


def discard(p: CachePlan) -> None:
    """A cache that ORT refused to load: remove it so the rebuild replaces it."""
    log.warning("optimized-model cache %s could not be loaded; rebuilding it", p.cache)
    key_path(p.cache).unlink(missing_ok=True)
    p.cache.unlink(missing_ok=True)


def cached_session(ort: Any, source: Path, cache: Path, settings: dict[str, Any], so: Any,
                   open_session: Callable[[Path], Any]) -> Any:
    """A session from the valid cache of ``source``, else from ``source`` (rewriting it).

    ``so`` is the backend's SessionOptions (changed here: optimizations off for a
    cache, ``optimized_model_filepath`` for a rebuild); ``open_session(model)`` creates
    the session with it and raises ArtifactError on failure. ``settings`` are the
    session options that go into the key (JSON-able).
    """
    key = make_key(source, ort.__version__, json.loads(json.dumps(settings, default=str)))
    p = plan(source, cache, key)
    if p.from_cache:
        level = so.graph_optimization_level
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        try:
            session = open_session(p.load)
            log.info("%s: loaded from its optimized-model cache %s", source.name, cache)
            return session
        except ArtifactError:
            discard(p)
            so.graph_optimization_level = level
            p = plan(source, cache, key)
    if p.write_to is not None:
        so.optimized_model_filepath = str(p.write_to)
    session = open_session(source)
    commit(p)
    return session
