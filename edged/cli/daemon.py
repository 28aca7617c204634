"""``edged serve`` (run the daemon) and ``edged check`` (would this config serve here?)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from edged.cli import exits
from edged.cli.common import DEFAULT_CONFIG, config_fix


def add_parsers(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("serve", help="run the daemon")
    s.add_argument("--config", "-c", default=DEFAULT_CONFIG, metavar="FILE",
                   help=f"the config file (default {DEFAULT_CONFIG})")
    s.add_argument("--endpoint", action="append", dest="endpoints", metavar="ENDPOINT",
                   help="inference endpoint (repeatable; replaces [server] endpoints)")
    s.add_argument("--metrics", metavar="HOST:PORT", help="metrics listen address, or 'off'")
    s.add_argument("--runtime-dir", metavar="DIR",
                   help="directory for relative ipc:// sockets (replaces [server] runtime_dir)")
    s.add_argument("--control", metavar="ipc://PATH",
                   help="control socket (replaces [server] control)")
    s.add_argument("--log-level", choices=("debug", "info", "warning", "error"),
                   help="replaces [server] log_level")

    c = sub.add_parser("check", help="validate a config and load every model file")
    c.add_argument("config_file", nargs="?", metavar="CONFIG",
                   help=f"the config file (default {DEFAULT_CONFIG}); --config FILE too")
    c.add_argument("--config", "-c", metavar="FILE",
                   help="the config file, as every other command takes it")
    c.add_argument("--verify", action="store_true",
                   help="also check every variant against the model's reference on this "
                        "device, as a swap would, and print each measure")
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
        print("edged: invalid config:\n  " + "\n  ".join([*e.problems, config_fix(e.problems)]),
              file=sys.stderr)
        return exits.CONFIG
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
        return exits.REFUSED


def _opens(m: Any, index: int, v: Any, head: Any) -> bool:
    """``edged check``: variant ``v`` of rung ``index`` (the rung's own, or its
    ``batch_variant``) opens and warms as the daemon would open it; said either way."""
    from edged.model.open import open_batch_member, open_with_head

    try:
        opener = open_with_head if v is m.variants[index] else open_batch_member
        loaded = opener(m, index, head)
    except Exception as e:
        print(f"FAIL {m.name}/{v.name} ({v.backend}, {v.path}): {e}")
        return False
    backend = loaded.backend
    ins = ", ".join(f"{s.name} {s.dtype} {list(s.shape)}" for s in backend.inputs)
    print(f"ok   {m.name}/{v.name} ({v.backend} on {backend.info.device}) "
          f"loaded+warmed in {loaded.load_s * 1000:.0f} ms; inputs: {ins}")
    backend.close()
    return True


def cmd_check(args: argparse.Namespace) -> int:
    if args.config and args.config_file and args.config != args.config_file:
        print(f"edged check: two config files given ({args.config_file} and --config "
              f"{args.config}); give one", file=sys.stderr)
        return exits.USAGE
    args.config = args.config or args.config_file or DEFAULT_CONFIG
    if args.verify:
        from edged.device.go_live import cmd_check_verify

        return cmd_check_verify(args)
    from edged.config.file import load_config
    from edged.config.models import members
    from edged.errors import ConfigError
    from edged.metrics import Metrics
    from edged.model.heads import open_head
    from edged.preprocess.preprocessor import Preprocessor

    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        print(f"{args.config}: {len(e.problems)} problem(s):")
        for p in e.problems:
            print(f"  - {p}")
        print(config_fix(e.problems, checking=True))
        return exits.CONFIG
    for w in cfg.warnings():  # valid, but one key silently outweighs another: say so
        print(f"warning: {w}")
    bad = ipc_problems(cfg)
    for p in bad:
        print(f"FAIL {p}")
    problems = len(bad)
    metrics = Metrics()  # the heads' series; nothing is exported
    for m in cfg.models:
        head = open_head(m, metrics, Preprocessor(m.preprocess) if m.preprocess else None)
        for i, rung in enumerate(m.variants):
            problems += sum(not _opens(m, i, v, head) for v in members(rung))
    if problems:
        print(f"{problems} problem(s): an endpoint that cannot be bound or a model file that "
              "failed to load")
        return exits.REFUSED
    piped = f", {len(cfg.pipelines)} pipeline(s)" if cfg.pipelines else ""
    print(f"{args.config}: OK ({len(cfg.models)} model(s){piped})")
    return 0


def ipc_problems(cfg: Any) -> list[str]:
    """``ipc://`` endpoints ``edged serve`` could not bind, or Frigate could not find: an
    absolute path whose folder does not exist or this user cannot write (``serve`` would
    fail with "No such file or directory"), and a relative path on a Frigate endpoint (it
    lands in the daemon's runtime directory, a private ``/tmp/edged-*`` unless
    ``runtime_dir`` is set, which Frigate has no way to know)."""
    import os
    from pathlib import Path

    out = []
    named = [(f"server.endpoints[{i}]", e) for i, e in enumerate(cfg.server.endpoints)]
    named.append(("server.control", cfg.server.control))
    named += [(f"server.frigate[{i}].endpoint", f.endpoint)
              for i, f in enumerate(cfg.server.frigate)]
    for key, e in named:
        if not e.startswith("ipc://") or e.startswith("ipc://@"):
            continue
        rest = e[len("ipc://"):]
        if not rest.startswith("/"):
            if key.startswith("server.frigate") and cfg.server.runtime_dir is None:
                out.append(f"{cfg.file}: {key}: {e} is relative, so it lands in the daemon's "
                           "runtime directory ($RUNTIME_DIRECTORY, else $XDG_RUNTIME_DIR/edged, "
                           "else a new /tmp/edged-*), which Frigate cannot know: give an "
                           "absolute path in a folder Frigate sees, e.g. "
                           "ipc:///run/edged/frigate.sock (a volume shared with its container)")
            continue
        folder = Path(rest).parent
        if not folder.is_dir():
            out.append(f"{cfg.file}: {key}: {e}: its folder {folder} does not exist (create it, "
                       "or use a path in an existing folder)")
        elif not os.access(folder, os.W_OK | os.X_OK):
            out.append(f"{cfg.file}: {key}: {e}: its folder {folder} is not writable by this "
                       f"user (uid {os.getuid()}), so the socket cannot be made there")
    return out
