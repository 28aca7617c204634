"""``python -m edged.governor``: sample sensors and show the governor's decision.

Why: on a new board an operator wants to see which zones, rails and trip points edged
finds, and what level it would pick, before running the daemon; the same command
replays a recorded sysfs tree (``--root``). Prints one JSON object per sample.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import replace
from pathlib import Path

from edged.config.file import load_governor
from edged.config.governor import GovernorConfig
from edged.errors import ConfigError
from edged.governor.policy import Governor
from edged.governor.sensors.sampler import Sensors


def load(config: Path | None, root: str | None) -> GovernorConfig:
    """The ``[governor]`` table of ``config`` (defaults without one), switched on, its
    sysfs root replaced by ``root`` when given (relative to the current folder)."""
    cfg = replace(load_governor(config), enabled=True)
    if root is not None:
        cfg = replace(cfg, sysfs_root=str(Path(root).resolve()))
    return cfg


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m edged.governor", description=__doc__)
    ap.add_argument("--config", type=Path, help="edged config file ([governor] table)")
    ap.add_argument("--root", help="sysfs root to read (a recorded tree); default from config")
    ap.add_argument("--count", type=int, default=1, help="samples to take (default 1)")
    ap.add_argument("--interval", type=float, help="seconds between samples (default config)")
    ap.add_argument("-v", "--verbose", action="store_true", help="log sensor transitions")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    try:
        cfg = load(args.config, args.root)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 2
    sensors = Sensors(cfg.sysfs_root, nvml=cfg.nvml)
    gov = Governor(cfg, trip_points=sensors.trip_points())
    interval = cfg.interval_s if args.interval is None else args.interval
    try:
        for i in range(max(1, args.count)):
            if i:
                time.sleep(interval)
            readings = sensors.sample()
            decision = gov.step(readings)
            out = {
                "readings": readings.to_dict(),
                "decision": decision.to_dict(),
                "levels": gov.snapshot()["levels"],
                "trip_c": gov.trip_c,
            }
            print(json.dumps(out, ensure_ascii=False), flush=True)
    finally:
        sensors.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
