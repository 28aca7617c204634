"""The ``edged`` command's exit codes: one table, the one docs/operations.md shows.

Why one module: a script around ``edged`` tells "fix your flags" from "start the daemon"
from "the daemon said no" by the code alone, so every command must mean the same thing by
each number. The tools' own commands (compile, bench, device-check, governor) return 1
and 2 in the same sense; everything else is mapped here from the exception that ended
the command (``code_for``).
"""

from __future__ import annotations

#: the command did what was asked
OK = 0
#: the command ran and the answer is no: the daemon refused a request, a check failed,
#: the daemon could not start (a port taken, a required model that did not load)
REFUSED = 1
#: the command line is wrong: an unknown flag, a missing argument, an input file that is
#: not there or not readable, several daemons running and none named
USAGE = 2
#: no daemon answers where the command looked (nothing listens on the socket or port)
UNREACHABLE = 3
#: the config file cannot be read or is invalid (file, line and column, or key path)
CONFIG = 4
#: a bug in edged: the one-line message asks for ``--debug`` and a report
INTERNAL = 5
#: Ctrl-C
INTERRUPTED = 130
#: the reader of stdout went away (``edged models | head``), as a shell reports SIGPIPE
CLOSED_PIPE = 141

#: code -> what it means, for the docs' table and the test that keeps them in step
MEANING = {
    OK: "done",
    REFUSED: "the daemon or a check said no (a refused request, a failed check, a daemon "
             "that could not start)",
    USAGE: "the command line is wrong (a flag, an argument, a missing input file, several "
           "daemons and none named)",
    UNREACHABLE: "no daemon answers where the command looked",
    CONFIG: "the config file cannot be read or is invalid",
    INTERNAL: "a bug in edged (run again with --debug for the traceback)",
    INTERRUPTED: "interrupted (Ctrl-C)",
    CLOSED_PIPE: "the reader of the output went away",
}


def code_for(error: BaseException) -> int:
    """The exit code for an exception that ended a command (``main`` prints its line)."""
    from edged.client.discover import Ambiguous, NotFound, Unreachable
    from edged.client.errors import ClientTimeout
    from edged.errors import ConfigError, StartupError

    if isinstance(error, ConfigError):
        return CONFIG
    if isinstance(error, (NotFound, Unreachable, ClientTimeout)):
        return UNREACHABLE
    if isinstance(error, Ambiguous):
        return USAGE
    if isinstance(error, StartupError):
        return REFUSED
    if isinstance(error, (FileNotFoundError, IsADirectoryError, PermissionError)):
        return USAGE
    return INTERNAL
