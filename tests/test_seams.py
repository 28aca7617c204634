"""The contributor's seams: each list of names written once (where two modules name the
same things, one derives from the other and a test fails when they part), every concept's
registry in its package's ``__init__``, the one contract check, and the "Where to make a
change" tables of docs/architecture.md naming files and names that exist.

Why a test: a newcomer follows those tables and names to the first file of a change; a
rename that leaves the doc behind sends them to a file that is not there.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.configs import DIGITS_PREPROCESS, config, model_table, variant
from support.paths import MODELS, ROOT

PKG = ROOT / "edged"
ARCH = ROOT / "docs" / "architecture.md"


def test_frigate_model_types_are_named_once() -> None:
    """Frigate's types live in ``FRIGATE_TYPES``; the order a graph is matched in is that
    table's order, not a second list to keep in step."""
    from edged.config.layouts import FRIGATE_TYPES, LAYOUTS
    from edged.protocols.frigate.model_check import DETECT_ORDER

    assert tuple(DETECT_ORDER) == tuple(FRIGATE_TYPES)
    assert {t.layout for t in FRIGATE_TYPES.values()} <= set(LAYOUTS)


def test_every_on_device_rung_repeats_a_compile_step() -> None:
    """The rungs built on the device repeat ``edged compile``'s builds: each names its step,
    and the step's build gives the rung's backend."""
    from edged.compile.steps import STEP_NAMES, find
    from edged.delivery.rungs import RUNGS, Rung

    for rung in RUNGS.values():
        assert rung.step in STEP_NAMES, rung
        module = find(rung.step).builder.split(":")[0]
        assert {"onnxruntime": "ort_steps", "openvino": "openvino_steps"}[rung.backend] in module
    with pytest.raises(ValueError, match="no compile step 'tflite'"):
        Rung("tflite", "tflite", "onnxruntime", "int8", ".tflite")


@pytest.mark.parametrize(("package", "registry"), [
    ("backends", "backend_module"), ("batching", "choose_policy"),
    ("governor/sensors", "SOURCES"), ("detect/decoders", "DECODE"),
    ("delivery/sources", "open_source"),
])
def test_a_concepts_registry_is_in_its_package_init(package: str, registry: str) -> None:
    assert registry in _defined(PKG / package / "__init__.py"), f"{package}/__init__.py"


def test_every_sensor_file_is_registered() -> None:
    """A source file beside the others (one with ``open_source(root)``) is in ``SOURCES``:
    a new sensor is not silently left out of sampling."""
    from edged.governor.sensors import SOURCES

    files = {p.stem for p in (PKG / "governor" / "sensors").glob("*.py")
             if "open_source" in _defined(p) and p.stem != "__init__"}
    assert files == {m.rsplit(".", 1)[1] for m in SOURCES.values()}


def test_one_contract_check() -> None:
    """A delivered version's gate runs the variants' own contract check first (one
    wording, one rule), then what a version must also keep."""
    from edged.backends.base import TensorSpec
    from edged.delivery.download import Refused
    from edged.delivery.gate import check_contract

    want = [TensorSpec("input", "float32", (-1, 1, 28, 28))]
    out = [TensorSpec("logits", "float32", (-1, 10))]
    with pytest.raises(Refused, match="the new version has no output named 'logits'"):
        check_contract(want, out, want, [TensorSpec("scores", "float32", (-1, 10))])
    with pytest.raises(Refused, match="input 'input' is float16"):
        check_contract(want, out, [TensorSpec("input", "float16", (-1, 1, 28, 28))], out)
    with pytest.raises(Refused, match="takes input float32 \\[-1, 1, 32, 32\\]"):
        check_contract(want, out, [TensorSpec("input", "float32", (-1, 1, 32, 32))], out)
    check_contract(want, out, want, out)


def test_check_warns_when_a_key_outweighs_another(tmp_path: Path) -> None:
    """``max_delay_ms`` silently won over ``batch_window``: ``edged check`` now says so,
    naming both keys, and the config still passes."""
    digits = model_table("digits", [variant("cnn-fp32", MODELS / "cnn-fp32.onnx")],
                         max_delay_ms=2.0, batch_window=0.5, preprocess=DIGITS_PREPROCESS)
    cfg = config(tmp_path, models=[digits])
    r = subprocess.run([sys.executable, "-m", "edged", "check", str(cfg)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    (line,) = [ln for ln in r.stdout.splitlines() if ln.startswith("warning:")]
    assert "max_delay_ms = 2 wins over batch_window = 0.5" in line and "'digits'" in line


def where_rows() -> list[tuple[str, str]]:
    """(row's first cell, the rest) of both tables under "Where to make a change"."""
    text = ARCH.read_text().split("## Where to make a change", 1)[1].split("\n## ", 1)[0]
    rows = []
    for ln in text.splitlines():
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        if ln.startswith("|") and len(cells) >= 2 and not set(cells[0]) <= set("-") \
                and cells[0] not in ("to add…", "to change…"):
            rows.append((cells[0], " | ".join(cells[1:])))
    return rows


def test_where_to_make_a_change_covers_every_extension_point() -> None:
    rows = " ".join(first for first, _ in where_rows())
    for point in ("runtime", "compile step", "on-device rung", "protocol", "KServe route",
                  "batching policy", "governor sensor", "detection layout",
                  "Frigate model type", "refuses a variant", "refuses a delivered version",
                  "config key", "CLI command", "delivery source"):
        assert point in rows, point


@pytest.mark.parametrize(("row", "rest"), where_rows(), ids=lambda v: v[:30])
def test_where_to_make_a_change_names_what_exists(row: str, rest: str) -> None:
    """Every file a row names exists (``<name>`` a folder that does), and every name in
    backticks is defined (def, class, assignment, field) in one of the row's files."""
    tokens = re.findall(r"`([^`]+)`", rest)
    files, names = [], []
    for t in tokens:
        if re.fullmatch(r"[\w<>./-]+/|[\w<>./-]+\.(py|toml|md)|[\w/]+/__init__", t):
            files.append(t)
        elif m := re.fullmatch(r"([A-Za-z_]\w*)(\(.*\))?( -> .*)?", t):
            names.append(m.group(1))
    missing = []
    found: list[Path] = []
    for f in files:
        f = f if f.endswith((".py", ".toml", ".md", "/")) else f + ".py"
        base = ROOT if f.startswith(("docs/", "tests/", "pyproject")) else PKG
        if "<" in f:  # a template: the folder, and the files already made from it
            folder = base / f.split("<", 1)[0]
            ok = folder.is_dir()
            found += [p for p in folder.glob(re.sub(r"<\w+>", "*", f.split("/")[-1]))
                      if p.stem != "__init__"]
        else:
            ok = (base / f).exists()
            if f.endswith(".py") and ok:
                found.append(base / f)
        if not ok:
            missing.append(f"file {f}")
    defined = set().union(*(_defined(p) for p in found)) if found else set()
    skip = {"ctx", "sub", "args", "int"}  # argument names a row shows in a signature
    missing += [f"name {n}" for n in names if n not in defined and n not in skip
                and not n.startswith("cmd_")]
    assert not missing, f"{row}: {missing}"


def _defined(path: Path) -> set[str]:
    """Names ``path`` defines at any depth: functions, classes, assignments, fields,
    ``self.x = ...`` attributes, methods called on an object (a route added), keyword
    arguments (a reply's field)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    out.add(t.id)
                elif isinstance(t, ast.Attribute):
                    out.add(t.attr)
        elif isinstance(node, ast.Call):  # r.add_get(...): a route registered by a call;
            if isinstance(node.func, ast.Attribute):  # entry(last_refusal=...): a field
                out.add(node.func.attr)
            out.update(k.arg for k in node.keywords if k.arg)
    return out
