"""``edged compile`` hands over a servable model: ``--out`` holds every rung it names (the
original copied in), paths relative to it, and ``edged.toml`` with the model's
preprocessing (from ``model.json``, or assumed from the input's shape and said so), the
ladder and a ``[governor]``. docs/compile.md's walk from a model file to a served,
governed ladder is run as written by tests/test_journey.py.
"""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path

from support.paths import MODELS

from edged.compile import cli
from edged.compile.options import CompileOptions
from edged.compile.run import run
from edged.config.file import load_config

FAST = {"steps": ("ort-opt",), "bench_runs": 3, "threads": 1, "max_batch": 4}


def test_the_out_folder_moves_whole_and_says_what_it_assumed(tmp_path: Path) -> None:
    alone = tmp_path / "src" / "cnn-fp32.onnx"  # no model.json beside it
    alone.parent.mkdir()
    shutil.copy(MODELS / "cnn-fp32.onnx", alone)
    r = run(CompileOptions(model=alone, out=tmp_path / "out", **FAST))
    assert r.exit_code == 0, r.log
    assert r.config == tmp_path / "out" / "edged.toml"
    assert any("preprocessing ASSUMED from the input's shape" in ln for ln in r.log), r.log
    text = r.config.read_text()
    assert "# ASSUMED from the input's shape" in text
    assert (tmp_path / "out" / "cnn-fp32.onnx").read_bytes() == alone.read_bytes()
    moved = tmp_path / "elsewhere" / "digits"
    shutil.move(tmp_path / "out", moved)
    shutil.rmtree(tmp_path / "src")  # the original is gone: the folder must not need it
    cfg = load_config(moved / "edged.toml")
    (model,) = cfg.models
    assert model.preprocess is not None and (model.preprocess.width, model.preprocess.height) \
        == (28, 28)
    assert all(v.path.exists() and v.path.parent == moved for v in model.variants)
    assert cfg.governor.enabled
    ladder = tomllib.loads((moved / "variants.toml").read_text())["models"]["variants"]
    assert all("/" not in v["path"] for v in ladder)  # relative to the folder itself


def test_preprocessing_comes_from_model_json(tmp_path: Path) -> None:
    r = run(CompileOptions(model=MODELS / "cnn-fp32.onnx", out=tmp_path / "out", **FAST))
    assert r.exit_code == 0, r.log
    text = r.config.read_text()
    assert f"# from {MODELS / 'model.json'}" in text and "ASSUMED" not in text
    pre = load_config(r.config).models[0].preprocess
    assert pre is not None and pre.color == "gray" and pre.layout == "NCHW"


def test_progress_bars_only_on_a_terminal(tmp_path: Path) -> None:
    """Under pytest stderr is not a terminal: no bars even without --no-progress."""
    parser = cli.argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    cli.add_parser(sub)
    args = parser.parse_args(["compile", str(MODELS / "cnn-fp32.onnx"), "--out", str(tmp_path)])
    assert cli.options_from(args).progress is False


def test_the_help_is_for_a_user() -> None:
    assert "``" not in cli.DESCRIPTION
    assert not re.search(r"\bedged\.(?!toml)\w", cli.DESCRIPTION)  # no module names
    assert "edged.toml" in cli.DESCRIPTION


def test_the_served_model_is_named_after_the_folder_its_variants_after_the_file(
        tmp_path: Path) -> None:
    """``--out build/digits`` serves a model ``digits`` (what docs/compile.md, ``edged
    status`` and ``edged publish --model`` call it) whose variants are the files'
    ``cnn-...`` names."""
    r = run(CompileOptions(model=MODELS / "cnn-fp32.onnx", out=tmp_path / "digits", **FAST))
    assert r.exit_code == 0, r.log
    (model,) = load_config(r.config).models
    assert model.name == "digits"
    assert {v.name for v in model.variants} <= {"cnn-fp32", "cnn-fp32-opt"}
    assert all((tmp_path / "digits" / v.path.name).exists() for v in model.variants)
