"""``edged compile`` then ``edged publish`` on the folder it wrote, with no other flag.

Why a test of the chain: publish wants a contract, a labelled validation set and a claimed
accuracy; a compile that did not leave them made the documented next step fail. The
compile here is the smallest one the CLI test runs (one ``ort-opt`` step, few timed runs).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support.paths import ROOT

MODEL = ROOT / "models" / "digits" / "cnn-fp32.onnx"


def edged(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edged", *args], capture_output=True,
                          text=True, timeout=600, cwd=str(ROOT))


def test_publish_takes_the_folder_compile_wrote(tmp_path: Path) -> None:
    out, src = tmp_path / "build", tmp_path / "source"
    r = edged("compile", str(MODEL), "--out", str(out), "--steps", "ort-opt", "--bench-runs",
              "3", "--threads", "1", "--no-progress")
    assert r.returncode == 0, r.stdout + r.stderr
    card = json.loads((out / "model.json").read_text())
    assert card["validation"] == "validation.npz" and (out / "validation.npz").is_file()
    assert set(card["accuracy"]) == {"cnn-fp32", "cnn-fp32-opt"}
    assert 0.9 < card["accuracy"]["cnn-fp32"] <= 1.0  # measured by this run, 0..1
    assert card["labels"] == [str(k) for k in range(10)]  # the source's contract travels
    r = edged("publish", str(out), "--to", f"file://{src}", "--model", "digits",
              "--version", "v2", "--unsigned")
    assert r.returncode == 0, r.stderr
    manifest = json.loads((src / "digits" / "v2" / "manifest.json").read_text())
    assert manifest["validation"]["file"] == "validation.npz"
    assert manifest["validation"]["accuracy"] == card["accuracy"]["cnn-fp32"]
    assert {"model.json", "variants.toml", "cnn-fp32.onnx"} <= set(manifest["files"])
    # A second compile into the same folder replaces its own model.json, never a user's.
    (out / "model.json").write_text('{"input": "input"}')
    r = edged("compile", str(MODEL), "--out", str(out), "--steps", "ort-opt", "--bench-runs",
              "3", "--threads", "1", "--no-progress")
    assert r.returncode == 0 and "kept as it is" in r.stdout, r.stdout
    assert json.loads((out / "model.json").read_text()) == {"input": "input"}


def test_publish_without_a_contract_says_what_to_give(tmp_path: Path) -> None:
    (tmp_path / "variants.toml").write_text("")
    r = edged("publish", str(tmp_path), "--to", f"file://{tmp_path}/src", "--model", "m",
              "--version", "v1", "--unsigned")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "--contract" in r.stderr and "edged compile" in r.stderr
