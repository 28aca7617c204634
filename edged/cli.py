"""The ``edged`` command: serve, check, infer, models, health, status, ctl, compile, keys."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

DEFAULT_CONFIG = "config.toml"
DEFAULT_ENDPOINT = "tcp://127.0.0.1:5555"


def _add_client_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--endpoint", "-e", default=os.environ.get("EDGED_ENDPOINT", DEFAULT_ENDPOINT),
                   help=f"daemon endpoint (default $EDGED_ENDPOINT or {DEFAULT_ENDPOINT})")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for a reply")
    p.add_argument("--server-key", help="CURVE: the server's public certificate (server.key)")
    p.add_argument("--client-key", help="CURVE: this client's certificate (NAME.key_secret)")


def _add_control_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--control", default=os.environ.get("EDGED_CONTROL"),
                   help="control endpoint (default $EDGED_CONTROL, else the control.sock found "
                        "in $RUNTIME_DIRECTORY, /run/edged, $XDG_RUNTIME_DIR/edged or the "
                        "newest /tmp/edged-*)")
    p.add_argument("--timeout", type=float, default=60.0)


#: Subcommands whose parsers live in (and import) their own modules.
_HEAVY = ("bench", "compile", "governor", "device-check", "isa-check")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or for a ``command`` not in ``_HEAVY`` one without those
    commands' parsers: building them imports their modules (numpy, the load generator,
    the governor), ~25 ms of ``edged serve``'s start-up."""
    ap = argparse.ArgumentParser(prog="edged", description=__doc__)
    ap.add_argument("--version", action="version", version=f"edged {_version()}")
    sub = ap.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("serve", help="run the daemon")
    s.add_argument("--config", "-c", default=DEFAULT_CONFIG)
    s.add_argument("--endpoint", action="append", dest="endpoints", metavar="ENDPOINT",
                   help="inference endpoint (repeatable; replaces [server] endpoints)")
    s.add_argument("--metrics", metavar="HOST:PORT", help="metrics listen address, or 'off'")
    s.add_argument("--runtime-dir", help="directory for ipc:// sockets")
    s.add_argument("--control", help="control endpoint (ipc://...)")
    s.add_argument("--log-level", choices=("debug", "info", "warning", "error"))

    c = sub.add_parser("check", help="validate a config and load every artifact")
    c.add_argument("config", nargs="?", default=DEFAULT_CONFIG)
    c.add_argument("--verify", action="store_true",
                   help="also check every variant against the model's reference on this "
                        "device, as a swap would, and print each measure (edged.device_verify)")
    c.add_argument("--json", action="store_true", help="with --verify: machine-readable")

    i = sub.add_parser("infer", help="send one image or .npy tensor and print the result")
    i.add_argument("model")
    i.add_argument("input", help="a .jpg/.png image or a .npy tensor")
    i.add_argument("--top", type=int, default=3, help="classes to print (classifiers)")
    i.add_argument("--json", action="store_true", help="print the raw reply header")
    i.add_argument("--labels", help="file with one label per line")
    i.add_argument("--draw", metavar="OUT.jpg",
                   help="detectors: write the image with the boxes and labels drawn")
    i.add_argument("--conf", type=float, help="detectors: score threshold for this request")
    _add_client_args(i)

    for name, help_ in (("models", "list the models the daemon serves"),
                        ("health", "is the daemon ready?")):
        p = sub.add_parser(name, help=help_)
        _add_client_args(p)

    st = sub.add_parser("status", help="a readable summary from the control endpoint")
    st.add_argument("--json", action="store_true")
    _add_control_args(st)

    ctl = sub.add_parser("ctl", help="operator actions on the control endpoint")
    _add_control_args(ctl)
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

    k = sub.add_parser("keys", help="CURVE key management")
    ksub = k.add_subparsers(dest="keys_cmd", required=True)
    kg = ksub.add_parser("generate", help="write NAME.key (public) and NAME.key_secret")
    kg.add_argument("name")
    kg.add_argument("--dir", default=".", help="output directory")

    fr = sub.add_parser("frigate", help="Frigate integration helpers (docs/frigate.md)")
    fsub = fr.add_subparsers(dest="frigate_cmd", required=True)
    fl = fsub.add_parser("labelmap", help="print a Frigate labelmap file for a detection model")
    fl.add_argument("model")
    fl.add_argument("--config", "-c", default=DEFAULT_CONFIG)
    fl.add_argument("--endpoint", type=int, default=None, metavar="INDEX",
                    help="use the class_map of [[server.frigate]] number INDEX (from 0); "
                         "default: the first one serving MODEL")

    if command is not None and command not in _HEAVY:
        return ap
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
    return ap


def _version() -> str:
    from edged import __version__

    return __version__


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    first = next((a for a in argv if not a.startswith("-")), None)
    args = build_parser(first if first in _COMMANDS else None).parse_args(argv)
    try:
        return int(_COMMANDS[args.cmd](args) or 0)
    except KeyboardInterrupt:
        return 130


# -- serve / check ------------------------------------------------------------------------

def cmd_serve(args: argparse.Namespace) -> int:
    from edged.config import load_config
    from edged.errors import ConfigError
    from edged.logs import setup_logging

    overrides = {"endpoints": args.endpoints, "metrics": args.metrics,
                 "runtime_dir": args.runtime_dir, "control": args.control}
    try:
        cfg = load_config(args.config).with_overrides(**overrides)
    except ConfigError as e:
        print("edged: invalid config:\n  " + "\n  ".join(e.problems), file=sys.stderr)
        return 2
    setup_logging(args.log_level or cfg.server.log_level)
    from edged.backends.load import preopen

    preopen(cfg.models)  # while the server's modules import (edged.backends.load)
    import asyncio

    from edged.server import Server, StartupError

    try:
        return asyncio.run(Server(cfg, overrides).run())
    except StartupError as e:
        print(f"edged: cannot start: {e}", file=sys.stderr)
        return 1


def cmd_check(args: argparse.Namespace) -> int:
    if args.verify:
        from edged.device_verify import cmd_check_verify

        return cmd_check_verify(args)
    from edged.config import load_config
    from edged.errors import ConfigError
    from edged.heads import open_head
    from edged.metrics import Metrics
    from edged.preprocess import Preprocessor
    from edged.variant_open import open_with_head

    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        print(f"{args.config}: {len(e.problems)} problem(s):")
        for p in e.problems:
            print(f"  - {p}")
        return 1
    problems = 0
    metrics = Metrics()  # the heads' series; nothing is exported
    for m in cfg.models:
        head = open_head(m, metrics, Preprocessor(m.preprocess) if m.preprocess else None)
        for i, v in enumerate(m.variants):
            try:
                loaded = open_with_head(m, i, head)
            except Exception as e:
                problems += 1
                print(f"FAIL {m.name}/{v.name} ({v.backend}, {v.path}): {e}")
                continue
            backend = loaded.backend
            ins = ", ".join(f"{s.name} {s.dtype} {list(s.shape)}" for s in backend.inputs)
            print(f"ok   {m.name}/{v.name} ({v.backend} on {backend.info.device}) "
                  f"loaded+warmed in {loaded.load_s * 1000:.0f} ms; inputs: {ins}")
            backend.close()
    if problems:
        print(f"{problems} artifact(s) failed to load")
        return 1
    print(f"{args.config}: OK ({len(cfg.models)} model(s))")
    return 0


# -- client commands ------------------------------------------------------------------------

def _client(args: argparse.Namespace) -> Any:
    from edged.client import Client

    return Client(args.endpoint, args.timeout, args.server_key, args.client_key)


def cmd_infer(args: argparse.Namespace) -> int:
    import numpy as np

    from edged.client import ClientTimeout

    p = Path(args.input)
    if not p.exists():
        print(f"edged: {p}: no such file", file=sys.stderr)
        return 2
    inputs: Any = np.load(p, allow_pickle=False) if p.suffix == ".npy" else p
    opts = {"conf": args.conf} if args.conf is not None else {}
    try:
        with _client(args) as c:
            r = c.infer(args.model, inputs, raise_on_error=False, **opts)
    except ClientTimeout as e:
        print(f"edged: {args.endpoint}: {e} (is the daemon running?)", file=sys.stderr)
        return 3
    except ValueError as e:
        print(f"edged: {e}", file=sys.stderr)
        return 2
    if args.json or not r.ok:
        print(json.dumps(r.header, indent=2))
        return 0 if r.ok else 1
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
    print(detections_table(dets.rows, names))
    if draw:
        import cv2

        from edged.detect.draw import draw_detections

        img = cv2.imread(str(image), cv2.IMREAD_COLOR)
        if img is None:
            print(f"edged: --draw needs an image file; {image} is not one", file=sys.stderr)
            return 2
        cv2.imwrite(draw, draw_detections(img, dets.rows, names))
        print(f"wrote {draw}")
    return 0


def cmd_simple(args: argparse.Namespace) -> int:
    from edged.client import ClientTimeout

    try:
        with _client(args) as c:
            r = c.health() if args.cmd == "health" else c.models()
    except ClientTimeout as e:
        print(f"edged: {args.endpoint}: {e} (is the daemon running?)", file=sys.stderr)
        return 3
    print(json.dumps(r.header, indent=2))
    return 0 if r.ok else 1


# -- control commands -----------------------------------------------------------------------

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
    if args.action in ("load", "unload", "swap"):
        msg["model"] = args.model
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
    from edged.status_text import format_status

    r = _control(args, {"op": "status"})
    if r is None:
        return 3
    if args.json or r.get("status") != "OK":
        print(json.dumps(r, indent=2))
        return 0 if r.get("status") == "OK" else 1
    print(format_status(r))
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    import zmq.auth

    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    public, secret = zmq.auth.create_certificates(str(d), args.name)
    os.chmod(secret, 0o600)
    print(f"public key: {public}  (copy to the daemon's clients_dir, or give to clients as "
          f"--server-key)\nsecret key: {secret}  (keep private, mode 0600)")
    return 0


def cmd_frigate(args: argparse.Namespace) -> int:
    """``edged frigate labelmap MODEL``: Frigate's ``labelmap_path`` file on stdout."""
    from edged.config import load_config
    from edged.detect.labels import labels_from_metadata, onnx_metadata
    from edged.errors import ConfigError
    from edged.frigate_protocol import labelmap

    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 2
    mc = cfg.model(args.model)
    if mc is None or mc.postprocess is None:
        print(f"edged: {args.config}: no detection model {args.model!r}", file=sys.stderr)
        return 2
    labels = mc.postprocess.labels
    if labels is None:
        path = mc.variants[0].path
        labels = labels_from_metadata(onnx_metadata(path)) if path.suffix == ".onnx" else None
    if not labels:
        print(f"edged: model {args.model!r} names no labels (set [models.postprocess] labels "
              "or labels_file)", file=sys.stderr)
        return 2
    frigate = list(cfg.server.frigate)
    if args.endpoint is not None:
        if not 0 <= args.endpoint < len(frigate):
            print(f"edged: --endpoint {args.endpoint}: the config has {len(frigate)} "
                  "[[server.frigate]] table(s)", file=sys.stderr)
            return 2
        chosen = frigate[args.endpoint]
    else:
        chosen = next((f for f in frigate if f.model == args.model), None)
    sys.stdout.write(labelmap(labels, dict(chosen.class_map) if chosen else {}))
    return 0


def cmd_governor(args: argparse.Namespace) -> int:
    from edged.governor.replay import run

    return run(args)


def cmd_compile(args: argparse.Namespace) -> int:
    from edged.compile.cli import run

    return run(args)


_COMMANDS = {
    "serve": cmd_serve, "check": cmd_check, "infer": cmd_infer, "models": cmd_simple,
    "health": cmd_simple, "status": cmd_status, "ctl": cmd_ctl, "keys": cmd_keys,
    "compile": cmd_compile, "bench": lambda a: a.func(a), "governor": cmd_governor,
    "frigate": cmd_frigate, "device-check": lambda a: a.func(a),
    "isa-check": lambda a: a.func(a),
}
