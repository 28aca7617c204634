"""The package's layers, as docs/architecture.md draws them, checked by import-linter.

The contracts are in pyproject.toml (``[tool.importlinter]``): each package imports only
from the layers below it, the protocols not from each other, the runtimes never from the
compiler, the test harness only from the tools that start daemons (``bench``, ``device``;
so from nothing that ships in the daemon, and from the CLI only through them), and no package
has an import cycle between its modules.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from support.paths import ROOT


def test_every_import_linter_contract_is_kept() -> None:
    exe = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    r = subprocess.run([exe, "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout


def test_the_package_root_holds_only_its_entry_points_errors_and_metrics() -> None:
    root = ROOT / "edged"
    modules = sorted(p.name for p in root.glob("*.py"))
    assert modules == ["__init__.py", "__main__.py", "errors.py", "metrics.py"], modules
    for d in root.iterdir():
        if d.is_dir() and d.name != "__pycache__":
            assert (d / "__init__.py").exists(), f"{d} is not a package"


def test_every_detector_layout_has_one_decoder() -> None:
    from edged.config.layouts import FRIGATE_TYPES, LAYOUTS
    from edged.detect.decoders import DECODE

    assert set(DECODE) == set(LAYOUTS)
    assert {t.layout for t in FRIGATE_TYPES.values()} <= set(LAYOUTS)




def test_every_logger_is_named_after_its_package_or_module() -> None:
    """An operator filters the journal by a line's logger name and looks for the code in
    the folder it names: ``edged.<package>`` or ``edged.<package>.<module>`` of the file."""
    named = re.compile(r"getLogger\(\s*[\"'](edged(?:\.\w+)*)[\"']\s*\)")
    wrong = []
    for path in sorted((ROOT / "edged").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        parts = rel.removesuffix(".py").split("/")
        where = parts[:-1] if parts[-1] == "__init__" else parts
        for name in named.findall(path.read_text(encoding="utf-8")):
            if rel == "edged/host/logs.py" and name == "edged":
                continue  # the level of every edged logger, set once
            dotted = name.split(".")
            ok = len(dotted) >= 2 and where[: len(dotted)] == dotted
            if not ok:
                wrong.append(f"{rel}: {name}")
    assert not wrong, wrong


def test_no_class_over_250_lines_and_no_module_over_450() -> None:
    """The sizes a reader can hold in mind: a class past 250 lines is two ideas sharing one
    name, a module past 450 several; the size is where the next split was missed."""
    import ast

    big: list[str] = []
    for path in sorted((ROOT / "edged").rglob("*.py")):
        text = path.read_text()
        where = path.relative_to(ROOT)
        if (lines := len(text.splitlines())) > 450:
            big.append(f"{where}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.ClassDef) or node.end_lineno is None:
                continue
            if (size := node.end_lineno - node.lineno + 1) > 250:
                big.append(f"{where}: class {node.name} {size} lines")
    assert not big, "\n".join(big)


def test_no_import_cycle() -> None:
    """A cycle makes two modules one: neither can be read, tested or moved alone. Lazy
    imports inside functions count too (grimp sees them), so a package that picks an
    implementation by name keeps what the implementations share in a module of its own."""
    import grimp

    g = grimp.build_graph("edged")
    cycles = sorted({" -> ".join((m, *chain)) for m in g.modules
                     for n in g.find_modules_directly_imported_by(m)
                     if (chain := g.find_shortest_chain(importer=n, imported=m))})
    assert not cycles, "\n".join(cycles[:10])
