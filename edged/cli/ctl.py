"""``edged status`` and ``edged ctl``: the daemon's control endpoint, for an operator.

An action answers in one line saying what changed (``level hot (pinned by operator)``);
``--json`` prints the daemon's reply instead.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from edged.cli import exits
from edged.cli.common import CliError, add_control_args, control_for, refusal_line


def add_parsers(sub: argparse._SubParsersAction) -> None:
    st = sub.add_parser("status", help="what a daemon runs and why (models, listeners, "
                                       "governor)")
    st.add_argument("--json", action="store_true", help="print the daemon's whole status reply")
    add_control_args(st)

    ctl = sub.add_parser("ctl", help="operator actions: reload, load, unload, level, swap, "
                                     "pull, promote, rollback")
    add_control_args(ctl)
    csub = ctl.add_subparsers(dest="action", required=True, metavar="ACTION")

    def action(name: str, help_: str) -> argparse.ArgumentParser:
        a = csub.add_parser(name, help=help_)
        a.add_argument("--json", action="store_true",
                       help="print the daemon's reply instead of the one-line summary")
        add_control_args(a, given_before=True)
        return a

    action("status", "the daemon's status reply, as JSON")
    action("models", "the models and their variants, as JSON")
    action("reload", "re-read the config and changed model files (like systemctl reload); "
                     "says what changed")
    for a, what in (("load", "load a model the config lists"),
                    ("unload", "stop serving a model until it is loaded again")):
        action(a, what).add_argument("model", help="the model's name")
    lv = action("level", "hold the governor at a level by name (normal, warm, hot with "
                         "levels = auto), or auto to release it")
    lv.add_argument("level", help="a level name from the config's [governor], or auto")
    sw = action("swap", "pin a model to a variant by hand (auto releases it); a governor "
                        "level needing a lighter one still wins")
    sw.add_argument("model", help="the model's name")
    sw.add_argument("variant", help="one of the model's variants, or auto")
    pl = action("pull", "fetch, check and switch to a delivered model's new version "
                        "(docs/delivery.md)")
    pl.add_argument("model", help="the model's name")
    pl.add_argument("version", nargs="?", help="a version label or tag (default: the one "
                    "the source points at now)")
    pr = action("promote", "switch a delivered model to a version by hand (it is checked "
                           "first)")
    pr.add_argument("model", help="the model's name")
    pr.add_argument("version", help="a version the device holds")
    rb = action("rollback", "serve a delivered model's previous version again; the current "
                            "one is never taken again")
    rb.add_argument("model", help="the model's name")
    en = action("energy", "the governor's energy budget: set a budget and/or a mission length "
                          "counted from now, or --off; without options, what is in force")
    en.add_argument("--budget-wh", type=float, metavar="WH", help="watt-hours from now")
    en.add_argument("--mission", type=duration_s, metavar="DURATION",
                    help="mission length from now: seconds, or 90s, 30m, 2h, 1h30m")
    en.add_argument("--off", action="store_true", help="end the energy budget mode")


def _control(args: argparse.Namespace, msg: dict[str, Any]) -> dict[str, Any]:
    """The daemon's reply to ``msg``; ``CliError`` when there is none (no daemon, no
    reply in time: UNREACHABLE) or a field is refused before sending (USAGE)."""
    from edged.client import ClientTimeout, ControlClient, EdgedClientError, Unavailable

    control = control_for(args)
    try:
        with ControlClient(control, args.timeout) as c:
            op = msg.pop("op")
            return c.call(op, raise_on_error=False, **msg)
    except (ClientTimeout, Unavailable) as e:
        raise CliError(f"{e.message} (is the daemon running? `edged status` finds it)",
                       exits.UNREACHABLE) from None
    except EdgedClientError as e:  # a field refused before sending
        raise CliError(e.message, exits.USAGE) from None


def cmd_ctl(args: argparse.Namespace) -> int:
    msg: dict[str, Any] = {"op": args.action}
    if args.action in ("load", "unload", "swap", "pull", "promote", "rollback"):
        msg["model"] = args.model
    if args.action in ("pull", "promote") and args.version:
        msg["version"] = args.version
    if args.action == "swap":
        msg["variant"] = args.variant
    if args.action == "level":
        msg["level"] = args.level
    if args.action == "energy":
        given = {"budget_wh": args.budget_wh, "mission_s": args.mission,
                 "off": args.off or None}
        msg.update({k: v for k, v in given.items() if v is not None})
    r = _control(args, msg)
    ok = r.get("status") == "OK"
    if args.json or (ok and args.action in ("status", "models")):
        print(json.dumps(r, indent=2))
    elif ok:
        print(action_line(args.action, r))
    if not ok:
        print(f"edged: {refusal_line(r)}", file=sys.stderr)
    return exits.OK if ok else exits.REFUSED


def action_line(action: str, r: dict[str, Any]) -> str:
    """What an OK control reply changed, in one line."""
    if action == "level":
        return level_line(r.get("governor") or {})
    if action == "energy":
        from edged.cli.status_text import energy_line

        return energy_line(r.get("energy"))
    if action == "reload":
        return reload_line(r.get("reload") or {})
    if action in ("pull", "promote", "rollback"):
        return delivery_line(r.get("delivery") or {})
    m = r.get("model") or {}
    if action == "swap":
        pin = r.get("pin")
        line = f"{m.get('name')}: {m.get('active_variant')} serves"
        line += f" (pinned by {pin['by']})" if pin else " (pin released)"
        if r.get("held_by_governor"):
            line += f"; {r['held_by_governor']}"
        return line
    if action == "load":
        return f"{m.get('name')}: {m.get('state')} ({m.get('active_variant')})"
    return f"{m.get('name')}: {m.get('state')}"


def duration_s(text: str) -> float:
    """``5400``, ``90s``, ``30m``, ``2h`` or ``1h30m`` in seconds (argparse's type)."""
    m = re.fullmatch(r"\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*"
                     r"(?:(\d+(?:\.\d+)?)s?)?\s*", text)
    if not text.strip() or m is None:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 5400, 90m, 2h)")
    h, mi, sec = (float(g) if g else 0.0 for g in m.groups())
    return h * 3600 + mi * 60 + sec


def delivery_line(d: dict[str, Any]) -> str:
    """``version v2 serves (sha256 1f0c...); stage serving`` for a delivered model."""
    line = f"version {d.get('version') or '-'} serves"
    if d.get("digest"):
        line += f" (sha256 {str(d['digest'])[:12]})"
    if d.get("stage") and d.get("stage") != "serving":
        line += f"; candidate at {d['stage']}"
    last = d.get("last_rollback")
    if last:
        line += f"; rolled back from {last.get('version')}: {last.get('reason')}"
    return line


def level_line(g: dict[str, Any]) -> str:
    """``level hot (pinned by operator)`` / ``level normal (automatic): why``."""
    if g.get("pinned"):
        return f"level {g.get('level')} (pinned by operator; automatic: " \
               f"{g.get('automatic_level')}; edged ctl level auto releases it)"
    why = f": {g['reason']}" if g.get("reason") else ""
    return f"level {g.get('level')} (automatic){why}"


def reload_line(rl: dict[str, Any]) -> str:
    """``reload: changed digits (cnn-fp32: ... bytes changed); added -; removed -``."""
    why = rl.get("why") or {}
    parts = []
    for key in ("added", "changed", "removed"):
        names = rl.get(key) or []
        if names:
            parts.append(f"{key} " + ", ".join(
                f"{n} ({why[n]})" if n in why else n for n in names))
    listeners = rl.get("listeners") or {}
    for key in ("opened", "closed"):
        if listeners.get(key):
            parts.append(f"{key} " + ", ".join(listeners[key]))
    if rl.get("listener_errors"):
        parts.append("could not open " + "; ".join(rl["listener_errors"]))
    took = f" in {rl['ms']:.0f} ms" if rl.get("ms") is not None else ""
    return "reload: " + ("; ".join(parts) if parts else "nothing changed") + took


def cmd_status(args: argparse.Namespace) -> int:
    from edged.cli.status_text import format_status

    r = _control(args, {"op": "status"})
    if args.json:
        print(json.dumps(r, indent=2))
    if r.get("status") != "OK":
        print(f"edged: {refusal_line(r)}", file=sys.stderr)
        return exits.REFUSED
    if not args.json:
        print(format_status(r))
    return exits.OK
