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

from edged.cli import ctl, daemon, exits, frigate, keys, publish, requests
from edged.cli.common import CliError, config_fix

#: Subcommands whose parsers live in (and import) their own modules.
_HEAVY = ("bench", "compile", "governor", "device-check", "isa-check")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or for a ``command`` not in ``_HEAVY`` one without those
    commands' parsers: building them imports their modules (numpy, the load generator,
    the governor), ~25 ms of ``edged serve``'s start-up."""
    ap = argparse.ArgumentParser(prog="edged", description=DESCRIPTION, epilog=EPILOG,
                                 formatter_class=_Help)
    ap.add_argument("--version", action="version", version=f"edged {_version()}",
                    help="print the version and exit")
    ap.add_argument("--debug", action="store_true",
                    help="on an unexpected error, print the traceback (give it anywhere)")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND", title="commands")
    for group in (daemon, requests, ctl, keys, frigate, publish):
        group.add_parsers(sub)
    if command is None or command in _HEAVY:
        _add_tools(sub)
    _order(sub)
    _describe(ap)
    return ap


class _Help(argparse.RawDescriptionHelpFormatter):
    """``edged --help``: the commands listed once, each with its line, under "commands"
    (argparse would print the ``COMMAND`` metavar as a heading of its own above them)."""

    def _format_action(self, action: argparse.Action) -> str:
        if isinstance(action, argparse._SubParsersAction):
            return "".join(self._format_action(a) for a in action._get_subactions())
        return super()._format_action(action)


def _add_tools(sub: argparse._SubParsersAction) -> None:
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


def _order(sub: argparse._SubParsersAction) -> None:
    """``edged --help`` lists the commands in the order a new user meets them
    (``_COMMANDS``'), not the order their modules were added."""
    rank = {name: i for i, name in enumerate(_COMMANDS)}
    sub._choices_actions.sort(key=lambda a: rank.get(a.dest, len(rank)))


def _describe(p: argparse.ArgumentParser) -> None:
    """Every subcommand's ``--help`` opens with its one-line summary (the line ``edged
    --help`` lists it with) unless it has a longer description of its own: written
    once, here for every command, so a new one cannot forget it."""
    for a in p._actions:
        if not isinstance(a, argparse._SubParsersAction):
            continue
        helps = {c.dest: c.help for c in a._choices_actions}
        for name, child in a.choices.items():
            if not child.description and helps.get(name):
                line = str(helps[name])
                child.description = line[0].upper() + line[1:] + "."
            _describe(child)


#: What ``edged --help`` says above its list of commands (the list is the parser's own).
DESCRIPTION = """An on-device inference daemon: serves model variants over ZeroMQ (and Frigate's and
KServe's protocols) with dynamic batching, and a governor that steps down to lighter
variants when the device gets hot."""

#: What ``edged --help`` says below it: the exit codes every command shares.
EPILOG = """exit codes: 0 done, 1 refused or failed, 2 usage, 3 no daemon answers, 4 bad config,
5 a bug in edged (--debug shows the traceback); docs/operations.md has the table."""


def _version() -> str:
    from edged import __version__

    return __version__


def main(argv: list[str] | None = None) -> int:
    """Run one command; a failure is one or two lines on stderr and a code from
    ``edged.cli.exits``, never a traceback unless ``--debug`` (docs/operations.md)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    first = next((a for a in argv if not a.startswith("-")), None)
    try:
        args = build_parser(first if first in _COMMANDS else None).parse_args(argv)
        return int(_COMMANDS[args.cmd](args) or 0)
    except CliError as e:
        print(f"edged: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        return exits.INTERRUPTED
    except BrokenPipeError:
        return _closed_pipe()
    except Exception as e:
        if debug:
            raise
        return _failed(e)


def _failed(e: Exception) -> int:
    """An exception no command caught: its one line, and what to do next."""
    code = exits.code_for(e)
    if code == exits.CONFIG:
        problems = getattr(e, "problems", None) or [str(e)]
        print("edged: " + "\n  ".join([*problems, config_fix(problems)]), file=sys.stderr)
    elif code == exits.INTERNAL:
        print(f"edged: internal error: {type(e).__name__}: {_one_line(e)}\n"
              "  this is a bug in edged: run the command again with --debug and report "
              "the traceback", file=sys.stderr)
    else:
        print(f"edged: {_one_line(e)}", file=sys.stderr)
    return code


def _one_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0] if text else text


def _closed_pipe() -> int:
    """The reader went away (``edged models | head``): no traceback, and none from the
    interpreter's own flush of stdout at exit either."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return exits.CLOSED_PIPE


def cmd_governor(args: argparse.Namespace) -> int:
    from edged.governor.replay import run

    return run(args)


def cmd_compile(args: argparse.Namespace) -> int:
    from edged.compile.cli import run

    return run(args)


def _own(args: argparse.Namespace) -> int:
    """A tool's subcommand: its parser set ``func``."""
    return int(args.func(args))


#: every command, in the order ``edged --help`` lists them (a new user's order)
_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "serve": daemon.cmd_serve, "check": daemon.cmd_check, "infer": requests.cmd_infer,
    "models": requests.cmd_simple, "health": requests.cmd_simple, "status": ctl.cmd_status,
    "ctl": ctl.cmd_ctl, "publish": publish.cmd_publish, "compile": cmd_compile,
    "bench": _own, "governor": cmd_governor, "device-check": _own, "isa-check": _own,
    "frigate": frigate.cmd_frigate, "keys": keys.cmd_keys,
}
