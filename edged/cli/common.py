"""What the commands share: the options that name a daemon, and finding it by them.

Every command that talks to a daemon finds it the same way (``edged.client.discover``):
``--endpoint``/``--control``, else ``EDGED_ENDPOINT``/``EDGED_CONTROL``, else the
config's endpoints and runtime directory, else the one running daemon, said aloud.
"""

from __future__ import annotations

import argparse
import sys

from edged.cli import exits

DEFAULT_CONFIG = "config.toml"


class CliError(Exception):
    """A message for the user (printed after ``edged:``) and the exit code
    (``edged.cli.exits``)."""

    def __init__(self, message: str, code: int = exits.USAGE) -> None:
        super().__init__(message)
        self.code = code


def add_client_args(p: argparse.ArgumentParser) -> None:
    """Options of a command that sends requests to an inference endpoint."""
    p.add_argument("--endpoint", "-e", metavar="ENDPOINT",
                   help="the daemon's inference endpoint, e.g. tcp://127.0.0.1:5555 "
                        "(default: $EDGED_ENDPOINT, else asked of the daemon found as for "
                        "--control)")
    _add_daemon_args(p, timeout=10.0)
    p.add_argument("--server-key", metavar="FILE",
                   help="CURVE: the daemon's public key file (server.key)")
    p.add_argument("--client-key", metavar="FILE",
                   help="CURVE: this client's secret key file (NAME.key_secret)")


def add_control_args(p: argparse.ArgumentParser, *, given_before: bool = False) -> None:
    """Options of a command that speaks to the daemon's control socket.

    ``given_before``: ``p`` is an action under ``edged ctl``, which takes the same options
    before the action too (``edged ctl --timeout 600 swap ...``). argparse lets a
    subcommand's defaults overwrite what its parent parsed, so here they have none; the
    parent's stand.
    """
    _add_daemon_args(p, timeout=60.0, defaults=not given_before)


def _add_daemon_args(p: argparse.ArgumentParser, timeout: float,
                     defaults: bool = True) -> None:
    unset: dict[str, object] = {} if defaults else {"default": argparse.SUPPRESS}
    p.add_argument("--control", metavar="ipc://PATH", **unset,
                   help="the daemon's control socket (default: $EDGED_CONTROL, else the one "
                        "--config pins down, else the only daemon running here)")
    p.add_argument("--config", "-c", metavar="FILE", **unset,
                   help="find the daemon serving this config file")
    p.add_argument("--timeout", type=float, metavar="SECONDS",
                   **(unset or {"default": timeout}),
                   help=f"seconds to wait for a reply (default {timeout:g})")


def control_for(args: argparse.Namespace) -> str:
    """The control endpoint ``args`` mean, checked to answer; says so on stderr when it
    was a guess."""
    from edged.client.discover import find_daemon, probe

    try:
        found, _ = find_daemon(control=args.control, config_path=args.config)
        probe(found.address, "--control ipc://PATH")
    except _daemon_errors() as e:
        raise _refusal(e) from None
    if found.guessed:
        print(f"edged: talking to {found.address} ({found.how}; --control picks another)",
              file=sys.stderr)
    return found.address


def endpoint_for(args: argparse.Namespace) -> str:
    """The inference endpoint ``args`` mean, checked to answer; says so on stderr when it
    was a guess."""
    from edged.client.discover import find_endpoint, probe

    try:
        found = find_endpoint(endpoint=args.endpoint, control=args.control,
                              config_path=args.config, prefer_tcp=bool(args.server_key))
        probe(found.address, "--endpoint ENDPOINT")
    except _daemon_errors() as e:
        err = _refusal(e)
        raise CliError(str(err).replace("--control ipc://PATH",
                                        "--endpoint ENDPOINT or --control ipc://PATH"),
                       err.code) from None
    if found.guessed:
        print(f"edged: talking to {found.address} ({found.how}; --endpoint picks another)",
              file=sys.stderr)
    return found.address


def _daemon_errors() -> tuple[type[Exception], ...]:
    from edged.client.discover import Ambiguous, NotFound, Unreachable
    from edged.errors import ConfigError

    return (Ambiguous, NotFound, Unreachable, ConfigError, OSError)


def _refusal(e: Exception) -> CliError:
    """What finding a daemon ran into, as the line and the code ``main`` prints."""
    problems = getattr(e, "problems", None)
    if problems is not None or isinstance(e, OSError):
        return CliError("--config: " + ("; ".join(problems) if problems else str(e)),
                        exits.CONFIG)
    return CliError(getattr(e, "message", None) or str(e), exits.code_for(e))


def config_fix(problems: list[str], checking: bool = False) -> str:
    """The line under a config's problems that says what to do next (``checking``: they
    are ``edged check``'s own list, so it does not send the user there)."""
    if any("cannot read config file" in p for p in problems):
        return ("give a config file that exists with --config FILE (`edged compile` writes "
                "one; a checkout's config.toml is the example)")
    return "fix the file where each line points" + (
        "" if checking else "; `edged check --config FILE` lists them all")


def refusal_line(reply: dict[str, object]) -> str:
    """A reply the daemon refused, as a sentence and what to do next (not its JSON)."""
    status = str(reply.get("status") or "an error")
    error = str(reply.get("error") or "no reason given").rstrip(".")
    hint = _HINTS.get(status)
    return f"the daemon refused ({status}): {error}" + (f"; {hint}" if hint else "")


#: what to do next, by the status of a refused reply
_HINTS = {
    "NOT_FOUND": "`edged models` lists what it serves, `edged status` its variants",
    "UNAVAILABLE": "`edged status` says why",
    "RESOURCE_EXHAUSTED": "send less at once, or raise the limit the message names",
    "DEADLINE_EXCEEDED": "allow more time (--timeout) or send less at once",
    "UNSUPPORTED_VERSION": "this edged and the daemon differ in version: use the daemon's",
}
