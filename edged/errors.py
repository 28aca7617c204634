"""Errors that carry a wire status, so every layer can fail a request precisely.

The status names are the protocol's (see docs/protocol.md); raising one of these
anywhere below the server turns into exactly one reply with that status.
"""

from __future__ import annotations

OK = "OK"
INVALID_ARGUMENT = "INVALID_ARGUMENT"
NOT_FOUND = "NOT_FOUND"
RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
DROPPED = "DROPPED"
UNAVAILABLE = "UNAVAILABLE"
UNSUPPORTED_VERSION = "UNSUPPORTED_VERSION"
INTERNAL = "INTERNAL"


class EdgedError(Exception):
    """A failure with a wire status and a message a person can act on."""

    status = INTERNAL

    def __init__(self, message: str, status: str | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status


class InvalidArgument(EdgedError):
    status = INVALID_ARGUMENT


class NotFound(EdgedError):
    status = NOT_FOUND


class ResourceExhausted(EdgedError):
    status = RESOURCE_EXHAUSTED


class Shed(ResourceExhausted):
    """Refused by the governor's shedding (a level's ``shed_priority_above``): a pipeline
    says such a stage's boxes are shed, not failed."""


class DeadlineExceeded(EdgedError):
    status = DEADLINE_EXCEEDED


class Dropped(EdgedError):
    status = DROPPED


class Unavailable(EdgedError):
    status = UNAVAILABLE


class UnsupportedVersion(EdgedError):
    status = UNSUPPORTED_VERSION


class ArtifactError(EdgedError):
    """An artifact (model file, plan, library) cannot be loaded; the message names the file."""

    status = UNAVAILABLE


class ConfigError(Exception):
    """Every problem found in a config file, each naming the file and key path."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class StartupError(Exception):
    """A one-line reason the daemon cannot start (``edged serve`` exits with code 1)."""
