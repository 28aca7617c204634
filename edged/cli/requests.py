"""``edged infer``, ``edged models``, ``edged health``: the daemon's inference endpoint."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from edged.cli import exits
from edged.cli.common import add_client_args, endpoint_for, refusal_line
from edged.cli.status_text import rung_label


def add_parsers(sub: argparse._SubParsersAction) -> None:
    i = sub.add_parser("infer", help="send one image or .npy tensor and print the result")
    i.add_argument("model", help="the model's name (edged models lists them)")
    i.add_argument("input", help="a .jpg/.png image or a .npy tensor")
    i.add_argument("--top", type=int, default=3, help="classes to print (classifiers)")
    i.add_argument("--json", action="store_true", help="print the raw reply header")
    i.add_argument("--labels", metavar="FILE",
                   help="classifiers: a file with one class name per line")
    i.add_argument("--draw", metavar="OUT.jpg",
                   help="detectors: write the image with the boxes and labels drawn")
    i.add_argument("--conf", type=float, help="detectors: score threshold for this request")
    add_client_args(i)

    for name, help_, json_help in (
            ("models", "list the models the daemon serves, their state and variant",
             "print the daemon's whole models reply"),
            ("health", "print OK when every required model is ready, else what is not",
             "print the daemon's whole health reply (models, governor)")):
        p = sub.add_parser(name, help=help_)
        p.add_argument("--json", action="store_true", help=json_help)
        add_client_args(p)


def _client(args: argparse.Namespace) -> Any:
    from edged.client import Client

    return Client(endpoint_for(args), args.timeout, args.server_key, args.client_key)


def cmd_infer(args: argparse.Namespace) -> int:
    import numpy as np

    from edged.client import ClientTimeout

    p = Path(args.input)
    if not p.is_file():
        print(f"edged: {p}: no such file (give a .jpg/.png image or a .npy tensor)",
              file=sys.stderr)
        return exits.USAGE
    try:
        inputs: Any = np.load(p, allow_pickle=False) if p.suffix == ".npy" else p
    except ValueError as e:
        print(f"edged: {p}: not a .npy tensor numpy can read ({e})", file=sys.stderr)
        return exits.USAGE
    opts = {"conf": args.conf} if args.conf is not None else {}
    try:
        with _client(args) as c:
            r = c.infer(args.model, inputs, raise_on_error=False, **opts)
    except ClientTimeout as e:
        print(f"edged: {e} (is the daemon running?)", file=sys.stderr)
        return exits.UNREACHABLE
    except ValueError as e:
        print(f"edged: {e}", file=sys.stderr)
        return exits.USAGE
    if args.json:
        print(json.dumps(r.header, indent=2))
    if not r.ok:
        print(f"edged: {refusal_line(r.header)}", file=sys.stderr)
        return exits.REFUSED
    if args.json:
        return exits.OK
    labels = Path(args.labels).read_text().split() if args.labels else None
    t = r.header["timing"]
    print(f"model={r.header['model']} variant={r.header['variant']} "
          f"queue={t['queue_us']}us compute={t['compute_us']}us batch={t['batch']}")
    if r.detections is not None:
        return _print_detections(r.detections, p, args.draw)
    for name, arr in r.outputs.items():
        if arr.ndim == 2 and arr.shape[0] == 1 and arr.dtype.kind == "f":
            logits = arr[0].astype(np.float64)
            probs = np.exp(logits - logits.max())
            probs /= probs.sum()
            top = np.argsort(-probs)[: args.top]
            best = labels[top[0]] if labels else int(top[0])
            print(f"{name}: class {best}  (" + ", ".join(
                f"{labels[k] if labels else int(k)}: {probs[k]:.3f}" for k in top) + ")")
        else:
            print(f"{name}: {arr.dtype} {list(arr.shape)}")
    return 0


def _print_detections(dets: Any, image: Path, draw: str | None) -> int:
    from edged.detect.table import detections_table

    names = [dets.labels.get(k, str(k)) for k in range(max(dets.labels, default=-1) + 1)]
    # a pipeline's stages: each box's label, or why it has none (docs/pipelines.md)
    extra = [(stage, [dets.stage_label(stage, k) or f"({dets.stage_state(stage, k)})"
                      for k in range(len(dets))]) for stage in dets.stages]
    print(detections_table(dets.rows, names, extra))
    if draw:
        import cv2

        from edged.detect.draw import draw_detections

        img = cv2.imread(str(image), cv2.IMREAD_COLOR)
        if img is None:
            print(f"edged: --draw needs an image file; {image} is not one", file=sys.stderr)
            return 2
        cv2.imwrite(draw, draw_detections(img, dets.rows[:, :6], names))
        print(f"wrote {draw}")
    return 0


def cmd_simple(args: argparse.Namespace) -> int:
    """``edged models`` / ``edged health``: a few lines for a person, ``--json`` for the
    reply as the daemon sent it."""
    from edged.client import ClientTimeout

    try:
        with _client(args) as c:
            r = c.health() if args.cmd == "health" else c.models()
    except ClientTimeout as e:
        print(f"edged: {e} (is the daemon running?)", file=sys.stderr)
        return exits.UNREACHABLE
    if args.json:
        print(json.dumps(r.header, indent=2))
    elif args.cmd == "health":
        print(health_line(r.header))
    elif not r.ok:
        print(f"edged: {refusal_line(r.header)}", file=sys.stderr)
    else:
        print(models_table(r.header.get("models") or []))
    return exits.OK if r.ok else exits.REFUSED


def health_line(h: dict[str, Any]) -> str:
    """``OK``, or what is not ready in one line (the daemon's phase and the models that
    are not ready)."""
    if h.get("status") == "OK":
        return "OK"
    models = h.get("models") or {}
    waiting = ", ".join(f"{name} {state}" for name, state in models.items() if state != "ready")
    state = h.get("state")
    parts = [f"daemon {state}"] if state and state != "serving" else []
    if waiting:
        parts.append(f"not ready: {waiting}")
    return "NOT READY: " + ("; ".join(parts) or str(h.get("error") or h.get("status")))


def models_table(models: list[dict[str, Any]]) -> str:
    """One line per model: name, state, the variant serving, the ladder."""
    rows = [("MODEL", "STATE", "VARIANT", "LADDER (heaviest first)")]
    rows += [(m["name"], m.get("state") or "-", m.get("active_variant") or "-",
              " > ".join(rung_label(m, v) for v in m.get("variants") or [])) for m in models]
    w = [max(len(r[i]) for r in rows) + 2 for i in range(3)]
    return "\n".join(f"{r[0]:<{w[0]}}{r[1]:<{w[1]}}{r[2]:<{w[2]}}{r[3]}" for r in rows)
