"""The control endpoint's messages: which operator ops exist and what each needs.

A control message is one JSON frame ``{"op": name, "id": optional, **fields}``; the
reply is one JSON frame ``{"status", "id", ...}`` (plus ``error`` unless OK). The daemon
(``edged.server.control``) checks its handlers against this table and the client
(``edged.client.control``, so ``edged ctl``) builds its messages from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edged.errors import InvalidArgument


@dataclass(frozen=True)
class ControlOp:
    """One operator action on the control endpoint: its name and the string fields it needs."""

    name: str
    fields: tuple[str, ...]
    summary: str


CONTROL_OPS: dict[str, ControlOp] = {op.name: op for op in (
    ControlOp("status", (), "daemon, models and governor at a glance"),
    ControlOp("models", (), "every model's description, as the inference 'models' op"),
    ControlOp("reload", (), "re-read the config file and apply what changed"),
    ControlOp("load", ("model",), "load a model that is in the config"),
    ControlOp("unload", ("model",), "drain and unload a model"),
    ControlOp("level", ("level",), "pin a governor level by name, or 'auto'"),
    ControlOp("swap", ("model", "variant"), "switch a model to one of its variants"),
    ControlOp("pull", ("model",), "fetch, check and switch to a delivered model's new "
              "version (the source's current one, or 'version')"),
    ControlOp("promote", ("model", "version"), "switch a delivered model to a version by hand "
              "(gated; pulled first when it is not stored)"),
    ControlOp("rollback", ("model",), "serve a delivered model's previous version again; the "
              "current one is never taken again from its source"),
    ControlOp("energy", (), "the governor's energy budget: 'budget_wh' and/or 'mission_s' "
              "counted from now, or 'off'; no field: what is in force"),
)}


def control_message(op: str, request_id: str | int | None = None,
                    **args: Any) -> dict[str, Any]:
    """A control message, checked against ``CONTROL_OPS`` for the ops this side knows.

    An op this side does not know is sent as given: the daemon answers ``NOT_FOUND`` with
    the ops it knows, and a newer daemon's op stays reachable from an older client."""
    if not isinstance(op, str) or not op:
        raise InvalidArgument("control op must be a non-empty string")
    spec = CONTROL_OPS.get(op)
    if spec is not None:
        for name in spec.fields:
            v = args.get(name)
            if not isinstance(v, str) or not v:
                raise InvalidArgument(f"control op {op!r} needs {name!r}: a non-empty string")
    msg: dict[str, Any] = {"op": op, **args}
    if request_id is not None:
        msg["id"] = request_id
    return msg


def energy_args(msg: dict[str, Any]) -> tuple[float | None, float | None, bool] | None:
    """The ``energy`` op's (budget_wh, mission_s, off); None when it only asks.

    Numbers > 0 (watt-hours, seconds); ``off`` is true or false and comes alone."""
    budget, mission, off = msg.get("budget_wh"), msg.get("mission_s"), msg.get("off", False)
    for key, v in (("budget_wh", budget), ("mission_s", mission)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                              or not 0 < v < float("inf")):
            raise InvalidArgument(f"{key!r} must be a number > 0; got {v!r}")
    if not isinstance(off, bool):
        raise InvalidArgument(f"'off' must be true or false; got {off!r}")
    if off and (budget is not None or mission is not None):
        raise InvalidArgument("'off' ends the energy budget: give it without budget_wh or "
                              "mission_s")
    if not off and budget is None and mission is None:
        return None
    return (None if budget is None else float(budget),
            None if mission is None else float(mission), off)
