"""``edged serve`` (run the daemon) and ``edged check`` (would this config serve here?)."""

from __future__ import annotations

import argparse
import sys

from edged.cli.common import DEFAULT_CONFIG


def add_parsers(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("serve", help="run the daemon")
    s.add_argument("--config", "-c", default=DEFAULT_CONFIG)
    s.add_argument("--endpoint", action="append", dest="endpoints", metavar="ENDPOINT",
                   help="inference endpoint (repeatable; replaces [server] endpoints)")
    s.add_argument("--metrics", metavar="HOST:PORT", help="metrics listen address, or 'off'")
    s.add_argument("--runtime-dir", help="directory for ipc:// sockets")
    s.add_argument("--control", help="control endpoint (ipc://...)")
    s.add_argument("--log-level", choices=("debug", "info", "warning", "error"))

    c = sub.add_parser("check", help="validate a config and load every artifact")
    c.add_argument("config", nargs="?", default=DEFAULT_CONFIG)
    c.add_argument("--verify", action="store_true",
                   help="also check every variant against the model's reference on this "
                        "device, as a swap would, and print each measure (edged.device.go_live)")
    c.add_argument("--json", action="store_true", help="with --verify: machine-readable")


def cmd_serve(args: argparse.Namespace) -> int:
    from edged.config.file import load_config
    from edged.errors import ConfigError
    from edged.host.logs import setup_logging

    overrides = {"endpoints": args.endpoints, "metrics": args.metrics,
                 "runtime_dir": args.runtime_dir, "control": args.control}
    try:
        cfg = load_config(args.config).with_overrides(**overrides)
    except ConfigError as e:
        print("edged: invalid config:\n  " + "\n  ".join(e.problems), file=sys.stderr)
        return 2
    setup_logging(args.log_level or cfg.server.log_level)
    from edged.model.preopen import preopen

    preopen(cfg.models)  # while the server's modules import (edged.model.preopen)
    import asyncio

    from edged.errors import StartupError
    from edged.server import Server

    try:
        return asyncio.run(Server(cfg, overrides).run())
    except StartupError as e:
        print(f"edged: cannot start: {e}", file=sys.stderr)
        return 1


def cmd_check(args: argparse.Namespace) -> int:
    if args.verify:
        from edged.device.go_live import cmd_check_verify

        return cmd_check_verify(args)
    from edged.config.file import load_config
    from edged.errors import ConfigError
    from edged.metrics import Metrics
    from edged.model.heads import open_head
    from edged.model.open import open_with_head
    from edged.preprocess.preprocessor import Preprocessor

    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        print(f"{args.config}: {len(e.problems)} problem(s):")
        for p in e.problems:
            print(f"  - {p}")
        return 1
    problems = 0
    metrics = Metrics()  # the heads' series; nothing is exported
    for m in cfg.models:
        head = open_head(m, metrics, Preprocessor(m.preprocess) if m.preprocess else None)
        for i, v in enumerate(m.variants):
            try:
                loaded = open_with_head(m, i, head)
            except Exception as e:
                problems += 1
                print(f"FAIL {m.name}/{v.name} ({v.backend}, {v.path}): {e}")
                continue
            backend = loaded.backend
            ins = ", ".join(f"{s.name} {s.dtype} {list(s.shape)}" for s in backend.inputs)
            print(f"ok   {m.name}/{v.name} ({v.backend} on {backend.info.device}) "
                  f"loaded+warmed in {loaded.load_s * 1000:.0f} ms; inputs: {ins}")
            backend.close()
    if problems:
        print(f"{problems} artifact(s) failed to load")
        return 1
    piped = f", {len(cfg.pipelines)} pipeline(s)" if cfg.pipelines else ""
    print(f"{args.config}: OK ({len(cfg.models)} model(s){piped})")
    return 0
