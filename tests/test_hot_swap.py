"""Hot swap edge cases against the real daemon: drain-then-swap when memory is tight,
a swap refused by the golden check, and energy accounting from power rails."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from support.configs import digits_config, model_table, variant
from support.daemons import Daemon, metrics
from support.paths import MODELS
from support.slow_model import make_slow_model
from support.sysfs import make_ina3221_hwmon, make_thermal_zone
from support.waits import wait_until

X = (np.load(MODELS / "validation.npz")["x"][:1].astype(np.float32) / 255.0)[:, None]


def rung(name: str, path: Path) -> str:
    """One ``[[models.variants]]`` table (ONNX Runtime, default options)."""
    return variant(name, path, options={})


def stream(d: Daemon, stop: threading.Event, out: list[tuple[str, str | None]]) -> None:
    with d.client(timeout_s=30) as c:
        while not stop.is_set():
            r = c.infer("digits", X, raise_on_error=False)
            out.append((r.status, r.header.get("variant")))


def test_swap_drains_first_when_memory_is_tight(make_daemon: Any, tmp_path: Path) -> None:
    # A headroom no machine has: every swap takes the drain-then-swap path.
    d = make_daemon(digits_config(tmp_path, server="swap_memory_headroom_mb = 100000000\n"))
    stop = threading.Event()
    replies: list[tuple[str, str | None]] = []
    threads = [threading.Thread(target=stream, args=(d, stop, replies)) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.3)
        for v in ("small-fp32", "cnn-int8", "cnn-fp32"):
            r = d.ctl({"op": "swap", "model": "digits", "variant": v})
            assert r["status"] == "OK" and r["model"]["active_variant"] == v
            assert r["model"]["last_swap"]["drained"] is True
            time.sleep(0.2)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert len(replies) > 50
    assert {s for s, _ in replies} == {"OK"}
    assert {v for _, v in replies} == {"cnn-fp32", "small-fp32", "cnn-int8"}


def test_swap_to_an_incompatible_variant_is_refused_and_serving_goes_on(
        make_daemon: Any, tmp_path: Path) -> None:
    other = make_slow_model(tmp_path / "other.onnx", 10)  # input x [N,64]: not the contract
    cfg = digits_config(tmp_path, variants=("cnn-fp32",))
    cfg.write_text(cfg.read_text() + rung("wrong", other)
                   + rung("missing", tmp_path / "nope.onnx"))
    d = make_daemon(cfg)
    r = d.ctl({"op": "swap", "model": "digits", "variant": "wrong"})
    assert r["status"] == "INTERNAL"
    m = r["model"]
    assert m["active_variant"] == "cnn-fp32" and m["state"] == "ready"
    assert m["last_swap"]["ok"] is False and "input" in m["last_swap"]["error"]
    r = d.ctl({"op": "swap", "model": "digits", "variant": "missing"})
    assert "nope.onnx" in r["model"]["last_swap"]["error"]
    with d.client() as c:
        ok = c.infer("digits", X)
        assert ok.ok and ok.header["variant"] == "cnn-fp32"
    # a candidate the contract refuses is a refusal (counted and logged as one), not a failed load
    assert "variant refused model=digits variant=wrong" in d.log()


def test_swap_on_a_model_that_is_not_ready_says_so(make_daemon: Any, tmp_path: Path) -> None:
    # A second model whose first rung is missing fails its load; its second rung is fine.
    cfg = digits_config(tmp_path, variants=("cnn-fp32",),
                        extra_models=model_table("broken", [
                            rung("gone", tmp_path / "gone.onnx"),
                            rung("good", MODELS / "cnn-int8.onnx")]))
    d = make_daemon(cfg)
    r = d.ctl({"op": "swap", "model": "broken", "variant": "good"})
    assert r["status"] == "UNAVAILABLE", r
    assert r["error"].startswith("model 'broken' is failed: ") and "gone.onnx" in r["error"], r
    assert r["error"].endswith("; the pin applies when it loads") and "None" not in r["error"]
    assert r["pin"]["variant"] == "good"  # the operator's choice holds for the next load
    m = d.ctl({"op": "models"})["models"]
    assert {x["name"]: x["state"] for x in m} == {"digits": "ready", "broken": "failed"}
    assert d.ctl({"op": "swap", "model": "digits", "variant": "cnn-fp32"})["status"] == "OK"


def test_energy_is_attributed_from_measured_power(make_daemon: Any, tmp_path: Path) -> None:
    root = tmp_path / "sysroot"
    make_thermal_zone(root, 0, "cpu-thermal", 40000)
    # Orin Nano rails: VDD_IN 5000 mV x 1600 mA = 8 W total.
    make_ina3221_hwmon(root, [("VDD_IN", 5000, 1600), ("VDD_CPU_GPU_CV", 5000, 400),
                              ("VDD_SOC", 5000, 300)])
    cfg = digits_config(tmp_path, governor=f"""
[governor]
sysfs_root = "{root}"
interval_s = 0.1
levels = "auto"
""")
    d = make_daemon(cfg, metrics=True)
    # the rails have been read: energy is attributed from the first request on
    wait_until(lambda: 'edged_sensor_power_watts{rail="VDD_IN"} 8.0' in metrics(d), 10,
               "a power reading of 8 W")
    with d.client() as c:
        for _ in range(200):
            assert c.infer("digits", X).ok
    text = metrics(d)
    line = next(ln for ln in text.splitlines()
                if ln.startswith('edged_energy_joules_total{model="digits"}'))
    joules = float(line.split()[-1])
    compute = next(ln for ln in text.splitlines() if ln.startswith(
        'edged_compute_duration_seconds_sum{model="digits"'))
    seconds = float(compute.split()[-1])
    assert joules > 0
    # energy = 8 W x compute time (measured in the same daemon).
    assert abs(joules - 8.0 * seconds) <= 0.05 * 8.0 * seconds + 1e-6, (joules, seconds)
    assert 'edged_sensor_power_watts{rail="VDD_IN"} 8.0' in text
