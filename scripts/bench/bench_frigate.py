#!/usr/bin/env python3
"""Frigate's protocol vs edged's native one: the same clients, the shipped person detector.

    PYTHONPATH=. python scripts/bench/bench_frigate.py --clients 4 --seconds 5 --rounds 8

Starts a daemon serving config.toml's person model with one ``[[server.frigate]]``
endpoint (timeout_ms 200, Frigate's default request_timeout_ms). Each round runs
``--clients`` REQ sockets in threads for ``--seconds``: first speaking Frigate's protocol
(``[{"shape","dtype","model_type"}, 320x320x3 uint8 RGB]`` -> 480 bytes), then edged's
native one with the same 320x320 frame (BGR, as OpenCV gives it) and pre-encoded headers.
Modes alternate per round so a change in the machine's load hits both. Prints per mode
throughput, p50/p99 reply time and replies that were all zeros (a request the daemon
could not serve in time), then the ratio frigate/native.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import zmq

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from edged.frigate_protocol import ZEROS  # noqa: E402
from edged.harness import Daemon, free_port, machine_info, percentiles_ms  # noqa: E402


def config(tmp: Path, port: int, timeout_ms: float) -> Path:
    text = (ROOT / "config.toml").read_text()
    block = text[text.index('[[models]]\nname = "person"'):text.index("[governor]")]
    block = block.replace('path = "models/', f'path = "{ROOT}/models/')
    p = tmp / "bench_frigate.toml"
    p.write_text(f'[server]\ndrain_timeout_s = 2.0\n[[server.frigate]]\n'
                 f'endpoint = "tcp://127.0.0.1:{port}"\nmodel = "person"\n'
                 f'timeout_ms = {timeout_ms}\n'
                 f'[metrics]\nlisten = "off"\n{block}')
    return p


def photo() -> np.ndarray:
    import matplotlib.cbook

    with matplotlib.cbook.get_sample_data("grace_hopper.jpg") as f:
        data = np.frombuffer(f.read(), np.uint8)
    return cv2.resize(cv2.imdecode(data, cv2.IMREAD_COLOR), (320, 320))


def messages(bgr: np.ndarray) -> dict[str, list[bytes]]:
    rgb = np.ascontiguousarray(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)[None])
    frigate = [json.dumps({"shape": list(rgb.shape), "dtype": "uint8",
                           "model_type": "ssd"}).encode(), rgb.tobytes()]
    native = [json.dumps({"v": 1, "id": 1, "model": "person", "inputs": [
        {"dtype": "uint8", "shape": list(bgr.shape)}]}).encode(), bgr.tobytes()]
    return {"frigate": frigate, "native": native}


def run_clients(endpoint: str, msg: list[bytes], mode: str, clients: int,
                seconds: float) -> dict[str, Any]:
    lat: list[float] = []
    zeros = 0
    lock = threading.Lock()
    start = threading.Barrier(clients + 1)
    stop_at = [0.0]

    def client() -> None:
        nonlocal zeros
        ctx = zmq.Context.instance()
        s = ctx.socket(zmq.REQ)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.RCVTIMEO, 10000)
        s.connect(endpoint)
        mine: list[float] = []
        z = 0
        start.wait()
        while time.perf_counter() < stop_at[0]:
            t0 = time.perf_counter()
            s.send_multipart(msg)
            reply = s.recv_multipart()
            mine.append(time.perf_counter() - t0)
            failed = (reply[-1] == ZEROS if mode == "frigate"
                      else b'"status":"OK"' not in reply[0])
            z += failed
        s.close()
        with lock:
            lat.extend(mine)
            zeros += z

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    stop_at[0] = time.perf_counter() + seconds
    t0 = time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    return {"requests": len(lat), "per_s": len(lat) / elapsed, "zeros_or_errors": zeros,
            "served_per_s": (len(lat) - zeros) / elapsed,
            **percentiles_ms(lat, (50, 99))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--timeout-ms", type=float, default=200.0,
                    help="the Frigate endpoint's timeout_ms (Frigate's request_timeout_ms); a "
                         "large value compares pure throughput, deadlines aside")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-frigate-") as tmp_s:
        tmp = Path(tmp_s)
        port = free_port()
        d = Daemon(config(tmp, port, args.timeout_ms), tmp)
        try:
            msgs = messages(photo())
            endpoints = {"frigate": f"tcp://127.0.0.1:{port}", "native": d.tcp}
            for mode in msgs:  # warm up both paths
                run_clients(endpoints[mode], msgs[mode], mode, args.clients, 1.0)
            rounds: dict[str, list[dict[str, Any]]] = {"frigate": [], "native": []}
            for r in range(args.rounds):
                for mode in (("frigate", "native") if r % 2 == 0 else ("native", "frigate")):
                    res = run_clients(endpoints[mode], msgs[mode], mode, args.clients,
                                      args.seconds)
                    rounds[mode].append(res)
                    print(f"round {r + 1} {mode:<8} {res['served_per_s']:7.1f} served/s  p50 "
                          f"{res['p50_ms']:6.1f} ms  p99 {res['p99_ms']:6.1f} ms  "
                          f"zeros/errors {res['zeros_or_errors']}", flush=True)
        finally:
            d.stop()
    total = {m: sum(x["requests"] - x["zeros_or_errors"] for x in v) / (args.seconds * len(v))
             for m, v in rounds.items()}
    worst_p99 = {m: max(x["p99_ms"] for x in v) for m, v in rounds.items()}
    ratio = total["frigate"] / total["native"]
    zeros = sum(x["zeros_or_errors"] for x in rounds["frigate"])
    asked = sum(x["requests"] for x in rounds["frigate"])
    print(f"\n{args.clients} clients, {args.rounds} rounds of {args.seconds:g} s per mode, "
          f"frigate timeout_ms {args.timeout_ms:g}")
    for m in rounds:
        print(f"{m:<8} {total[m]:7.1f} served/s   worst-round p99 {worst_p99[m]:6.1f} ms")
    print(f"frigate: {zeros} of {asked} requests answered zeros (past the deadline or failed)")
    print(f"frigate/native served throughput {ratio:.3f} (target >= 0.95)")
    if args.json:
        print(json.dumps({"rounds": rounds, "throughput": total, "ratio": ratio,
                          "machine": machine_info()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
