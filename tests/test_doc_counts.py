"""Counts the pages state, computed again from what they count: the alert table against the
rules file, the post-processing benchmark's detections against the script's own cases, the
validation sets' sizes against the files.

Why: a number in prose is copied once and then drifts (the metrics page listed 8 of the
11 alert rules; the detection page said 30 detections where the script prints 25).
"""

from __future__ import annotations

import importlib.util
import re

import numpy as np
import yaml
from support.paths import ROOT

DOCS = ROOT / "docs"


def _flat(text: str) -> str:
    """A page's prose with its line breaks as spaces (a number may sit at a line's end)."""
    return re.sub(r"\s+", " ", text)


def test_the_alert_table_lists_every_rule_of_the_alert_file() -> None:
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "edged-alerts.yml").read_text())
    alerts = [r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r]
    section = (DOCS / "metrics.md").read_text().split("## Alerts", 1)[1].split("\n## ", 1)[0]
    table = re.findall(r"^\| `(Edged\w+)` \|", section, re.M)
    assert table == alerts, f"the page's table: {table}\nthe rules file: {alerts}"


def test_the_postprocessing_counts_are_the_scripts() -> None:
    """docs/detection.md's candidates and detections per case are what
    ``scripts/bench/bench_postprocess.py`` builds (seeded) and prints."""
    path = ROOT / "scripts" / "bench" / "bench_postprocess.py"
    spec = importlib.util.spec_from_file_location("bench_postprocess", path)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    _, held = script.build_cases(30)
    page = _flat((DOCS / "detection.md").read_text())
    m = re.search(r"`yolov8-640` is .*? (\d+) objects .*?\((\d+) candidates above `conf`, "
                  r"(\d+) detections", page)
    assert m, "the yolov8-640 case's sentence moved"
    assert (int(m[2]), int(m[3])) == (held["yolov8-640 above conf"],
                                      held["yolov8-640 detections"]), held
    m = re.search(r"`ssd-100` is .*? \((\d+) above `conf`\)", page)
    assert m and int(m[1]) == held["ssd-100 above conf"], held


def test_validation_set_sizes_are_the_files() -> None:
    """The held-out images and scenes the pages count are the files' rows."""
    digits = np.load(ROOT / "models" / "digits" / "validation.npz", allow_pickle=False)
    compile_page = _flat((DOCS / "compile.md").read_text())
    stated = {int(n) for n in re.findall(r"validates on the (\d+) labelled held-out images",
                                         compile_page)}
    stated |= {int(n) for n in re.findall(r"validation\.npz \((\d+) samples\)", compile_page)}
    assert stated == {len(digits["y"])}, stated
    scenes = np.load(ROOT / "models" / "digits-det" / "val.npz", allow_pickle=False)
    m = re.search(r"the (\d+) held-out scenes of `models/digits-det/val\.npz` \((\d+) digits\)",
                  _flat((DOCS / "pipelines.md").read_text()))
    assert m and (int(m[1]), int(m[2])) == (len(scenes["images"]), len(scenes["boxes"]))


def test_the_readme_counts_the_shipped_digits_variants() -> None:
    """The README's "`digits/` (a CNN classifier, three variants)": the model files in the
    folder and the variants config.toml serves."""
    import tomllib

    words = {"two": 2, "three": 3, "four": 4, "five": 5}
    readme = (ROOT / "README.md").read_text()
    m = re.search(r"`digits/` \(a CNN classifier, (\w+) variants\)", readme)
    assert m and m[1] in words
    files = sorted((ROOT / "models" / "digits").glob("*.onnx"))
    shipped = tomllib.loads((ROOT / "config.toml").read_text())
    (digits,) = [t for t in shipped["models"] if t["name"] == "digits"]
    assert words[m[1]] == len(files) == len(digits["variants"]), files
