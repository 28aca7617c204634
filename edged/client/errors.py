"""One exception class per reply status, so callers catch what they can act on.

``except edged.client.DeadlineExceeded`` reads better than comparing status strings, and
a status the caller did not expect still surfaces as an exception instead of a reply
nobody checked. ``STATUS_ERRORS`` is the only place that maps a status to its class.
"""

from __future__ import annotations

from typing import Any

from edged import errors as codes


class EdgedClientError(Exception):
    """A request that did not succeed: its status, the daemon's message and the id."""

    status: str | None = None

    def __init__(self, message: str, request_id: str | int | None = None,
                 header: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.request_id = request_id
        self.header = header or {}

    def __str__(self) -> str:
        where = "" if self.request_id is None else f" (request {self.request_id!r})"
        label = f"{self.status}: " if self.status else ""
        return f"{label}{self.message}{where}"


class InvalidArgument(EdgedClientError):
    status = codes.INVALID_ARGUMENT


class NotFound(EdgedClientError):
    status = codes.NOT_FOUND


class ResourceExhausted(EdgedClientError):
    status = codes.RESOURCE_EXHAUSTED


class DeadlineExceeded(EdgedClientError):
    status = codes.DEADLINE_EXCEEDED


class Dropped(EdgedClientError):
    status = codes.DROPPED


class Unavailable(EdgedClientError):
    status = codes.UNAVAILABLE


class UnsupportedVersion(EdgedClientError):
    status = codes.UNSUPPORTED_VERSION


class Internal(EdgedClientError):
    status = codes.INTERNAL


class ClientTimeout(EdgedClientError, TimeoutError):
    """No reply in time (daemon down, busy past the client's patience, or a CURVE key the
    daemon refused). Also a ``TimeoutError``, so generic timeout handling catches it."""


class ProtocolViolation(EdgedClientError):
    """A reply this client cannot decode: not the daemon, or a different protocol."""


STATUS_ERRORS: dict[str, type[EdgedClientError]] = {
    cls.status: cls
    for cls in (InvalidArgument, NotFound, ResourceExhausted, DeadlineExceeded, Dropped,
                Unavailable, UnsupportedVersion, Internal)
    if cls.status is not None
}


def error_for(header: dict[str, Any]) -> EdgedClientError:
    """The exception for a non-OK reply header; an unknown status maps to ``Internal`` with
    the status kept, so a newer daemon's status is never silently lost."""
    code = str(header.get("status"))
    message = str(header.get("error") or f"the daemon answered {code} without a message")
    cls = STATUS_ERRORS.get(code)
    if cls is None:
        err: EdgedClientError = Internal(message, header.get("id"), header)
        err.status = code
        return err
    return cls(message, header.get("id"), header)
