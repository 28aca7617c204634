#!/usr/bin/env python3
"""Regenerate docs/images/governor-replay.png (and print the "Replay figures" table).

The image is ``edged governor replay --plot`` on a shipped *recorded* trace (a Raspberry
Pi CM5 in a closed uConsole under stress-ng, CC BY 4.0, see examples/traces/README.md),
with its README's trip point (65 °C) and the first-order forecast on (``forecast_s =
30``), so the docs show exactly what the command draws on real data.
The table lines are the figures docs/governor.md records per shipped
trace; rerun this after changing the policy and paste them there.

    python scripts/docs/plot_governor_replay.py          # needs the plot extra (matplotlib)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "examples" / "traces"
IMAGE = ROOT / "docs" / "images" / "governor-replay.png"
#: the levels and their forecast, which these figures are about (the default policy with
#: the auto levels is mpc, whose figures are the robustness table's)
LEVELS = '[governor]\npolicy = "levels"\n'
CONFIG = LEVELS + 'forecast_s = 30\nforecast_model = "first_order"\n'


def replay(trace: Path, *extra: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "edged", "governor", "replay", str(trace),
                          "--json", *extra], capture_output=True, text=True, env=env,
                         check=True)
    return json.loads(out.stdout)


def main() -> None:
    IMAGE.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        cfg, plain = Path(tmp) / "edged.toml", Path(tmp) / "levels.toml"
        cfg.write_text(CONFIG)
        plain.write_text(LEVELS)
        replay(TRACES / "uconsole-cm5-stress.csv", "--config", str(cfg), "--trip", "65",
               "--plot", str(IMAGE))
        print(f"wrote {IMAGE.relative_to(ROOT)}")
        print("| trace | forecast | level changes | entries per level | ladder changes | "
              "first step down | device throttled | lead | top level by forecast |")
        print("|---|---|---|---|---|---|---|---|---|")
        for trace in sorted(p for p in TRACES.iterdir() if p.suffix in (".csv", ".log")):
            trip = ["--trip", "99"] if "orin" in trace.name else []
            for label, args in (("off", ["--config", str(plain)]),
                                ("first_order 30 s", ["--config", str(cfg)])):
                s = replay(trace, *trip, *args)["summary"]
                print(f"| {trace.name} | {label} | {s['level_changes']} | "
                      f"{s['entries_per_level']} | {s['ladder_changes']} | "
                      f"{s['first_step_down_s']} s | {s.get('device_throttled_at_s', '–')} | "
                      f"{s.get('lead_before_device_throttling_s', '–')} | "
                      f"{s['top_level_from_forecast']} |")


if __name__ == "__main__":
    main()
