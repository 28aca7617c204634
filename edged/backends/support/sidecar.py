"""The JSON file written next to every artifact (``model.so`` -> ``model.so.json``).

Why: a compiled artifact alone does not say what it was built from, for which
target, by which tool version, or how accurate and fast it proved. The daemon reads
the sidecar to refuse an artifact built for another architecture or runtime version
with a clear message, and engineers read it to compare variants.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from pathlib import Path
from typing import Any

FORMAT = "edged-artifact/1"


def sidecar_path(artifact: Path) -> Path:
    return artifact.with_name(artifact.name + ".json")


def sha256_file(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def write_sidecar(artifact: Path, meta: dict[str, Any]) -> Path:
    """Write ``meta`` (plus format tag and creation time) beside ``artifact``.

    Expected keys: source {path, sha256}, backend, target, precision, batch_sizes
    (list, or null for dynamic), inputs/outputs [{name, dtype, shape}], tools
    {name: version}, validation {...}, speed {...}.
    """
    doc = {"format": FORMAT, "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")}
    doc.update(meta)
    out = sidecar_path(artifact)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    tmp.replace(out)
    return out


def read_sidecar(artifact: Path) -> dict[str, Any] | None:
    """The sidecar beside ``artifact``, or None if there is none.

    Raises ValueError naming the file when it exists but is not a valid sidecar.
    """
    p = sidecar_path(artifact)
    if not p.exists():
        return None
    try:
        doc = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{p}: unreadable artifact sidecar: {e}") from e
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"{p}: not an edged artifact sidecar (expected format {FORMAT!r})")
    return doc


def update_sidecar(artifact: Path, **fields: Any) -> None:
    """Merge ``fields`` into an existing sidecar (e.g. validation results added later)."""
    doc = read_sidecar(artifact) or {}
    doc.pop("format", None)
    doc.pop("created", None)
    doc.update(fields)
    write_sidecar(artifact, doc)
