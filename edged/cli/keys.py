"""``edged keys generate``: CURVE key pairs for the daemon and its clients."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from edged.cli.common import CliError


def add_parsers(sub: argparse._SubParsersAction) -> None:
    k = sub.add_parser("keys", help="CURVE key pairs for encrypted TCP")
    ksub = k.add_subparsers(dest="keys_cmd", required=True)
    kg = ksub.add_parser("generate", help="write NAME.key (public) and NAME.key_secret")
    kg.add_argument("name", help="whose keys: server, or a client's name")
    kg.add_argument("--dir", default=".", help="output directory")


def cmd_keys(args: argparse.Namespace) -> int:
    import zmq.auth

    d = Path(args.dir)
    try:
        d.mkdir(parents=True, exist_ok=True)
        public, secret = zmq.auth.create_certificates(str(d), args.name)
        os.chmod(secret, 0o600)
    except OSError as e:
        raise CliError(f"cannot write keys into {d}: {e.strerror or e}; give --dir a folder "
                       "this user can write") from None
    print(f"public key: {public}  (copy to the daemon's clients_dir, or give to clients as "
          f"--server-key)\nsecret key: {secret}  (keep private, mode 0600)")
    return 0
