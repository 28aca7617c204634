"""``edged frigate labelmap``: the labelmap file Frigate needs for a model or pipeline edged
serves."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from edged.cli.common import DEFAULT_CONFIG

if TYPE_CHECKING:
    from edged.config.file import Config


def add_parsers(sub: argparse._SubParsersAction) -> None:
    fr = sub.add_parser("frigate", help="files Frigate needs (labelmap)")
    fsub = fr.add_subparsers(dest="frigate_cmd", required=True)
    fl = fsub.add_parser("labelmap", help="print a Frigate labelmap file for a detection model "
                         "or a pipeline a [[server.frigate]] endpoint serves")
    fl.add_argument("model", help="a detection model or pipeline of the config")
    fl.add_argument("--config", "-c", default=DEFAULT_CONFIG, metavar="FILE",
                    help=f"the config file (default {DEFAULT_CONFIG})")
    fl.add_argument("--endpoint", type=int, default=None, metavar="INDEX",
                    help="use the class_map of [[server.frigate]] number INDEX (from 0); "
                         "default: the first one serving MODEL")


def cmd_frigate(args: argparse.Namespace) -> int:
    """``edged frigate labelmap MODEL``: Frigate's ``labelmap_path`` file on stdout."""
    from edged.config.file import load_config
    from edged.protocols.frigate.wire import labelmap

    cfg = load_config(args.config)  # a bad config: its ConfigError, said with its code
    frigate = list(cfg.server.frigate)
    if args.endpoint is not None:
        if not 0 <= args.endpoint < len(frigate):
            print(f"edged: --endpoint {args.endpoint}: the config has {len(frigate)} "
                  "[[server.frigate]] table(s)", file=sys.stderr)
            return 2
        chosen = frigate[args.endpoint]
    else:
        chosen = next((f for f in frigate if f.model == args.model), None)
    class_map = dict(chosen.class_map) if chosen else {}
    pipe = cfg.pipeline(args.model)
    if pipe is not None:  # the label_from stage's labels, the detector's on the ids left
        stage = next((s for s in pipe.stages if chosen and s.name == chosen.label_from), None)
        if stage is None or stage.labels is None:
            print(f"edged: no [[server.frigate]] endpoint serves pipeline {args.model!r} "
                  "(with label_from)", file=sys.stderr)
            return 2
        sys.stdout.write(labelmap(stage.labels, class_map,
                                  _detector_labels(cfg, pipe.detector) or ()))
        return 0
    labels = _detector_labels(cfg, args.model)
    if labels is None:
        print(f"edged: {args.config}: no detection model {args.model!r}", file=sys.stderr)
        return 2
    if not labels:
        print(f"edged: model {args.model!r} names no labels (set [models.postprocess] labels "
              "or labels_file)", file=sys.stderr)
        return 2
    sys.stdout.write(labelmap(labels, class_map))
    return 0


def _detector_labels(cfg: Config, name: str) -> tuple[str, ...] | None:
    """A detection model's labels (its config's, else its ONNX file's metadata); None when
    ``name`` is not a detection model of ``cfg``, () when it names none."""
    from edged.detect.labels import labels_from_metadata, onnx_metadata

    mc = cfg.model(name)
    if mc is None or mc.postprocess is None:
        return None
    labels = mc.postprocess.labels
    if labels is None and mc.variants and mc.variants[0].path.suffix == ".onnx":
        labels = labels_from_metadata(onnx_metadata(mc.variants[0].path))
    return tuple(labels or ())
