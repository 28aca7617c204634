"""Every command a page shows is run, or says on its first line why not; the config
blocks a page tells a reader to append load.

The blocks themselves run in ``tests/test_journey.py``, as a reader meets them: the
README's daemon left running, then every page in the README's order, each block in the
same folder with what the pages before it built (``tests/support/docs.py`` finds them).

A shell block that cannot run there says so on its first line, visibly in the page:
``# needs root ...``, ``# needs a GPU ...``, ``# needs Frigate ...`` (or another device),
``# takes 10 minutes: run by tests/test_X.py`` or ``# run by ...``:
``test_every_shell_block_is_run_or_marked`` holds every fenced block of commands to
that, so a new page's commands are run (or marked) too.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.docs import COMMANDISH, DOCS, fenced, shell_blocks
from support.paths import ROOT


def test_every_shell_block_is_run_or_marked() -> None:
    """Commands a page shows are run (by tests/test_journey.py), unless its first line
    says why not."""
    unrun = []
    for page in DOCS:
        for b in fenced(page):
            shows = b.language in ("sh", "bash", "shell", "console", "python") or (
                b.language == "" and any(COMMANDISH.match(ln) for ln in b.text.splitlines()))
            if b.language in ("console", "") and shows and not b.marker:
                unrun.append(f"{b.id}: label it sh (run here) or say why not on its first line")
            if b.marker:
                named = re.findall(r"tests/\w+\.py", b.marker)
                unrun += [f"{b.id}: {t} does not exist" for t in named if not (ROOT / t).exists()]
    assert not unrun, "\n".join(unrun)
    marked = [b for b in shell_blocks() if b.marker]
    assert all(b.marker.lower().startswith("#") for b in marked)


def test_the_frigate_page_block_appends_to_the_shipped_config(tmp_path: Path) -> None:
    """docs/frigate.md's edged block, appended to config.toml as the page says, loads."""
    from edged.config.file import load_config

    block = next(b for b in fenced(ROOT / "docs" / "frigate.md")
                 if b.language == "toml" and "[[server.frigate]]" in b.text)
    shipped = re.sub(r'(?m)^path = "models/', f'path = "{ROOT}/models/',
                     (ROOT / "config.toml").read_text())
    cfg = tmp_path / "edged.toml"
    cfg.write_text(shipped + "\n" + block.text)
    loaded = load_config(cfg)
    assert [f.endpoint for f in loaded.server.frigate] == ["tcp://127.0.0.1:5556",
                                                           "tcp://127.0.0.1:5557"]


@pytest.mark.parametrize("page", ["frigate.md", "pipelines.md"])
def test_the_pipeline_frigate_block_appends_to_the_pipeline_example(page: str,
                                                                    tmp_path: Path) -> None:
    """The page's Frigate endpoint serving the shipped pipeline, appended to
    examples/pipelines/digits-reader.toml as the page says, loads."""
    from edged.config.file import load_config

    (block,) = [b for b in fenced(ROOT / "docs" / page)
                if b.language == "toml" and "label_from" in b.text]
    example = (ROOT / "examples" / "pipelines" / "digits-reader.toml").read_text()
    cfg = tmp_path / "edged.toml"
    cfg.write_text(example.replace('path = "../../models/', f'path = "{ROOT}/models/')
                   + "\n" + block.text)
    (f,) = load_config(cfg).server.frigate
    assert (f.model, f.label_from) == ("digits-reader", "digit")


def test_the_ci_runs_the_readme_test_command() -> None:
    """.ci/run's last line is the README's test command, so the doc tests run in CI."""
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci.replace("pip install -q ", "pip install ") in readme and "pytest -q" in ci


def test_every_path_a_page_names_in_the_package_exists() -> None:
    """A page pointing to ``edged/protocol/`` (it is ``edged/protocols/native/``) sends a
    reader nowhere: every ``edged/...`` path in backticks exists, and the modules
    docs/protocol.md lists are in the folder it names."""
    wrong = []
    for page in DOCS:
        for path in re.findall(r"`(edged/[\w/.-]+?)/?`", page.read_text()):
            if not (ROOT / path).exists() and not (ROOT / f"{path}.py").exists():
                wrong.append(f"{page.name}: {path}")
    text = (ROOT / "docs" / "protocol.md").read_text()
    folder = re.search(r"In Python the format lives in `(edged/[\w/]+)/`", text)
    assert folder, "docs/protocol.md no longer names the protocol's folder"
    para = text[folder.end():].split("\n\n", 1)[0]
    wrong += [f"protocol.md: {folder[1]}/{m}.py" for m in re.findall(r"`(\w+)` \(", para)
              if not (ROOT / folder[1] / f"{m}.py").exists()]
    assert not wrong, wrong
