"""The rung build of a model Frigate sent: ``edged.delivery.rung_child`` with the reference
made from the graph and the ``model_type`` it was sent as.

Why a module here: only Frigate's road knows how a sent graph becomes a served model
(``edged.protocols.frigate.model_check``); the build itself, its check, its timing and its
ladder rule are the delivery layer's, shared with delivered versions.
"""

from __future__ import annotations

import sys
from typing import Any

from edged.delivery.rung_child import child_parser, run_child
from edged.protocols.frigate.model_check import check_model, model_config


def main(argv: list[str] | None = None) -> int:
    """``python -m edged.protocols.frigate.rung_child SRC FRAMES.npz`` (the daemon runs
    it); progress on stdout, the record as the last line (JSON) and in
    ``<sha>.ladder.json``."""
    ap = child_parser(main.__doc__)
    ap.add_argument("--model-type", default=None)
    ap.add_argument("--color", default="rgb", choices=("rgb", "bgr"))
    args = ap.parse_args(argv)

    def base_for() -> tuple[Any, str]:
        checked = check_model(args.src.read_bytes(), args.model_type)
        return model_config("check", "fp32", args.src, checked, args.color), \
            checked.image.name

    return run_child(args, base_for)


if __name__ == "__main__":
    sys.exit(main())
