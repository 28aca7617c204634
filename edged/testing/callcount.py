"""The daemon run with every Python call on its serving threads counted: the hot path's guard.

Why a count and not a time: a time depends on the machine, its clock and what else runs; the
number of Python calls one request makes on an idle daemon does not. A change that puts work
back on the request path (a per-request object, a metrics lookup, a hop through the event
loop) adds calls, and ``tests/test_hot_path_calls.py`` fails on it on any CPU, not a benchmark
on one (docs/architecture.md, "The hot path").

    python -m edged.testing.callcount --counts SOCKET serve --config CONFIG   # a real daemon
    python -m edged.testing.callcount --profile DIR serve --config CONFIG     # cProfile per thread

``--counts``: the daemon runs as ``edged serve`` does, with a profile hook on the threads that
serve requests (the event loop, the models' workers, the decode pool, gRPC's handlers and
KServe's pool); a thread of this module, itself not counted, answers every connection to the
Unix socket ``SOCKET`` with the counts so far as one JSON line: ``{"calls": {thread kind: n},
"functions": {"file:line name": n}}`` (functions only with ``--functions``). The caller
reads the counts, sends a request, waits for its reply and reads them again.

``--profile``: the same threads each run a ``cProfile.Profile``; a connection to
``DIR/snap.sock`` writes their statistics so far (``take_snapshot``), and two snapshots give
what a phase in between cost (``snapshot_delta``; ``scripts/bench/profile_hot_path.py``).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import cProfile
import json
import marshal
import os
import runpy
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: the threads a request runs on, by the prefix of their Python name -> the kind reported
SERVING_THREADS = (("MainThread", "loop"), ("edged-pre", "decode"), ("edged-grpc", "grpc"),
                   ("edged-kserve", "kserve"), ("edged-", "worker"))


def thread_kind(name: str) -> str | None:
    """The kind of a serving thread (None: not one: metrics, governor, shadow, this module)."""
    if name.startswith(("edged-shadow", "edged-preopen", "edged-callcount")):
        return None
    for prefix, kind in SERVING_THREADS:
        if name.startswith(prefix):
            return kind
    return None


class Counts:
    """Python calls per serving thread kind (and per function when asked), each thread
    counting into its own counter so that no increment races another thread's."""

    def __init__(self, functions: bool) -> None:
        self.functions = functions
        self._threads: list[tuple[str, collections.Counter[str], list[int]]] = []

    def hook(self) -> Callable[[Any, str, Any], None] | None:
        """The profile function for the calling thread, or None when it is not counted."""
        kind = thread_kind(threading.current_thread().name)
        if kind is None:
            return None
        per_function: collections.Counter[str] = collections.Counter()
        total = [0]
        self._threads.append((kind, per_function, total))
        if not self.functions:
            def count(frame: Any, event: str, arg: Any) -> None:
                if event == "call":
                    total[0] += 1
            return count

        def count_by_function(frame: Any, event: str, arg: Any) -> None:
            if event == "call":
                total[0] += 1
                co = frame.f_code
                per_function[f"{co.co_filename}:{co.co_firstlineno} {co.co_name}"] += 1
        return count_by_function

    def snapshot(self) -> dict[str, Any]:
        calls: collections.Counter[str] = collections.Counter()
        functions: collections.Counter[str] = collections.Counter()
        for kind, per_function, total in list(self._threads):
            calls[kind] += total[0]
            functions.update(per_function)
        return {"calls": dict(calls), "functions": dict(functions)}


def _install(make: Callable[[], Callable[[Any, str, Any], None] | None]) -> None:
    """``make()``'s hook on this thread and on every thread started from now on (each
    thread decides once, on its first event, whether it is counted)."""
    def first_event(frame: Any, event: str, arg: Any) -> None:
        sys.setprofile(make())

    threading.setprofile(first_event)
    sys.setprofile(make())


def _answer(path: str | Path, line: Callable[[], str]) -> None:
    """Answer every connection to the Unix socket ``path`` with ``line()``, from a thread
    of this module's own (never counted nor profiled)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(4)

    def run() -> None:
        while True:
            conn, _ = srv.accept()
            with conn:
                conn.sendall(line().encode() + b"\n")

    threading.Thread(target=run, name="edged-callcount", daemon=True).start()


def _ask(path: str | Path, timeout_s: float) -> bytes:
    """The one line this module's side socket at ``path`` answers a connection with."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        s.connect(str(path))
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            data += chunk
    return data


def read_counts(path: str | Path) -> dict[str, Any]:
    """The counts a ``--counts`` daemon has so far (its socket at ``path``)."""
    return json.loads(_ask(path, 10))


def calls_per_request(path: str | Path, request: Callable[[], object], samples: int = 7,
                      settle_s: float = 0.02) -> dict[str, int]:
    """The Python calls ``request()`` (a request sent and its reply received) costs the
    daemon whose counts are at ``path``, by thread kind: the sample with the fewest calls
    of ``samples``, so a timer that fired meanwhile (the governor's tick, a metrics flush)
    does not count. ``settle_s`` lets the daemon finish what follows a reply."""
    best: dict[str, int] | None = None
    for _ in range(samples):
        before = read_counts(path)["calls"]
        request()
        time.sleep(settle_s)
        after = read_counts(path)["calls"]
        got = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        if best is None or sum(got.values()) < sum(best.values()):
            best = got
    assert best is not None
    return best


class Profiles:
    """One ``cProfile.Profile`` per serving thread. Each connection to ``DIR/snap.sock``
    writes every thread's statistics so far to ``DIR/<n>/<thread>.pstats`` (``n`` counts
    from 0 and is the reply), without stopping the profiles: a caller takes one snapshot
    after its warm-up and one at the end and reads the difference (``snapshot_delta``)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self._profiles: list[tuple[str, cProfile.Profile]] = []
        self._taken = 0

    def start(self) -> None:
        def first_event(frame: Any, event: str, arg: Any) -> None:
            sys.setprofile(None)
            name = threading.current_thread().name
            if thread_kind(name) is not None:
                p = cProfile.Profile()
                self._profiles.append((name, p))
                p.enable()

        self.out.mkdir(parents=True, exist_ok=True)
        _answer(self.out / "snap.sock", lambda: str(self.snapshot()))
        threading.setprofile(first_event)
        p = cProfile.Profile()
        self._profiles.append(("MainThread", p))
        p.enable()

    def snapshot(self) -> int:
        n, self._taken = self._taken, self._taken + 1
        where = self.out / str(n)
        where.mkdir(parents=True, exist_ok=True)
        for name, p in list(self._profiles):
            p.snapshot_stats()  # reads the counters; the profile goes on
            with open(where / f"{name}.pstats", "wb") as f:
                marshal.dump(p.stats, f)
        return n


def take_snapshot(out: Path) -> Path:
    """Ask a ``--profile out`` daemon for a snapshot; the folder its statistics are in."""
    return out / _ask(out / "snap.sock", 60).decode().strip()


def snapshot_delta(before: Path, after: Path) -> dict[str, dict[tuple[str, int, str], float]]:
    """Per thread: each function's own time (seconds) between two snapshots."""
    out: dict[str, dict[tuple[str, int, str], float]] = {}
    for f in sorted(after.glob("*.pstats")):
        with open(f, "rb") as fh:
            now = marshal.load(fh)
        then: dict[Any, Any] = {}
        if (before / f.name).exists():
            with open(before / f.name, "rb") as fh:
                then = marshal.load(fh)
        out[f.stem] = {k: v[2] - (then[k][2] if k in then else 0.0) for k, v in now.items()}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m edged.testing.callcount",
                                 description="Run the daemon with its serving threads' Python "
                                             "calls counted (--counts) or profiled (--profile).")
    ap.add_argument("--counts", metavar="SOCKET", help="serve the counts on this Unix socket")
    ap.add_argument("--functions", action="store_true", help="count per function too")
    ap.add_argument("--profile", metavar="DIR", type=Path,
                    help="cProfile every serving thread; snapshots on DIR/snap.sock")
    args, rest = ap.parse_known_args(argv)

    def edged_main(argv: list[str]) -> int:
        # ``python -m edged ARGS`` in this process, as the harness starts it in its own
        # (by module name: the test harness sits below the CLI in the layers)
        sys.argv = ["edged", *argv]
        try:
            runpy.run_module("edged", run_name="__main__", alter_sys=True)
        except SystemExit as e:
            return e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        return 0

    if args.profile is not None:
        Profiles(args.profile).start()
        return edged_main(rest)
    counts = Counts(args.functions)
    if args.counts:
        _answer(args.counts, lambda: json.dumps(counts.snapshot()))
    _install(counts.hook)
    return edged_main(rest)


if __name__ == "__main__":
    sys.exit(main())
