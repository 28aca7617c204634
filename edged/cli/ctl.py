"""``edged status`` and ``edged ctl``: the daemon's control endpoint, for an operator."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from edged.cli.common import add_control_args


def add_parsers(sub: argparse._SubParsersAction) -> None:
    st = sub.add_parser("status", help="a readable summary from the control endpoint")
    st.add_argument("--json", action="store_true")
    add_control_args(st)

    ctl = sub.add_parser("ctl", help="operator actions on the control endpoint")
    add_control_args(ctl)
    csub = ctl.add_subparsers(dest="action", required=True)
    csub.add_parser("status")
    csub.add_parser("models")
    csub.add_parser("reload")
    for a in ("load", "unload"):
        csub.add_parser(a).add_argument("model")
    lv = csub.add_parser("level", help="pin a governor level, or 'auto'")
    lv.add_argument("level")
    sw = csub.add_parser("swap", help="pin a model to a variant by hand ('auto' releases); "
                                      "a governor level needing a lighter one still wins")
    sw.add_argument("model")
    sw.add_argument("variant")
    pl = csub.add_parser("pull", help="fetch, check and switch to a delivered model's new "
                                      "version (docs/delivery.md)")
    pl.add_argument("model")
    pl.add_argument("version", nargs="?", help="a version label or tag (default: the one the "
                    "source points at now)")
    pr = csub.add_parser("promote", help="switch a delivered model to VERSION by hand (gated)")
    pr.add_argument("model")
    pr.add_argument("version")
    rb = csub.add_parser("rollback", help="serve a delivered model's previous version again; "
                                          "the current one is never taken again")
    rb.add_argument("model")


def _control(args: argparse.Namespace, msg: dict[str, Any]) -> dict[str, Any] | None:
    from edged.client import ControlClient, EdgedClientError

    try:
        with ControlClient(args.control, args.timeout) as c:
            op = msg.pop("op")
            return c.call(op, raise_on_error=False, **msg)
    except EdgedClientError as e:  # no socket, no reply, or a field refused before sending
        print(f"edged: {e.message}", file=sys.stderr)
        return None


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
    r = _control(args, msg)
    if r is None:
        return 3
    print(json.dumps(r, indent=2))
    return 0 if r.get("status") == "OK" else 1


def cmd_status(args: argparse.Namespace) -> int:
    from edged.cli.status_text import format_status

    r = _control(args, {"op": "status"})
    if r is None:
        return 3
    if args.json or r.get("status") != "OK":
        print(json.dumps(r, indent=2))
        return 0 if r.get("status") == "OK" else 1
    print(format_status(r))
    return 0
