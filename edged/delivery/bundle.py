"""A model version as it travels: a flat folder of files, a manifest naming each with its
SHA-256, and a signature over all of them.

Why a manifest beside the signature: the signature (``edged.delivery.trust``) says *who*
published the files; the manifest says *what they are* to edged: which model and version,
which file is the contract (``model.json``: inputs, outputs, pre/post-processing, labels),
which the ladder (``variants.toml``, as ``edged compile`` writes it), which the labelled
validation set and the accuracy the publisher claims on it (the device's accuracy gate
holds the version to that claim). The version's identity is the manifest's SHA-256: a
manifest names every file by digest, so one digest pins every byte.

Flat, because an OCI registry stores each file as a layer named by its base name (ORAS
drops folders): a bundle's files are base names only, and a manifest naming a path is
refused.

``manifest.json``::

    {"format": "edged-bundle/1", "model": "digits", "version": "v2",
     "created": "2026-12-03T10:00:00Z",
     "files": {"cnn-fp32.onnx": {"sha256": "...", "bytes": 123}, ...},
     "contract": "model.json", "ladder": "variants.toml",
     "validation": {"file": "validation.npz", "metric": "top1", "accuracy": 0.9978}}
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edged.backends.support.sidecar import sha256_file
from edged.delivery.atomic import atomic_write
from edged.delivery.trust import SIGNATURE

MANIFEST = "manifest.json"
FORMAT = "edged-bundle/1"
MAX_MANIFEST_BYTES = 1 << 20
#: a bundle file's name: a base name, no path, no hidden file
_FILE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,199}$")
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")
#: what ``edged compile`` writes that a bundle carries (the rest of DIR stays behind)
PACKED = ("*.onnx", "*.onnx.json", "*.onnx.golden.npz", "*.xml", "*.bin", "*.xml.json",
          "*.so", "*.so.json", "*.plan", "*.plan.json", "*.golden.npz", "variants.toml",
          "source.json")
METRICS = ("top1", "map50")


class BundleRefused(Exception):
    """A bundle edged will not take; the message says which file or key is wrong."""


def check_file_name(name: object) -> str | None:
    if not isinstance(name, str) or not _FILE.match(name) or name in (MANIFEST, SIGNATURE):
        return (f"{str(name)[:80]!r} is not a bundle file name (a base name: letters, digits, "
                "'.', '_', '+', '-'; no path)")
    return None


def check_label(label: object) -> str | None:
    if not isinstance(label, str) or not _LABEL.match(label):
        return (f"version {str(label)[:80]!r} must be 1-64 letters, digits, '.', '_', '+', "
                "'-'")
    return None


@dataclass(frozen=True)
class Manifest:
    """A bundle's manifest, read and checked (never trusted before its digest was)."""

    model: str
    version: str
    files: dict[str, dict[str, Any]]
    contract: str
    ladder: str | None
    validation: str
    metric: str
    accuracy: float
    digest: str
    created: str = ""

    @property
    def total_bytes(self) -> int:
        return sum(int(f["bytes"]) for f in self.files.values())

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "version": self.version, "digest": self.digest,
                "created": self.created, "bytes": self.total_bytes,
                "validation": {"file": self.validation, "metric": self.metric,
                               "accuracy": self.accuracy}}


def read_manifest(data: bytes) -> Manifest:
    """Parse and check ``manifest.json``'s bytes; ``BundleRefused`` names what is wrong."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise BundleRefused(f"{MANIFEST} is {len(data)} bytes; at most {MAX_MANIFEST_BYTES}")
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise BundleRefused(f"{MANIFEST} is not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise BundleRefused(f"{MANIFEST}: \"format\" must be {FORMAT!r}")
    files = doc.get("files")
    if not isinstance(files, dict) or not files:
        raise BundleRefused(f"{MANIFEST}: \"files\" must name at least one file")
    for name, f in files.items():
        why = check_file_name(name)
        if why:
            raise BundleRefused(f"{MANIFEST}: files: {why}")
        if not isinstance(f, dict) or not isinstance(f.get("sha256"), str) or not re.match(
                r"^[0-9a-f]{64}$", f["sha256"]) or not isinstance(f.get("bytes"), int) \
                or isinstance(f.get("bytes"), bool) or f["bytes"] < 0:
            raise BundleRefused(f"{MANIFEST}: files.{name}: needs \"sha256\" (64 hex digits) "
                                "and \"bytes\" (an integer >= 0)")
    model, version = doc.get("model"), doc.get("version")
    if not isinstance(model, str) or not model:
        raise BundleRefused(f"{MANIFEST}: \"model\" must name the model")
    why = check_label(version)
    if why:
        raise BundleRefused(f"{MANIFEST}: {why}")
    contract = doc.get("contract", "model.json")
    ladder = doc.get("ladder")
    val = doc.get("validation")
    if not isinstance(val, dict):
        raise BundleRefused(f"{MANIFEST}: \"validation\" must give the labelled validation "
                            "set and the accuracy claimed on it ({\"file\", \"metric\", "
                            "\"accuracy\"})")
    vfile, metric, acc = val.get("file"), val.get("metric", "top1"), val.get("accuracy")
    for key, name in (("contract", contract), ("ladder", ladder), ("validation.file", vfile)):
        if name is not None and name not in files:
            raise BundleRefused(f"{MANIFEST}: {key} names {name!r}, which is not among its "
                                "files")
    if metric not in METRICS:
        raise BundleRefused(f"{MANIFEST}: validation.metric must be one of {METRICS}; got "
                            f"{metric!r}")
    if isinstance(acc, bool) or not isinstance(acc, int | float) or not 0.0 <= acc <= 1.0:
        raise BundleRefused(f"{MANIFEST}: validation.accuracy must be the accuracy claimed "
                            f"on the validation set, 0..1; got {acc!r}")
    return Manifest(model, str(version), files, str(contract),
                    str(ladder) if ladder else None, str(vfile), str(metric), float(acc),
                    hashlib.sha256(data).hexdigest(), str(doc.get("created", "")))


def pack(src: Path, out: Path, model: str, version: str, accuracy: float,
         contract: Path | None = None, validation: Path | None = None,
         metric: str = "top1") -> Manifest:
    """Copy what ``edged compile`` wrote in ``src`` (artifacts, sidecars, golden files,
    ``variants.toml``), the contract and the validation set into ``out`` and write the
    manifest. ``out`` must not exist (a bundle is never changed after it is made)."""
    why = check_label(version)
    if why:
        raise BundleRefused(why)
    if out.exists():
        raise BundleRefused(f"{out} exists; a bundle is written to a new folder")
    contract = contract or src / "model.json"
    if not contract.is_file():
        raise BundleRefused(f"no contract: {contract} (the model's model.json) is missing")
    if validation is None:
        named = json.loads(contract.read_text()).get("validation")
        validation = contract.parent / named if isinstance(named, str) else None
    if validation is None or not validation.is_file():
        raise BundleRefused(f"no validation set: give --validation (a labelled .npz); "
                            f"{validation} is missing")
    out.mkdir(parents=True)
    picked = {p for pat in PACKED for p in src.glob(pat) if p.is_file()}
    for p in sorted(picked):
        shutil.copy2(p, out / p.name)
    shutil.copy2(contract, out / "model.json")
    shutil.copy2(validation, out / validation.name)
    if not (out / "variants.toml").is_file():
        raise BundleRefused(f"{src} has no variants.toml (the ladder `edged compile` writes)")
    files = {}
    for p in sorted(out.iterdir()):
        why = check_file_name(p.name)
        if why:
            raise BundleRefused(why)
        files[p.name] = {"sha256": sha256_file(p), "bytes": p.stat().st_size}
    doc = {"format": FORMAT, "model": model, "version": version,
           "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "files": files, "contract": "model.json", "ladder": "variants.toml",
           "validation": {"file": validation.name, "metric": metric,
                          "accuracy": round(float(accuracy), 6)}}
    data = json.dumps(doc, indent=1, sort_keys=True).encode()
    atomic_write(out / MANIFEST, data)
    return read_manifest(data)
