"""A client run *inside* the systemd test namespace (its network has only loopback).

Started by tests/test_systemd_real.py through nsenter; prints one JSON line with
what it saw, so the test can assert on replies it could not receive itself.

    ns_client.py load ENDPOINT SECONDS     digits requests, 8 in flight, for SECONDS
    ns_client.py slow ENDPOINT N XMAX      N requests to the "slow" model, then wait
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter

import numpy as np

from edged.client import Client, ClientTimeout, build_infer


def load(endpoint: str, seconds: float) -> dict[str, object]:
    x = np.random.default_rng(0).random((1, 1, 28, 28), dtype=np.float32)
    statuses: Counter[str] = Counter()
    in_flight = 0
    end = time.monotonic() + seconds
    with Client(endpoint, timeout_s=30) as c:
        print(json.dumps({"started": True}), flush=True)
        while time.monotonic() < end or in_flight:
            while in_flight < 8 and time.monotonic() < end:
                c.send(*build_infer("digits", x))
                in_flight += 1
            try:
                r = c.recv(30)
            except ClientTimeout:
                statuses["NO_REPLY"] += in_flight
                break
            in_flight -= 1
            statuses[str(r.header.get("status"))] += 1
    return {"statuses": dict(statuses)}


def slow(endpoint: str, n: int, xmax: float) -> dict[str, object]:
    x = np.full((1, 64), xmax, np.float32)
    statuses: Counter[str] = Counter()
    with Client(endpoint, timeout_s=60) as c:
        for i in range(n):
            c.send(*build_infer("slow", x, id=i))
        print(json.dumps({"sent": n}), flush=True)
        for _ in range(n):
            try:
                statuses[str(c.recv(60).header.get("status"))] += 1
            except ClientTimeout:
                statuses["NO_REPLY"] += 1
                break
    return {"statuses": dict(statuses)}


def main(argv: list[str]) -> int:
    mode, endpoint = argv[0], argv[1]
    if mode == "load":
        out = load(endpoint, float(argv[2]))
    elif mode == "slow":
        out = slow(endpoint, int(argv[2]), float(argv[3]))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
