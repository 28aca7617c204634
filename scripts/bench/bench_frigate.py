#!/usr/bin/env python3
"""Frigate's protocol vs edged's native one: the same clients, the shipped person detector.

    PYTHONPATH=. python scripts/bench/bench_frigate.py --clients 4 --seconds 5 --rounds 8

Starts a daemon serving config.toml's person model with one ``[[server.frigate]]``
endpoint (timeout_ms 200, Frigate's default request_timeout_ms). Each round runs
``--clients`` REQ sockets in threads for ``--seconds``: first speaking Frigate's protocol
through ``edged.testing.frigate_plugin`` (``[{"shape","dtype","model_type"}, 320x320x3 uint8 RGB]``
-> 480 bytes, 10 s client timeouts), then edged's native one with the same 320x320 frame
(BGR, as OpenCV gives it) and pre-encoded headers.
Modes alternate per round so a change in the machine's load hits both. Prints per mode
throughput, p50/p99 reply time and replies that were all zeros (a request the daemon
could not serve in time), then the ratio frigate/native.

    PYTHONPATH=. python scripts/bench/bench_frigate.py --plugin --clients 4,8 --seconds 10

``--plugin`` measures what Frigate's own plugin sees, with ``edged.testing.frigate_plugin``
(REQ, 200 ms timeouts, the handshake, a socket reset and new handshake after a timeout):
the warm handshake answer time (p50/p99 of ``--handshakes`` handshakes on a configured
endpoint), transfer -> first detection for the 12 MB person detector sent to an
``accept_models`` endpoint (fresh state directory), then for each client count the
detections/s (non-zero replies), zero replies, resets and p99 of plugin clients on the
sent model, beside native clients on the same model; then waits for the sent model's INT8
rung (built in the background from the frames sent), pins the governor one rung down and
measures the plugin clients again: the rung's build time and speed-up. Needs a quiet
machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import zmq

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from edged.testing.configs import shipped_person_block  # noqa: E402
from edged.testing.frigate_plugin import FrigateDetector  # noqa: E402
from edged.testing.harness import Daemon, free_port, machine_info, percentiles_ms  # noqa: E402


def config(tmp: Path, port: int, timeout_ms: float) -> Path:
    block = shipped_person_block(ROOT)
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


def messages(bgr: np.ndarray) -> dict[str, Any]:
    """What each mode sends: Frigate's tensor (``[1, 320, 320, 3]`` RGB, which
    ``FrigateDetector.detect_raw`` frames) and the native request of the same frame."""
    rgb = np.ascontiguousarray(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)[None])
    native = [json.dumps({"v": 1, "id": 1, "model": "person", "inputs": [
        {"dtype": "uint8", "shape": list(bgr.shape)}]}).encode(), bgr.tobytes()]
    return {"frigate": rgb, "native": native}


def closed_loop(calls: list[Callable[[], Any]], served: Callable[[Any], bool],
                seconds: float) -> dict[str, Any]:
    """Each of ``calls`` in its own thread, back to back for ``seconds``, all starting
    together: every call's reply time and how many replies ``served`` rejects."""
    lat: list[float] = []
    missed = 0
    zero_at: list[float] = []  # seconds into the run of each rejected reply
    lock = threading.Lock()
    start = threading.Barrier(len(calls) + 1)
    stop_at = [0.0]
    began = [0.0]

    def client(call: Callable[[], Any]) -> None:
        nonlocal missed
        mine: list[float] = []
        m = 0
        start.wait()
        zeros: list[float] = []
        while time.perf_counter() < stop_at[0]:
            t0 = time.perf_counter()
            reply = call()
            mine.append(time.perf_counter() - t0)
            if not served(reply):
                m += 1
                zeros.append(t0 - began[0])
        with lock:
            lat.extend(mine)
            missed += m
            zero_at.extend(zeros)

    threads = [threading.Thread(target=client, args=(c,)) for c in calls]
    for t in threads:
        t.start()
    stop_at[0] = time.perf_counter() + seconds
    t0 = began[0] = time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    return {"requests": len(lat), "missed": missed, "elapsed_s": elapsed,
            "zero_at_s": sorted(round(z, 1) for z in zero_at),
            **percentiles_ms(lat, (50, 99))}


def native_socket(endpoint: str, msg: list[bytes]) -> tuple[Callable[[], Any], Any]:
    """A REQ socket sending the pre-encoded native request; its call and the socket."""
    s = zmq.Context.instance().socket(zmq.REQ)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVTIMEO, 10000)
    s.connect(endpoint)

    def call() -> list[bytes]:
        s.send_multipart(msg)
        return s.recv_multipart()

    return call, s


def run_clients(endpoint: str, msg: Any, mode: str, clients: int,
                seconds: float) -> dict[str, Any]:
    """``clients`` threads on one protocol: Frigate's through ``edged.testing.frigate_plugin``
    (10 s timeouts: the endpoint's own ``timeout_ms`` decides), or the native ``msg``."""
    if mode == "frigate":
        dets = [FrigateDetector(endpoint, "/m/bench.onnx", "ssd", 10000)
                for _ in range(clients)]
        if not all(f.ready for f in dets):
            raise SystemExit(f"bench_frigate: handshake failed: {dets[0].events.errors}")
        r = closed_loop([lambda f=f: f.detect_raw(msg) for f in dets],
                        lambda reply: bool(reply.any()), seconds)
        for f in dets:
            f.close()
    else:
        pairs = [native_socket(endpoint, msg) for _ in range(clients)]
        r = closed_loop([call for call, _ in pairs],
                        lambda reply: b'"status":"OK"' in reply[0], seconds)
        for _, sock in pairs:
            sock.close()
    return {"requests": r["requests"], "per_s": r["requests"] / r["elapsed_s"],
            "zeros_or_errors": r["missed"],
            "served_per_s": (r["requests"] - r["missed"]) / r["elapsed_s"],
            "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"]}


def plugin_config(tmp: Path, ports: tuple[int, int], timeout_ms: float) -> Path:
    p = config(tmp, ports[0], timeout_ms)
    text = p.read_text().replace("[server]\n", f'[server]\nstate_dir = "{tmp / "state"}"\n', 1)
    text = text.replace("[metrics]", f'[[server.frigate]]\nendpoint = '
                        f'"tcp://127.0.0.1:{ports[1]}"\naccept_models = true\n'
                        f"timeout_ms = {timeout_ms}\n[metrics]", 1)
    (tmp / "sysfs").mkdir(exist_ok=True)
    p.write_text(text + f'[governor]\nenabled = true\nsysfs_root = "{tmp / "sysfs"}"\n'
                 "interval_s = 0.2\nswap_min_interval_s = 0\n[[governor.levels]]\n"
                 'name = "warm"\nenter_c = 70.0\nexit_c = 65.0\nladder_steps = 1\n')
    return p


def wait_for_rung(d: Daemon, endpoint: str, timeout_s: float = 900.0) -> dict[str, Any]:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        g = d.ctl({"op": "status"})["frigate_rungs"].get(endpoint, {})
        if not g:
            return {"state": "not started (fewer frames served than int8_frames)"}
        if g.get("state") in ("offered", "refused", "failed"):
            return g
        time.sleep(1.0)
    return {"state": "timed out"}


#: what ``--model`` sends: the file, its Frigate ``model_type``
SENT_MODELS = {"person": (ROOT / "models" / "person" / "ssdlite-fp32.onnx", "ssd"),
               "digits-det": (ROOT / "models" / "digits-det" / "det-fp32.onnx", "yologeneric")}


def sent_frame(name: str) -> np.ndarray:
    """The tensor Frigate sends for ``name``: the photo as ``[1,320,320,3]`` uint8 RGB
    (Frigate's defaults) for the SSD; a held-out digits scene as YOLOv9's documented
    config sends it (``[1,3,160,160]`` float 0..1) for digits-det."""
    if name == "person":
        return messages(photo())["frigate"]
    with np.load(ROOT / "models" / "digits-det" / "val.npz") as z:
        image = z["images"][0]
    return np.ascontiguousarray(image.transpose(2, 0, 1)[None].astype(np.float32) / 255.0)


def plugin_clients(endpoint: str, tensor: np.ndarray, clients: int, seconds: float,
                   sent: str = "person") -> dict[str, Any]:
    """``clients`` FrigateDetector processes' worth of threads calling detect_raw."""
    model, model_type = SENT_MODELS[sent]
    started = time.strftime("%H:%M:%S")
    dets = [FrigateDetector(endpoint, model, model_type, 200) for _ in range(clients)]
    r = closed_loop([lambda f=f: f.detect_raw(tensor) for f in dets],
                    lambda reply: bool(reply[0, 1] > 0), seconds)
    resets = sum(f.events.resets for f in dets)
    not_ready = sum(not f.ready for f in dets)
    for f in dets:
        f.close()
    return {"clients": clients,
            "detections_per_s": (r["requests"] - r["missed"]) / r["elapsed_s"],
            "zeros": r["missed"], "replies": r["requests"], "resets": resets,
            "not_ready_at_end": not_ready, "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"],
            "zero_at_s": r["zero_at_s"], "started": started}


def _when(res: dict[str, Any]) -> str:
    """When the zeros came (seconds into the run), to lay beside the daemon's log."""
    at = res.get("zero_at_s") or []
    when = f" at {', '.join(f'{s:g}' for s in at[:40])} s" if at else ""
    return f" [from {res['started']}{when}]"


def plugin_main(args: argparse.Namespace) -> int:
    counts = [int(c) for c in str(args.clients).split(",")]
    msgs = messages(photo())
    rgb = sent_frame(args.model)
    model, model_type = SENT_MODELS[args.model]
    figures: dict[str, Any] = {"model": args.model}
    with tempfile.TemporaryDirectory(prefix="bench-frigate-plugin-") as tmp_s:
        tmp = Path(tmp_s)
        ports = (free_port(), free_port())
        d = Daemon(plugin_config(tmp, ports, args.timeout_ms), tmp)
        try:
            configured, sent = (f"tcp://127.0.0.1:{p}" for p in ports)
            times = []
            for _ in range(args.handshakes + 1):
                f = FrigateDetector(configured, "/m/bench.onnx", "ssd", 200)
                assert f.ready and f.handshake_s is not None
                times.append(f.handshake_s)
                f.close()
            figures["handshake_warm"] = percentiles_ms(times[1:], (50, 99))
            t0 = time.perf_counter()
            f = FrigateDetector(sent, model, model_type, 200)
            ready_s = time.perf_counter() - t0
            first = f.detect_raw(rgb)
            figures["transfer"] = {"model_bytes": model.stat().st_size,
                                   "handshake_and_transfer_s": ready_s,
                                   "to_first_detection_s": time.perf_counter() - t0,
                                   "first_found": bool(first[0, 1] > 0)}
            f.close()
            for n in counts:
                plugin_clients(sent, rgb, n, 1.0, args.model)  # warm up
                res = plugin_clients(sent, rgb, n, args.seconds, args.model)
                # native clients on the configured person model (the same file as sent)
                nat = (run_clients(d.tcp, msgs["native"], "native", n, args.seconds)
                       if args.model == "person" else None)
                figures[f"clients_{n}"] = {"plugin": res, "native": nat}
                versus = (f"; native {nat['served_per_s']:.1f}/s, p99 {nat['p99_ms']:.1f} ms"
                          if nat else "")
                print(f"{n} clients: plugin {res['detections_per_s']:.1f} detections/s, p99 "
                      f"{res['p99_ms']:.1f} ms, zeros {res['zeros']} of {res['replies']}, "
                      f"resets {res['resets']}{versus}{_when(res)}", flush=True)
            rung = wait_for_rung(d, sent)
            figures["int8_rung"] = rung
            print(f"int8 rung: {rung.get('state')} build_s {rung.get('build_s')} "
                  f"{rung.get('progress') or rung.get('error') or ''}", flush=True)
            if rung.get("state") == "offered":
                n = counts[-1]
                res = plugin_clients(sent, rgb, n, args.seconds, args.model)
                m = next(m for m in d.ctl({"op": "status"})["models"]
                         if m["name"] == f"frigate@{sent}")
                res["active_at_end"], res["overload"] = m["active_variant"], m["overload"]
                figures["load_steps"] = res
                print(f"{n} clients, the ladder free to follow the load: "
                      f"{res['detections_per_s']:.1f} detections/s, p99 {res['p99_ms']:.1f} "
                      f"ms, zeros {res['zeros']} of {res['replies']}, resets {res['resets']}"
                      f"{_when(res)}; at the end {m['active_variant']} ({m['overload']})",
                      flush=True)
                d.ctl({"op": "level", "level": "warm"})
                name = f"frigate@{sent}"
                # one rung down: the ladder's second variant (ORT INT8 or an OpenVINO rung)
                lighter = (rung.get("variants") or ["", ""])[1:2] or [""]
                end = time.monotonic() + 120
                while time.monotonic() < end and not any(
                        m["name"] == name and m["active_variant"] == lighter[0]
                        for m in d.ctl({"op": "status"})["models"]):
                    # served frames: the swap's check inputs
                    plugin_clients(sent, rgb, 1, 0.5, args.model)
                n = counts[-1]
                res = plugin_clients(sent, rgb, n, args.seconds, args.model)
                fp32 = figures[f"clients_{n}"]["plugin"]["detections_per_s"]
                figures["int8_rung"]["clients"] = res
                print(f"{n} clients on the int8 rung: {res['detections_per_s']:.1f} "
                      f"detections/s (x{res['detections_per_s'] / max(fp32, 1e-9):.2f} the "
                      f"fp32 rung), p99 {res['p99_ms']:.1f} ms", flush=True)
        finally:
            d.stop()
            if args.log:
                print(d.log(), flush=True)
    hs = figures["handshake_warm"]
    tr = figures["transfer"]
    print(f"warm handshake p50 {hs['p50_ms']:.2f} ms p99 {hs['p99_ms']:.2f} ms; transfer of "
          f"{tr['model_bytes']} bytes -> first detection {tr['to_first_detection_s']:.2f} s")
    if args.json:
        print(json.dumps({**figures, "machine": machine_info()}, indent=1))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", default="4",
                    help="clients (with --plugin: a comma-separated list, e.g. 4,8)")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--timeout-ms", type=float, default=200.0,
                    help="the Frigate endpoint's timeout_ms (Frigate's request_timeout_ms); a "
                         "large value compares pure throughput, deadlines aside")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON too")
    ap.add_argument("--plugin", action="store_true",
                    help="Frigate's plugin's view: handshake, transfer, plugin clients")
    ap.add_argument("--handshakes", type=int, default=50)
    ap.add_argument("--log", action="store_true", help="with --plugin: print the daemon's log")
    ap.add_argument("--model", default="person", choices=sorted(SENT_MODELS),
                    help="with --plugin: the model Frigate sends (person as ssd, digits-det "
                    "as yologeneric, the issue's comparison with the reference server)")
    args = ap.parse_args()
    if args.plugin:
        return plugin_main(args)
    args.clients = int(args.clients)
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
