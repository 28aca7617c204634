"""The checkout the tests run from and the models it ships (read-only for tests)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models" / "digits"
PERSON_MODELS = ROOT / "models" / "person"
