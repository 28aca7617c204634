#!/usr/bin/env python3
"""What the Python clients cost over a bare DEALER, against a running daemon, in one run.

    edged serve &
    python scripts/bench/bench_clients.py --model digits --requests 200 --rounds 5

Each round sends the same pipelined requests three ways (a bare pyzmq DEALER with
pre-encoded frames, ``AsyncClient`` with ``asyncio.gather``, and ``Client.send``/``recv``)
plus sequential ``Client.infer`` calls, and prints requests per second and the ratio to
the bare socket. The daemon's own work is the same for all; the difference is the client.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from collections.abc import Callable

import numpy as np
import zmq

from edged.client import AsyncClient, Client, build_infer


def bare(endpoint: str, model: str, x: np.ndarray, n: int) -> None:
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    header, frames = build_infer(model, x)
    msgs = [[json.dumps({"v": 1, **header, "id": i}).encode(), *frames] for i in range(n)]
    try:
        for m in msgs:
            sock.send_multipart(m)
        for _ in range(n):
            if not sock.poll(60_000):
                raise SystemExit("bench_clients: the daemon stopped answering")
            sock.recv_multipart()
    finally:
        sock.close()


def async_client(endpoint: str, model: str, x: np.ndarray, n: int) -> None:
    async def main() -> None:
        async with AsyncClient(endpoint, timeout_s=60) as c:
            await asyncio.gather(*(c.infer(model, x) for _ in range(n)))

    asyncio.run(main())


def sync_pipelined(endpoint: str, model: str, x: np.ndarray, n: int) -> None:
    with Client(endpoint, timeout_s=60) as c:
        for _ in range(n):
            c.send(*build_infer(model, x))
        for _ in range(n):
            c.recv().raise_for_status()


def sync_sequential(endpoint: str, model: str, x: np.ndarray, n: int) -> None:
    with Client(endpoint, timeout_s=60) as c:
        for _ in range(n):
            c.infer(model, x)


WAYS: dict[str, Callable[[str, str, np.ndarray, int], None]] = {
    "bare DEALER (pipelined)": bare,
    "AsyncClient (pipelined)": async_client,
    "Client send/recv (pipelined)": sync_pipelined,
    "Client.infer (one at a time)": sync_sequential,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--endpoint", "-e",
                    default=os.environ.get("EDGED_ENDPOINT", "tcp://127.0.0.1:5555"))
    ap.add_argument("--model", default="digits")
    ap.add_argument("--shape", default="1,1,28,28", help="float32 input shape")
    ap.add_argument("--requests", type=int, default=200,
                    help="pipelined at once: keep it within the model's max_queue")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    x = np.zeros([int(d) for d in args.shape.split(",")], np.float32)
    Client(args.endpoint).infer(args.model, x)  # fail early, and warm the model
    rates: dict[str, list[float]] = {k: [] for k in WAYS}
    for _ in range(args.rounds):
        for name, run in WAYS.items():
            t = time.perf_counter()
            run(args.endpoint, args.model, x, args.requests)
            rates[name].append(args.requests / (time.perf_counter() - t))
    base = statistics.median(rates["bare DEALER (pipelined)"])
    print(f"{args.requests} requests x {args.rounds} rounds to {args.model} at {args.endpoint} "
          "(median req/s, ratio to the bare socket)")
    for name, r in rates.items():
        med = statistics.median(r)
        print(f"  {name:<30} {med:9.0f} req/s  {med / base:5.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
