"""Governor actions on a running daemon: a rate cap slows replies down, and a
power budget over real INA3221 rail files in their kernel format steps the variant down."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from support.configs import digits_config
from support.daemons import Daemon
from support.paths import MODELS
from support.sysfs import make_ina3221_hwmon
from support.waits import wait_governor_steps, wait_until

from edged.client import build_infer

VAL = np.load(MODELS / "validation.npz")
X = (VAL["x"][:1].astype(np.float32) / 255.0)[:, None]


def test_a_rate_cap_spaces_batches_out(make_daemon: Any, tmp_path: Path) -> None:
    root = tmp_path / "sysfs"
    root.mkdir()
    d: Daemon = make_daemon(digits_config(tmp_path, governor=f"""
[governor]
enabled = true
sysfs_root = "{root}"
interval_s = 0.2
[[governor.levels]]
name = "capped"
enter_c = 90.0
exit_c = 85.0
max_rate_hz = 5.0
max_batch_size = 1
"""))
    assert d.ctl({"op": "level", "level": "capped"})["status"] == "OK"
    g = wait_governor_steps(lambda: d.ctl({"op": "status"}), 2)  # the pin acts at a step
    assert g["level"] == "capped" and g["actions"]["max_rate_hz"] == 5.0
    with d.client(timeout_s=30) as c:
        for k in range(10):
            c.send(*build_infer("digits", X, id=k))
        replies = [c.recv() for _ in range(10)]
    assert all(r.ok for r in replies)
    queued = sorted(r.header["timing"]["queue_us"] for r in replies)
    # 10 single-row batches at <= 5 per second: the last one waited at least ~1.6 s.
    # (A lower bound the cap enforces; a slow machine only makes it larger.)
    assert queued[-1] >= 1_400_000, queued
    assert d.ctl({"op": "level", "level": "auto"})["status"] == "OK"


def test_a_power_budget_steps_the_variant_down(make_daemon: Any, tmp_path: Path) -> None:
    root = tmp_path / "sysfs"
    # VDD_IN at 5 V x 2.4 A = 12 W, over a 10 W budget.
    make_ina3221_hwmon(root, [("VDD_IN", 5000, 2400), ("VDD_CPU_GPU_CV", 5000, 900)])
    d: Daemon = make_daemon(digits_config(tmp_path, governor=f"""
[governor]
enabled = true
sysfs_root = "{root}"
interval_s = 0.2
power_budget_w = 10.0
power_window_s = 1.0
swap_min_interval_s = 0
"""))
    with d.client() as c:
        wait_until(lambda: c.infer("digits", X).variant in ("cnn-int8", "small-fp32"), 30,
                   "a step down from cnn-fp32 over the power budget", interval=0.1)
    g = d.ctl({"op": "status"})["governor"]
    assert "budget 10.0 W" in g["reason"] and g["power_w"] >= 10.0
