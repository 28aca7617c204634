"""The ``edged`` command: one module per command group, put together here.

``daemon`` (serve, check), ``requests`` (infer, models, health), ``ctl`` (status, ctl),
``keys``, ``frigate``; the tools' own groups live with them (``edged.compile.cli``,
``edged.bench.cli``, ``edged.device.cli``, ``edged.governor.replay``) and are imported
only when one of them runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from edged.cli import ctl, daemon, frigate, keys, publish, requests
from edged.cli.common import CliError

#: Subcommands whose parsers live in (and import) their own modules.
_HEAVY = ("bench", "compile", "governor", "device-check", "isa-check")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or for a ``command`` not in ``_HEAVY`` one without those
    commands' parsers: building them imports their modules (numpy, the load generator,
    the governor), ~25 ms of ``edged serve``'s start-up."""
    ap = argparse.ArgumentParser(prog="edged", description=DESCRIPTION,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action="version", version=f"edged {_version()}",
                    help="print the version and exit")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for group in (daemon, requests, ctl, keys, frigate, publish):
        group.add_parsers(sub)
    if command is not None and command not in _HEAVY:
        return ap
    from edged.bench.cli import add_parser as add_bench

    add_bench(sub)
    try:
        from edged.compile.cli import add_parser as add_compile
    except ImportError:  # pragma: no cover - compile extras missing
        pass
    else:
        add_compile(sub)
    from edged.governor.replay import add_parser as add_governor

    add_governor(sub)
    from edged.device.cli import add_parsers as add_device

    add_device(sub)
    return ap


#: The top-level help: every command, in the order a new user meets them.
DESCRIPTION = """\
An on-device inference daemon: serves model variants over ZeroMQ (and Frigate's and
KServe's protocols) with dynamic batching, and a governor that steps down to lighter
variants when the device gets hot.

commands:
  serve         run the daemon
  check         check a config and load every model file (--verify: against the reference)
  infer         send one image or tensor to a model and print the answer
  models        the models a daemon serves
  health        OK when every required model is ready
  status        what a daemon runs and why (models, listeners, governor)
  ctl           operator actions: reload, load, unload, level, swap, pull, promote,
                rollback
  publish       pack, sign and push a model version for devices to pull
  compile       turn an ONNX model into a checked, timed ladder of variants
  bench         load a running daemon and report throughput and latency
  governor      replay a recorded temperature trace through the governor
  device-check  what this device can run, and how fast
  isa-check     check --verify and the model tests on an emulated older x86-64 CPU
  frigate       files Frigate needs (labelmap)
  keys          CURVE key pairs for encrypted TCP
"""


def _version() -> str:
    from edged import __version__

    return __version__


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    first = next((a for a in argv if not a.startswith("-")), None)
    try:
        args = build_parser(first if first in _COMMANDS else None).parse_args(argv)
        return int(_COMMANDS[args.cmd](args) or 0)
    except CliError as e:
        print(f"edged: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _closed_pipe()


def _closed_pipe() -> int:
    """The reader went away (``edged models | head``): no traceback, and none from the
    interpreter's own flush of stdout at exit either."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 141  # as a shell reports a process ended by SIGPIPE


def cmd_governor(args: argparse.Namespace) -> int:
    from edged.governor.replay import run

    return run(args)


def cmd_compile(args: argparse.Namespace) -> int:
    from edged.compile.cli import run

    return run(args)


def _own(args: argparse.Namespace) -> int:
    """A tool's subcommand: its parser set ``func``."""
    return int(args.func(args))


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "serve": daemon.cmd_serve, "check": daemon.cmd_check, "infer": requests.cmd_infer,
    "models": requests.cmd_simple, "health": requests.cmd_simple, "status": ctl.cmd_status,
    "ctl": ctl.cmd_ctl, "keys": keys.cmd_keys, "frigate": frigate.cmd_frigate,
    "compile": cmd_compile, "bench": _own, "governor": cmd_governor, "device-check": _own,
    "isa-check": _own, "publish": publish.cmd_publish,
}
