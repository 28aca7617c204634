"""What the commands share: where a daemon is found, and the options that say so."""

from __future__ import annotations

import argparse
import os

DEFAULT_CONFIG = "config.toml"
DEFAULT_ENDPOINT = "tcp://127.0.0.1:5555"


def add_client_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--endpoint", "-e", default=os.environ.get("EDGED_ENDPOINT", DEFAULT_ENDPOINT),
                   help=f"daemon endpoint (default $EDGED_ENDPOINT or {DEFAULT_ENDPOINT})")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for a reply")
    p.add_argument("--server-key", help="CURVE: the server's public certificate (server.key)")
    p.add_argument("--client-key", help="CURVE: this client's certificate (NAME.key_secret)")


def add_control_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--control", default=os.environ.get("EDGED_CONTROL"),
                   help="control endpoint (default $EDGED_CONTROL, else the control.sock found "
                        "in $RUNTIME_DIRECTORY, /run/edged, $XDG_RUNTIME_DIR/edged or the "
                        "newest /tmp/edged-*)")
    p.add_argument("--timeout", type=float, default=60.0)
