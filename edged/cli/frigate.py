"""``edged frigate labelmap``: the labelmap file Frigate needs for a model edged serves."""

from __future__ import annotations

import argparse
import sys

from edged.cli.common import DEFAULT_CONFIG


def add_parsers(sub: argparse._SubParsersAction) -> None:
    fr = sub.add_parser("frigate", help="Frigate integration helpers (docs/frigate.md)")
    fsub = fr.add_subparsers(dest="frigate_cmd", required=True)
    fl = fsub.add_parser("labelmap", help="print a Frigate labelmap file for a detection model")
    fl.add_argument("model", help="a detection model of the config")
    fl.add_argument("--config", "-c", default=DEFAULT_CONFIG, metavar="FILE",
                    help=f"the config file (default {DEFAULT_CONFIG})")
    fl.add_argument("--endpoint", type=int, default=None, metavar="INDEX",
                    help="use the class_map of [[server.frigate]] number INDEX (from 0); "
                         "default: the first one serving MODEL")


def cmd_frigate(args: argparse.Namespace) -> int:
    """``edged frigate labelmap MODEL``: Frigate's ``labelmap_path`` file on stdout."""
    from edged.config.file import load_config
    from edged.detect.labels import labels_from_metadata, onnx_metadata
    from edged.errors import ConfigError
    from edged.protocols.frigate.wire import labelmap

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
