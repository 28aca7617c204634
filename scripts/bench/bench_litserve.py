#!/usr/bin/env python3
"""edged against LitServe on the same ONNX model, 8 clients, batch 8, interleaved rounds.

Why a script: the comparison in docs/benchmarks.md must be reproducible by anyone,
with LitServe in a throwaway venv (it pulls FastAPI/uvicorn; never in edged's).

LitServe: one worker, ``LitAPI(max_batch_size=8, batch_timeout=0.002)``, an ORT session
with default options, the tensor sent as base64 of its float32 bytes in a JSON body
(``{"input": ...}``), the logits back the same way; clients are processes keeping one
request in flight each on a keep-alive HTTP connection. edged: the same model, default
daemon config (``max_batch_size = 8``), clients are ``edged bench`` processes (one
request in flight each) over ipc. Both servers are up for the whole run and the rounds
alternate, so both see the same background load; each is frozen (SIGSTOP) while the other
is measured, because LitServe's idle worker polls its queue and would take a core.

Usage::

    python3 -m venv /tmp/lsvenv && /tmp/lsvenv/bin/pip install litserve onnxruntime numpy
    .venv/bin/python scripts/bench/bench_litserve.py --litserve-python /tmp/lsvenv/bin/python \\
        --model .cache/bench-models/mobilenetv2-fp32.onnx [--clients 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import multiprocessing as mp
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from edged.testing.harness import Daemon, free_port, machine_info, percentiles_ms

SERVER = '''
import base64, sys
import numpy as np, onnxruntime as ort, litserve as ls

class OrtAPI(ls.LitAPI):
    def setup(self, device):
        self.sess = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
        self.name = self.sess.get_inputs()[0].name
    def decode_request(self, request):
        return np.frombuffer(base64.b64decode(request["input"]), np.float32).reshape(3, 224, 224)
    def batch(self, inputs):
        return np.stack(inputs)
    def predict(self, x):
        return self.sess.run(None, {self.name: x})[0]
    def unbatch(self, output):
        return list(output)
    def encode_response(self, output):
        return {"logits": base64.b64encode(np.ascontiguousarray(output).tobytes()).decode()}

if __name__ == "__main__":
    api = OrtAPI(max_batch_size=8, batch_timeout=0.002)
    ls.LitServer(api, accelerator="cpu", workers_per_device=1).run(
        host="127.0.0.1", port=int(sys.argv[2]), generate_client_file=False, log_level="warning")
'''


def http_client(port: int, body: bytes, duration: float, out: Any) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    lat: list[float] = []
    errors = 0
    end = time.monotonic() + duration
    t0 = time.monotonic()
    while time.monotonic() < end:
        t = time.perf_counter()
        conn.request("POST", "/predict", body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        if r.status == 200 and b"logits" in data:
            lat.append(time.perf_counter() - t)
        else:
            errors += 1
    out.put({"lat": lat, "errors": errors, "elapsed": time.monotonic() - t0})


def litserve_round(port: int, clients: int, duration: float) -> dict[str, Any]:
    x = np.random.default_rng(0).random((3, 224, 224), dtype=np.float32)
    body = json.dumps({"input": base64.b64encode(x.tobytes()).decode()}).encode()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=http_client, args=(port, body, duration, out))
             for _ in range(clients)]
    for p in procs:
        p.start()
    parts = [out.get(timeout=duration + 120) for _ in procs]
    for p in procs:
        p.join(10)
    lat = np.concatenate([np.asarray(p["lat"]) for p in parts])
    elapsed = max(p["elapsed"] for p in parts)
    return {"throughput": lat.size / elapsed, "errors": sum(p["errors"] for p in parts),
            **percentiles_ms(lat)}


def edged_round(endpoint: str, clients: int, duration: float, tmp: Path) -> dict[str, Any]:
    out = tmp / "edged-round.json"
    subprocess.run([sys.executable, "-m", "edged", "bench", "--endpoint", endpoint,
                    "--model", "bench", "--clients", str(clients), "--duration", str(duration),
                    "--json", str(out)], check=True, capture_output=True)
    d = json.loads(out.read_text())["rounds"][0]["daemon"]
    return {"throughput": d["throughput"], "errors": d["replies"] - d["ok"],
            **{k: d[k] for k in ("p50_ms", "p90_ms", "p99_ms")}}


def wait_http(port: int, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"LitServe did not come up on port {port}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--litserve-python", required=True, type=Path)
    ap.add_argument("--model", required=True, type=Path)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    model = args.model.resolve()
    tmp = Path(tempfile.mkdtemp(prefix="bench-litserve-"))
    (tmp / "server.py").write_text(SERVER)
    port = free_port()
    ls = subprocess.Popen([str(args.litserve_python), str(tmp / "server.py"), str(model),
                           str(port)], stdout=(tmp / "litserve.log").open("wb"),
                          stderr=subprocess.STDOUT, start_new_session=True)
    cfg = tmp / "edged.toml"
    cfg.write_text(f'[server]\n[metrics]\nlisten = "off"\n[[models]]\nname = "bench"\n'
                   f'required = true\nmax_batch_size = 8\n[[models.variants]]\nname = "fp32"\n'
                   f'backend = "onnxruntime"\npath = "{model}"\n')
    daemon = Daemon(cfg, tmp / "edged")
    result: dict[str, Any] = {"machine": machine_info(), "model": str(model),
                              "clients": args.clients, "rounds": []}
    try:
        wait_http(port)
        litserve_round(port, args.clients, 2.0)  # warm both
        for k in range(args.rounds):
            # Each server is frozen while the other's round runs: LitServe's worker polls
            # its queue and keeps about a core busy when idle (90-125 % CPU during edged's
            # rounds on 2 cores), which an idle neighbour must not take from the other.
            os.kill(daemon.pid, signal.SIGSTOP)
            try:
                lit = litserve_round(port, args.clients, args.duration)
            finally:
                os.kill(daemon.pid, signal.SIGCONT)
            os.killpg(ls.pid, signal.SIGSTOP)
            try:
                edg = edged_round(daemon.ipc, args.clients, args.duration, tmp)
            finally:
                os.killpg(ls.pid, signal.SIGCONT)
            result["rounds"].append({"litserve": lit, "edged": edg})
            print(f"round {k + 1}: LitServe {lit['throughput']:.1f} req/s p50 "
                  f"{lit['p50_ms']:.1f} p99 {lit['p99_ms']:.1f} ms | edged "
                  f"{edg['throughput']:.1f} req/s p50 {edg['p50_ms']:.1f} p99 "
                  f"{edg['p99_ms']:.1f} ms", flush=True)
    finally:
        daemon.stop()
        # LitServe's workers are children of the server: end the whole process group.
        os.killpg(ls.pid, signal.SIGTERM)
        try:
            ls.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(ls.pid, signal.SIGKILL)
    rounds = result["rounds"]
    result["machine"]["load_avg_end"] = machine_info()["load_avg"]
    result["ratios"] = {
        "throughput edged/litserve": statistics.median(
            r["edged"]["throughput"] / r["litserve"]["throughput"] for r in rounds),
        "p99 edged/litserve": statistics.median(
            r["edged"]["p99_ms"] / r["litserve"]["p99_ms"] for r in rounds),
    }
    print("median over rounds: " + ", ".join(f"{k} {v:.2f}"
                                             for k, v in result["ratios"].items()))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
