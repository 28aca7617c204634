"""The ``edged`` command: one module per command group, put together here.

``daemon`` (serve, check), ``requests`` (infer, models, health), ``ctl`` (status, ctl),
``keys``, ``frigate``; the tools' own groups live with them (``edged.compile.cli``,
``edged.bench.cli``, ``edged.device.cli``, ``edged.governor.replay``) and are imported
only when one of them runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from edged.cli import ctl, daemon, frigate, keys, publish, requests

#: Subcommands whose parsers live in (and import) their own modules.
_HEAVY = ("bench", "compile", "governor", "device-check", "isa-check")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or for a ``command`` not in ``_HEAVY`` one without those
    commands' parsers: building them imports their modules (numpy, the load generator,
    the governor), ~25 ms of ``edged serve``'s start-up."""
    ap = argparse.ArgumentParser(prog="edged", description="An on-device inference daemon.")
    ap.add_argument("--version", action="version", version=f"edged {_version()}")
    sub = ap.add_subparsers(dest="cmd", required=True)
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


def _version() -> str:
    from edged import __version__

    return __version__


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    first = next((a for a in argv if not a.startswith("-")), None)
    args = build_parser(first if first in _COMMANDS else None).parse_args(argv)
    try:
        return int(_COMMANDS[args.cmd](args) or 0)
    except KeyboardInterrupt:
        return 130


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
