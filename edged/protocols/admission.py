"""Admission: how a request of any protocol enters a model, and is counted once.

Why one module: the native room, the Frigate room and the KServe room speak different
wire formats but must admit, limit and count requests the same way: the same batcher,
governor and metrics as native ones (docs/architecture.md). A room parses its own format,
then:

    admission.check_size(frames)                    # over the message limit: refuse
    ticket = admission.admit(name, received, respond, client=ident)
    prepared = ticket.model.prepare(...)            # or prepare_frame; errors -> fail()
    admission.submit(ticket, prepared, priority=..., timeout_ms=...)

and ``respond(ticket, outcome)`` is called exactly once with a ``Result`` or an
``EdgedError``, *after* the outcome is counted (a scrape right after a reply sees it).
Between ``admit`` and ``submit`` (or ``fail``) the model knows the request is coming
(``Model.admitted``/``settled``): a model replaced meanwhile (a reload, a promoted version)
drains only once it was queued, so a frame decoded across the switch is computed by the
model that took it instead of failing.
What is refused before a ticket exists is counted with ``reject``. This module is the
one writer of ``edged_requests_total``, ``edged_request_duration_seconds``,
``edged_queue_duration_seconds`` and ``edged_inflight_requests``.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from edged.batching.queue import Result
from edged.errors import EdgedError, ResourceExhausted, Unavailable
from edged.model.contract import Prepared
from edged.model.model import Model
from edged.model.registry import Served
from edged.protocols.serving import Serving

#: a room's reply callback: one call per admitted request
Reply = Callable[["Ticket", "Result | EdgedError"], None]


def prepare_outcome(work: Callable[[], Prepared], log: logging.Logger) -> Prepared | EdgedError:
    """``work()`` (a request's preparation, run on the decode pool) or why it failed, as the
    value handed back to the loop for ``Admission.decoded``: a bug in preprocessing fails
    that request only, and is logged with its trace on the room's logger."""
    try:
        return work()
    except EdgedError as e:
        return e
    except Exception as e:
        log.exception("preprocessing failed")
        return EdgedError(f"preprocessing failed: {type(e).__name__}: {e}")


class Ticket:
    """An admitted request: the model (or pipeline) that took it (it survives a reload), when it
    arrived, who sent it and how its reply goes back. ``context`` is the room's own
    (what it learns while parsing and needs to reply); admission never reads it."""

    __slots__ = ("client", "context", "done", "model", "queued", "received", "respond")

    def __init__(self, model: Served, received: float, respond: Reply,
                 client: bytes | None) -> None:
        self.model = model
        self.received = received
        self.respond = respond
        self.client = client
        self.context: Any = None
        self.done = False
        #: queued on its model or answered: no longer counted by ``Model.admitted``
        self.queued = False


class Admission:
    def __init__(self, state: Serving) -> None:
        self.state = state
        self._inflight: dict[bytes, int] = {}  # client -> requests admitted, not answered
        self._ok: dict[tuple[str, str], tuple[Any, Any, Any]] = {}
        self._later = state.metrics.later.add  # the request path's metric updates
        self._inflight_gauge = state.metrics.inflight

    def check_size(self, frames: Sequence[Any]) -> None:
        """RESOURCE_EXHAUSTED when a message is over ``[server.limits] max_message_bytes``."""
        limit = self.state.config.server.limits.max_message_bytes
        size = sum(len(f) for f in frames)
        if size > limit:
            raise ResourceExhausted(f"message is {size} bytes; the limit is {limit}")

    def admit(self, name: str, received: float, respond: Reply,
              client: bytes | None = None) -> Ticket:
        """A ticket for a request to model (or pipeline) ``name``, or the EdgedError
        refusing it: an unknown name, a daemon not serving, or ``client`` over its
        in-flight limit."""
        model = self.state.registry.served(name)
        if not self.state.serving:
            raise Unavailable("the daemon is " + ("starting" if not self.state.ready
                                                  else "shutting down"))
        if client is not None:
            n = self._inflight.get(client, 0)
            cap = self.state.config.server.max_inflight_per_client
            if n >= cap:
                raise ResourceExhausted(f"this client has {n} requests in flight; the limit "
                                        f"is {cap}")
            self._inflight[client] = n + 1
        self._later((self._inflight_gauge.inc, 1))
        if isinstance(model, Model):
            model.admitted()
        return Ticket(model, received, respond, client)

    def submit(self, ticket: Ticket, prepared: Prepared, *, priority: int = 1,
               timeout_ms: float | None = None,
               quiet: Callable[[], bool] | None = None) -> None:
        """Queue ``prepared`` on the ticket's model; a refusal is answered and counted.
        ``quiet``: nothing else waits on the request's socket (for inline compute)."""
        deadline = ticket.received + timeout_ms / 1000.0 if timeout_ms else None
        respond = functools.partial(self._finish, ticket)
        self._queued(ticket)
        offload = self.state.offload  # a remote may compute it instead (kserve.offload)
        model = ticket.model
        try:
            if (offload is None or not isinstance(model, Model)  # a pipeline: its detector
                    or not offload.take(model, prepared, respond, ticket.received, priority,
                                        deadline)):
                ticket.model.submit(prepared, respond, arrival=ticket.received,
                                    priority=priority, deadline=deadline, quiet=quiet)
        except EdgedError as e:
            self._finish(ticket, e)

    def decoded(self, ticket: Ticket, outcome: Prepared | EdgedError, *, priority: int = 1,
                timeout_ms: float | None = None,
                quiet: Callable[[], bool] | None = None) -> None:
        """Back on the loop with a request prepared off it (the decode pool): submitted, or
        failed with why it could not be prepared, or refused when the daemon began to stop
        while it was decoded (its model may already be draining)."""
        if isinstance(outcome, EdgedError):
            self._finish(ticket, outcome)
        elif not self.state.serving:
            self._finish(ticket, Unavailable("the daemon is shutting down"))
        else:
            self.submit(ticket, outcome, priority=priority, timeout_ms=timeout_ms, quiet=quiet)

    def fail(self, ticket: Ticket, err: EdgedError) -> None:
        """An admitted request that failed before it was queued (e.g. while preparing)."""
        self._finish(ticket, err)

    def reject(self, err: EdgedError, model: str | None = None) -> None:
        """Count a request refused before it had a ticket (the room sends the reply)."""
        m = self.state.registry.find_served(model) if model else None
        self.state.metrics.requests.labels(model if m is not None else "",
                                           m.active_variant if m is not None else "",
                                           err.status).inc()

    def _finish(self, ticket: Ticket, outcome: Result | EdgedError) -> None:
        if ticket.done:
            return
        ticket.done = True
        self._queued(ticket)
        model = ticket.model
        if isinstance(outcome, Result):
            requests, duration, queued = self._ok_series(model.name, outcome.variant)
            later = self._later
            later((requests, 1))
            later((duration, time.monotonic() - ticket.received))
            later((queued, outcome.queue_s))
        else:
            self.state.metrics.requests.labels(model.name, model.active_variant,
                                               outcome.status).inc()
        self._release(ticket)
        ticket.respond(ticket, outcome)

    @staticmethod
    def _queued(ticket: Ticket) -> None:
        if not ticket.queued:
            ticket.queued = True
            if isinstance(ticket.model, Model):
                ticket.model.settled()

    def _release(self, ticket: Ticket) -> None:
        if ticket.client is not None:
            n = self._inflight.get(ticket.client, 0) - 1
            if n > 0:
                self._inflight[ticket.client] = n
            else:
                self._inflight.pop(ticket.client, None)
        self._later((self._inflight_gauge.dec, 1))

    def _ok_series(self, model: str, variant: str) -> tuple[Any, Any, Any]:
        """requests_total{status=OK}'s ``inc``, request and queue duration's ``observe``:
        looked up once each (applied later: ``edged.metrics.Later``)."""
        s = self._ok.get((model, variant))
        if s is None:
            m = self.state.metrics
            s = self._ok[(model, variant)] = (m.requests.labels(model, variant, "OK").inc,
                                              m.request_duration.labels(model).observe,
                                              m.queue_duration.labels(model).observe)
        return s
