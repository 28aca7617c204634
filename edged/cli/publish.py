"""``edged publish DIR --to SOURCE --sign KEY [--sign-cert CERT --cert-chain CA...]``: a
version, once, for a whole fleet.

Why a command of its own: on the workstation that ran ``edged compile``, this packs what it
wrote (artifacts, sidecars, golden files, ``variants.toml``) with the model's contract
(``model.json``) and a labelled validation set into a bundle whose manifest names every
file by SHA-256, signs it with OpenSSF ``model-signing`` (offline: an EC key whose public
key the devices hold, or that key with its certificate and the chain above it, for devices
that trust a root) and puts it at the source every device polls (docs/delivery.md). The
devices check the rest.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import tomllib
from pathlib import Path


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("publish", help="pack, sign and push a model version for devices to "
                       "pull")
    p.add_argument("dir", type=Path, help="the folder edged compile wrote (with variants.toml)")
    p.add_argument("--to", required=True, metavar="SOURCE",
                   help="oci://HOST/REPO:TAG, file:///PATH or a folder a web server serves")
    p.add_argument("--sign", type=Path, metavar="KEY", help="the EC private key (PEM)")
    p.add_argument("--sign-cert", type=Path, metavar="CERT",
                   help="KEY's certificate (PEM): sign with a certificate identity, for "
                        "devices whose certificate_chain holds its root")
    p.add_argument("--cert-chain", type=Path, nargs="+", default=[], metavar="CA",
                   help="with --sign-cert: the certificates above CERT (its issuer, up to "
                        "the root the devices trust), PEM")
    p.add_argument("--unsigned", action="store_true",
                   help="no signature (only a file:// source with allow_unsigned takes it)")
    p.add_argument("--model", required=True, help="the model's name in the devices' config")
    p.add_argument("--version", required=True, help="this version's label (e.g. v2)")
    p.add_argument("--contract", type=Path, help="model.json (default DIR/model.json)")
    p.add_argument("--validation", type=Path,
                   help="labelled .npz (x, y) (default: model.json's \"validation\")")
    p.add_argument("--accuracy", type=float,
                   help="the accuracy (0..1) claimed on it (default: model.json's "
                        "\"accuracy\" or, for a detector, \"map50\" of the ladder's top "
                        "variant)")
    p.add_argument("--metric", choices=("top1", "map50"),
                   help="top1 (a classifier: .npz x, y) or map50 (a detector: .npz images, "
                        "boxes); default: map50 when model.json has a \"postprocess\"")
    p.add_argument("--insecure", action="store_true", help="plain HTTP to an OCI registry")


def _claimed(args: argparse.Namespace, contract: Path) -> float:
    if args.accuracy is not None:
        return float(args.accuracy)
    import json

    card = json.loads(contract.read_text())
    acc = card.get("map50") if _metric(args, contract) == "map50" else card.get("accuracy")
    ladder = tomllib.loads((args.dir / "variants.toml").read_text())
    top = ladder["models"]["variants"][0]
    stem = Path(str(top.get("path", ""))).stem
    for key in (top.get("name"), stem):
        if isinstance(acc, dict) and key in acc:
            return float(acc[key])
    raise ValueError(f"no --accuracy and {contract} has no \"accuracy\" for {top.get('name')}")


def _metric(args: argparse.Namespace, contract: Path) -> str:
    if args.metric:
        return str(args.metric)
    import json

    return "map50" if "postprocess" in json.loads(contract.read_text()) else "top1"


def cmd_publish(args: argparse.Namespace) -> int:
    from edged.delivery.bundle import BundleRefused, pack
    from edged.delivery.sources import open_source
    from edged.delivery.sources.base import SourceError
    from edged.delivery.trust import sign

    if args.sign is None and not args.unsigned:
        print("edged publish: give --sign KEY (or --unsigned for a file:// source that "
              "allows it)", file=sys.stderr)
        return 2
    if (args.sign_cert is not None or args.cert_chain) and args.sign is None:
        print("edged publish: --sign-cert and --cert-chain sign with --sign KEY (the "
              "certificate's private key)", file=sys.stderr)
        return 2
    if args.sign_cert is None and args.cert_chain:
        print("edged publish: --cert-chain goes with --sign-cert CERT", file=sys.stderr)
        return 2
    contract = args.contract or args.dir / "model.json"
    if not contract.is_file():
        print(f"edged publish: {contract} is missing: give the folder `edged compile --out "
              "DIR` wrote (it writes DIR/model.json), or --contract MODEL.json",
              file=sys.stderr)
        return 2
    try:
        accuracy = _claimed(args, contract)
        source = open_source(args.to, insecure=args.insecure)
        with tempfile.TemporaryDirectory(prefix="edged-publish-") as tmp:
            out = Path(tmp) / "bundle"
            manifest = pack(args.dir, out, args.model, args.version, accuracy, contract,
                            args.validation, _metric(args, contract))
            if args.sign is not None:
                sign(out, args.sign, certificate=args.sign_cert,
                     chain=tuple(args.cert_chain))
            tag = args.to.rsplit(":", 1)[-1] if args.to.startswith("oci://") and ":" in \
                args.to.rsplit("/", 1)[-1] else None
            where = source.publish(out, args.model, args.version, manifest.digest,
                                   (tag,) if tag else ())
    except (BundleRefused, SourceError, ValueError, OSError, KeyError) as e:
        print(f"edged publish: {e}", file=sys.stderr)
        return 1
    how = ("signed with the certificate " + str(args.sign_cert) if args.sign_cert else
           "signed" if args.sign else "UNSIGNED")
    print(f"published {args.model} {args.version}: manifest sha256 {manifest.digest}, "
          f"{len(manifest.files)} files, {manifest.total_bytes} bytes, {how} -> {where}")
    return 0
