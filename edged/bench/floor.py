"""The floors of ``edged bench --floor``: the two simplest ZeroMQ servers anyone could write
around one ONNX Runtime session, run beside the daemon for the same model and clients.

Why: a ratio to raw in-process ``session.run`` mixes what serving costs with what any
socket costs (copies, ZeroMQ's I/O thread, the clients' own CPU). These two servers pay
the socket and nothing else, so the daemon read against them shows its own cost:

- *one-thread*: ``recv -> session.run -> send``, one request at a time (the latency floor);
- *batching*: block for one request, drain up to ``FLOOR_BATCH`` more that are already
  waiting (``NOBLOCK``), one ``session.run`` on the stacked rows, one reply each (the
  throughput floor).

Both are ROUTER sockets on the daemon's kind of endpoint (``ipc://`` in a temporary
directory, or loopback tcp), ORT at its default session options with
``intra_op_num_threads`` = the cores this process may run on (so ``taskset`` limits them
as it limits the daemon). They reply
``{"status":"OK"}`` and the outputs, in arrival order; they read only the request's last
frame (the tensor), so the bench's own clients and messages drive them unchanged.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from edged.testing.harness import free_port

#: rows the batching floor stacks at most (as floor.py)
FLOOR_BATCH = 8
REPLY_HEADER = b'{"status":"OK"}'


def cores() -> int:
    """CPUs this process may run on (taskset and cgroups included)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def floor_session(model: Path) -> Any:
    """ORT defaults, ``intra_op_num_threads`` = the usable cores (spinning as ORT does)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = cores()
    so.log_severity_level = 3
    return ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])


def check_single_input(model: Path, header: dict[str, Any]) -> str | None:
    """Why the floors cannot serve this request (None: they can). They take one raw
    tensor for the model's one input, batch dimension first."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    ins = sess.get_inputs()
    metas = header.get("inputs", [])
    if len(ins) != 1 or len(metas) != 1:
        return f"the floors serve one-input models; {model.name} has {len(ins)} input(s)"
    m = metas[0]
    if m.get("encoding", "raw") != "raw" or "shape" not in m:
        return "the floors take a raw tensor: use --input random or --input npy"
    if len(m["shape"]) != len(ins[0].shape) or m["shape"][0] != 1:
        return (f"the floors take one row of the model's input {ins[0].shape}; the request "
                f"is {m['shape']}")
    return None


def serve(model: str, endpoint: str, batching: bool, dtype: str, item: tuple[int, ...],
          ready: Any) -> None:
    """A floor server (child process): runs until terminated."""
    import zmq

    sess = floor_session(Path(model))
    name = sess.get_inputs()[0].name
    dt = np.dtype(dtype)
    buf = np.empty((FLOOR_BATCH, *item), dt)
    sess.run(None, {name: buf[:1]})
    if batching:
        sess.run(None, {name: buf})
    r = zmq.Context().socket(zmq.ROUTER)
    r.bind(endpoint)
    ready.put(endpoint)
    while True:
        msgs = [r.recv_multipart(copy=False)]
        while batching and len(msgs) < FLOOR_BATCH:
            try:
                msgs.append(r.recv_multipart(copy=False, flags=zmq.NOBLOCK))
            except zmq.Again:
                break
        for k, fr in enumerate(msgs):
            buf[k] = np.frombuffer(fr[-1].buffer, dt).reshape(item)
        ys = sess.run(None, {name: buf[:len(msgs)]})
        for k, fr in enumerate(msgs):
            r.send_multipart([fr[0], REPLY_HEADER] + [y[k:k + 1] for y in ys], copy=False)


class Floors:
    """Both floor servers as child processes, for one model and one request shape."""

    def __init__(self, model: Path, header: dict[str, Any], daemon_endpoint: str) -> None:
        meta = header["inputs"][0]
        self._tmp = tempfile.TemporaryDirectory(prefix="edged-floor-")
        ctx = mp.get_context("spawn")
        ready = ctx.Queue()
        self.procs: list[Any] = []
        eps = []
        for kind in ("one", "batch"):
            ep = (f"ipc://{self._tmp.name}/{kind}.sock" if daemon_endpoint.startswith("ipc://")
                  else f"tcp://127.0.0.1:{free_port()}")
            p = ctx.Process(target=serve, daemon=True,
                            args=(str(model), ep, kind == "batch", meta["dtype"],
                                  tuple(meta["shape"][1:]), ready))
            p.start()
            self.procs.append(p)
            eps.append(ep)
        try:
            for _ in self.procs:
                ready.get(timeout=120)
        except Exception:
            self.close()
            raise RuntimeError("the floor servers did not start within 120 s") from None
        self.one_thread, self.batching = eps
        #: their PIDs (edged bench --threads reads their threads' CPU in /proc)
        self.one_thread_pid, self.batching_pid = (p.pid for p in self.procs)

    def close(self) -> None:
        for p in self.procs:
            if p.is_alive():
                p.terminate()
            p.join(5)
        self._tmp.cleanup()

    def __enter__(self) -> Floors:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
