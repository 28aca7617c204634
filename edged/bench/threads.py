"""``edged bench --threads``: CPU per reply by thread of the daemon (and of the floor
servers), read from ``/proc`` at each measured phase's start and end.

Why: to see where the serving path's CPU goes -- the event loop, the model's
worker, ORT's intra-op pool, ZeroMQ's I/O thread -- next to the simplest servers doing
the same work. A sampling profiler shows where a thread's time goes; this shows what
each thread costs per reply, for every phase the bench runs, with no tool to install.

What is read: ``/proc/PID/task/TID/stat`` (``utime`` and ``stime``, in clock ticks of
``SC_CLK_TCK``) and ``.../comm`` per thread, and ``/proc/PID/stat`` for the whole process
(which also counts threads that exited). Threads are named by their kernel name: the
daemon gives its own pools their Python names (``edged.host.thread_names``); the main thread
is the event loop; ZeroMQ names its threads ``ZMQbg/...``; ORT's intra-op threads and
asyncio's default executor keep the process's name. Linux only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edged.host.thread_names import os_name

PROC = Path("/proc")
TICK_MS = 1000.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 10.0

MAIN = "main thread"
UNNAMED = "ORT intra-op & unnamed"
#: kernel-name prefix -> row, for the threads that name themselves
NAMED = (("ZMQbg/IO", "ZeroMQ I/O"), ("ZMQbg/Reaper", "ZeroMQ reaper"),
         ("edged-pre_", "decode pool"), ("edged-kserve_", "KServe pool"))
ORDER = [MAIN, "model worker", UNNAMED, *(r for _, r in NAMED)]


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` and every live process under it.

    Why the tree: a peer server computes in processes of its own (Triton's Python backend,
    MLServer's workers), so what serving a request costs is the tree's CPU, not the
    process answering the socket's (``edged bench`` prints it per request)."""
    import psutil

    try:
        top = psutil.Process(pid)
        procs = [top, *top.children(recursive=True)]
    except psutil.Error:
        return float("nan")
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue  # exited meanwhile
        total += t.user + t.system
    return total


def with_cpu(pid: int | None, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``run()``'s result (a phase of clients) with ``cpu_ms_per_request``: the process
    tree of ``pid``'s CPU over the phase per OK reply (left out when ``pid`` is None)."""
    if pid is None:
        return run()
    before = tree_cpu_s(pid)
    out = run()
    spent = tree_cpu_s(pid) - before
    ok = out.get("ok") or 0
    out["cpu_ms_per_request"] = 1000.0 * spent / ok if ok else float("nan")
    return out


@dataclass(frozen=True)
class Times:
    """A process's or a thread's CPU counters at one moment (clock ticks)."""
    comm: str
    utime: int
    stime: int


@dataclass(frozen=True)
class Snapshot:
    pid: int
    process: Times
    threads: dict[int, Times]


def read_stat(path: Path) -> Times:
    """``comm``, ``utime`` and ``stime`` from a ``stat`` file (the name is in
    parentheses and may hold spaces or parentheses itself)."""
    text = path.read_text()
    head, _, rest = text.rpartition(")")
    fields = rest.split()  # fields[0] is field 3 (state): utime is 14, stime 15
    return Times(head.partition("(")[2], int(fields[11]), int(fields[12]))


def snapshot(pid: int, *, process_first: bool) -> Snapshot:
    """Every thread of ``pid`` and the process total. At a phase's start read the
    process first and at its end last, so the process's delta covers the threads'."""
    proc = PROC / str(pid)
    try:
        whole = read_stat(proc / "stat") if process_first else None
        threads: dict[int, Times] = {}
        for task in proc.joinpath("task").iterdir():
            try:
                t = read_stat(task / "stat")
                comm = (task / "comm").read_text().rstrip("\n")
            except (FileNotFoundError, ProcessLookupError):
                continue  # the thread exited while we looked
            threads[int(task.name)] = Times(comm, t.utime, t.stime)
        if whole is None:
            whole = read_stat(proc / "stat")
    except (FileNotFoundError, ProcessLookupError):
        raise RuntimeError(f"process {pid} exited while its CPU was read") from None
    return Snapshot(pid, whole, threads)


def role(tid: int, comm: str, pid: int, main_comm: str, workers: dict[str, str]) -> str:
    """The row a thread is counted in."""
    if tid == pid:
        return MAIN
    if comm in workers:
        return f"model worker {workers[comm]}"
    for prefix, name in NAMED:
        if comm.startswith(prefix):
            return name
    return UNNAMED if comm == main_comm else comm


def worker_names(models: list[str]) -> dict[str, str]:
    """Kernel name of each model's worker thread (``edged.model.model``: ``edged-<model>_0``,
    cut to 15 bytes) -> the model(s) it may be."""
    out: dict[str, str] = {}
    for m in models:
        k = os_name(f"edged-{m}_0").decode()
        out[k] = f"{out[k]} | {m}" if k in out else m
    return out


def phase_cpu(start: Snapshot, end: Snapshot, workers: dict[str, str]) -> dict[str, Any]:
    """CPU milliseconds each thread and the process used between two snapshots."""
    main_comm = end.threads[end.pid].comm if end.pid in end.threads else end.process.comm
    rows = []
    for tid, e in sorted(end.threads.items()):
        s = start.threads.get(tid)  # None: started during the phase
        rows.append({"tid": tid, "comm": e.comm,
                     "role": role(tid, e.comm, end.pid, main_comm, workers),
                     "user_ms": (e.utime - (s.utime if s else 0)) * TICK_MS,
                     "sys_ms": (e.stime - (s.stime if s else 0)) * TICK_MS})
    p = {"user_ms": (end.process.utime - start.process.utime) * TICK_MS,
         "sys_ms": (end.process.stime - start.process.stime) * TICK_MS}
    attributed = sum(r["user_ms"] + r["sys_ms"] for r in rows)
    return {"pid": end.pid, "tick_ms": TICK_MS, "threads": rows, "process": p,
            "exited_threads": len(set(start.threads) - set(end.threads)),
            "unattributed_ms": p["user_ms"] + p["sys_ms"] - attributed}


class Watch:
    """The CPU of one process over phases: ``start()`` then ``stop()`` -> phase dict."""

    def __init__(self, pid: int, workers: dict[str, str] | None = None) -> None:
        self.pid, self.workers = pid, workers or {}
        self._start: Snapshot | None = None

    def start(self) -> None:
        self._start = snapshot(self.pid, process_first=True)

    def stop(self) -> dict[str, Any]:
        assert self._start is not None, "stop() before start()"
        end = snapshot(self.pid, process_first=False)
        return phase_cpu(self._start, end, self.workers)


def summarize(phases: list[tuple[dict[str, Any], int, dict[str, Any] | None]]
              ) -> dict[str, Any]:
    """One column of the table from a phase's rounds, each (its ``Watch.stop()``, its
    replies, its clients' CPU from ``drive``): milliseconds summed over the rounds and
    divided by all their replies."""
    replies = sum(n for _, n, _ in phases)
    roles: dict[str, dict[str, float]] = {}
    for cpu, _, _ in phases:
        count: dict[str, int] = {}
        for r in cpu["threads"]:
            acc = roles.setdefault(r["role"], {"threads": 0, "user_ms": 0.0, "sys_ms": 0.0})
            acc["user_ms"] += r["user_ms"]
            acc["sys_ms"] += r["sys_ms"]
            count[r["role"]] = count.get(r["role"], 0) + 1
        for name, n in count.items():
            roles[name]["threads"] = max(roles[name]["threads"], n)
    proc = {"user_ms": sum(c["process"]["user_ms"] for c, _, _ in phases),
            "sys_ms": sum(c["process"]["sys_ms"] for c, _, _ in phases)}
    out: dict[str, Any] = {
        "replies": replies, "pid": phases[-1][0]["pid"],
        "roles": {k: {**v, **_per(v, replies)} for k, v in roles.items()},
        "process": {**proc, **_per(proc, replies)},
        "unattributed_ms": sum(c["unattributed_ms"] for c, _, _ in phases),
        "exited_threads": sum(c["exited_threads"] for c, _, _ in phases),
        "threads": len(phases[-1][0]["threads"]),
        "resolution_ms_per_reply": TICK_MS / replies if replies else None}
    clients = [c for _, _, c in phases if c is not None]
    if len(clients) == len(phases):  # every round's clients reported their CPU
        cl = {"processes": clients[-1]["processes"],
              "user_ms": sum(c["user_s"] for c in clients) * 1000,
              "sys_ms": sum(c["sys_s"] for c in clients) * 1000}
        out["clients"] = {**cl, **_per(cl, replies)}
    return out


def _per(v: dict[str, Any], replies: int) -> dict[str, float | None]:
    return {"user_ms_per_reply": v["user_ms"] / replies if replies else None,
            "sys_ms_per_reply": v["sys_ms"] / replies if replies else None}


def table(columns: dict[str, dict[str, Any]]) -> list[str]:
    """The compact table: a row per thread role, user / sys ms per reply per column."""
    names = list(columns)
    seen = {r for c in columns.values() for r in c["roles"]}
    rank = {r: k for k, r in enumerate(ORDER)}
    roles = sorted(seen, key=lambda r: (rank.get("model worker" if r.startswith(
        "model worker") else r, len(ORDER)), r))
    w = max(15, *(len(n) for n in names))

    def cell(v: dict[str, Any] | None) -> str:
        if v is None or v.get("user_ms_per_reply") is None:
            return f"{'-':>{w + 2}}"
        return f"{v['user_ms_per_reply']:.3f} / {v['sys_ms_per_reply']:.3f}".rjust(w + 2)

    def row(label: str, texts: list[str]) -> str:
        return f"{label[:28]:<28}" + "".join(t.rjust(w + 2) for t in texts)

    lines = [f"CPU ms per reply by thread: user / sys (/proc; 1 tick = {TICK_MS:g} ms)",
             row("", names)]
    lines += [row(r, [cell(columns[n]["roles"].get(r)) for n in names]) for r in roles]
    lines.append(row("process total", [cell(columns[n]["process"]) for n in names]))
    lines.append(row("clients (all processes)", [cell(columns[n].get("clients"))
                                                 for n in names]))
    lines.append(row("exited threads + rounding", [
        _ms_per(columns[n]["unattributed_ms"], columns[n]["replies"]) for n in names]))
    lines.append(row("threads / replies", [f"{columns[n]['threads']} / {columns[n]['replies']}"
                                           for n in names]))
    return lines


def _ms_per(ms: float, replies: int) -> str:
    return f"{ms / replies:.3f}" if replies else "-"


def report(rounds: list[dict[str, Any]], columns: dict[str, str]) -> dict[str, Any]:
    """The ``threads`` part of the bench's result: per column (a phase key of the rounds
    -> its label) the summary over rounds, and the printed table's lines."""
    cols = {label: summarize([(r[key]["cpu"], r[key]["replies"], r[key].get("client_cpu"))
                              for r in rounds])
            for key, label in columns.items() if all("cpu" in r[key] for r in rounds)}
    return {"tick_ms": TICK_MS, "columns": cols, "table": table(cols) if cols else []}
