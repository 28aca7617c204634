"""Every Python snippet and shell command in README.md and docs/ runs as written.

Snippets are found by Sybil (``sybil.parsers.markdown``: fenced ``python`` and ``sh``
blocks); each Python snippet runs alone, in a fresh namespace (so a snippet that leans
on a name from an earlier one fails here as it would for a reader), and each shell
block runs in ``bash -e -o pipefail``. They run in a folder laid out as a checkout
(``models/``, ``examples/``, ``scripts/``, ``config.toml`` linked from this one; nothing
is written into the checkout) against one daemon this module starts on the shipped
``config.toml`` with a KServe listener added. What differs from a reader's run is
only where things listen: the fixed ports a snippet names (5555, 9464, 8000, 8001) are
the test daemon's free ports, ``.venv/bin/`` is the venv running the tests, and the
commands find the test daemon through ``EDGED_CONTROL`` / ``EDGED_ENDPOINT`` (a shell
block that starts its own ``edged serve`` finds that one by ``--config`` instead).

A shell block that cannot run here says so on its first line, visibly in the page:
``# needs root ...``, ``# needs a GPU ...``, ``# needs Frigate ...`` (or another device),
``# takes 10 minutes: run by tests/test_X.py`` or ``# run by ...``:
``test_every_shell_block_is_run_or_marked`` holds every fenced block of commands to
that, so a new page's commands are run (or marked) too.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.daemons import Daemon, free_port
from support.paths import ROOT
from sybil import Document
from sybil.parsers.markdown import PythonCodeBlockParser
from sybil.region import Lexeme

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: what a shell block's first line may say instead of being run
MARKER = re.compile(r"^#\s*(needs\b|takes\b.*\brun by\b|run by\b)", re.I)
#: an unlabeled fenced block that shows commands (a ``$ `` prompt or a command word)
COMMANDISH = re.compile(r"^\s*(\$ |sudo |edged |\.venv/|python3? |scripts/|curl |pip )")
#: substrings the output of a run block must contain: (page, a line of the block)
EXPECT = {
    ("README.md", "infer digits"): ["class 7"],
    ("README.md", "infer person"): ["person", "wrote boxes.jpg"],
    ("README.md", "ctl level hot"): ["level hot (pinned by operator"],
    ("README.md", "health"): ["OK"],
    ("README.md", "metrics"): ["edged_requests_total"],
    ("operations.md", "edged status"): ["LISTENER", "digits", "person"],
    ("kserve.md", "curl"): ['"logits"'],
    ("compile.md", "ctl level hot"): ["level hot (pinned by operator", "[cnn-int8]",
                                      "below its top rung: governor level hot"],
}


@dataclass(frozen=True)
class Block:
    """One fenced block of a page: where it is, its language and text."""

    page: Path
    line: int
    language: str
    text: str

    @property
    def id(self) -> str:
        return f"{self.page.name}:{self.line}"

    @property
    def marker(self) -> str | None:
        first = next((ln.strip() for ln in self.text.splitlines() if ln.strip()), "")
        return first if MARKER.match(first) else None


def fenced(page: Path) -> list[Block]:
    """Every fenced block of ``page`` (indented ones too, as in a numbered list)."""
    out, lines, i = [], page.read_text().splitlines(), 0
    while i < len(lines):
        m = re.match(r"^(\s*)```(\S*)", lines[i])
        if not m:
            i += 1
            continue
        indent, j = len(m.group(1)), i + 1
        while not re.match(r"^\s*```\s*$", lines[j]):
            j += 1
        body = "\n".join(ln[indent:] for ln in lines[i + 1:j])
        out.append(Block(page, i + 1, m.group(2), body))
        i = j + 1
    return out


def shell_blocks() -> list[Block]:
    return [b for p in DOCS for b in fenced(p) if b.language in ("sh", "bash", "shell")]


def python_examples() -> list[tuple[str, Any]]:
    """Sybil's examples of every fenced ``python`` block, with ids ``page:line``; but a
    block whose first line says it needs something this daemon has not (another config,
    a device) or is run by a named test, as a shell block may."""
    out = []
    for page in DOCS:
        doc = Document.parse(str(page), PythonCodeBlockParser())
        for ex in doc:
            first = next((ln.strip() for ln in str(ex.parsed).splitlines() if ln.strip()), "")
            if not MARKER.match(first):
                out.append((f"{page.name}:{ex.line}", ex))
    return out


def test_every_shell_block_is_run_or_marked() -> None:
    """Commands a page shows are run below, unless its first line says why not."""
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


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A checkout-shaped folder, a bin folder with ``edged`` and ``python``, and one daemon
    on the shipped config (paths made absolute) plus KServe on free ports."""
    tmp = tmp_path_factory.mktemp("docs")
    work = tmp / "checkout"
    work.mkdir()
    for name in ("models", "examples", "scripts", "systemd", "config.toml"):
        (work / name).symlink_to(ROOT / name)
    (work / "tmp").mkdir()
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for name in ("python", "python3"):
        (bin_dir / name).symlink_to(sys.executable)
    edged = bin_dir / "edged"
    edged.write_text(f"#!/bin/sh\nexec {sys.executable} -m edged \"$@\"\n")
    edged.chmod(0o755)
    grpc, http = free_port(), free_port()
    shipped = (ROOT / "config.toml").read_text()
    text = re.sub(r'(?m)^path = "models/', f'path = "{ROOT}/models/', shipped)
    text = text.replace("[server.limits]", f'[server.kserve]\ngrpc = "127.0.0.1:{grpc}"\n'
                                           f'http = "127.0.0.1:{http}"\n\n[server.limits]', 1)
    cfg = tmp / "edged.toml"
    cfg.write_text(text)
    d = Daemon(cfg, tmp / "daemon", metrics=True)
    ports = {"127.0.0.1:5555": f"127.0.0.1:{d.port}",
             "127.0.0.1:9464": f"127.0.0.1:{d.metrics_port}",
             "127.0.0.1:8001": f"127.0.0.1:{grpc}", "127.0.0.1:8000": f"127.0.0.1:{http}",
             "localhost:8000": f"127.0.0.1:{http}"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGED_")}
    env.update(PATH=f"{bin_dir}:{env.get('PATH', '')}", PYTHONPATH=str(ROOT),
               HOME=str(tmp), TMPDIR=str(work / "tmp"), EDGED_CONTROL=d.control,
               EDGED_ENDPOINT=d.tcp)
    env.pop("XDG_RUNTIME_DIR", None)
    try:
        yield {"work": work, "env": env, "ports": ports, "daemon": d}
    finally:
        d.stop()


def as_run_here(text: str, ports: dict[str, str]) -> str:
    for fixed, here in ports.items():
        text = text.replace(fixed, here)
    return text.replace(".venv/bin/", "")


def _serving(script: str) -> str:
    """``edged serve --config F ...`` lines run in the background until the block ends,
    and the next line waits until that daemon answers (``edged health --config F``)."""
    out = []
    for line in script.splitlines():
        m = re.match(r"^(edged serve .*--config (\S+).*?)(\s+#.*)?$", line)
        if m:
            out += [f"{m.group(1)} > serve.log 2>&1 &", "trap 'kill %1; wait' EXIT",
                    f"for i in $(seq 240); do edged health --config {m.group(2)} >/dev/null "
                    "2>&1 && break; sleep 0.25; done"]
        else:
            out.append(line)
    return "\n".join(out)


@pytest.mark.parametrize("block", [b for b in shell_blocks() if not b.marker],
                         ids=lambda b: b.id)
def test_shell_block(block: Block, world: dict[str, Any]) -> None:
    script = _serving(as_run_here(block.text, world["ports"]))
    env = dict(world["env"])
    if "edged serve" in block.text:  # it serves its own daemon: found by --config
        env.pop("EDGED_CONTROL")
        env.pop("EDGED_ENDPOINT")
    r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=world["work"],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{block.id} failed:\n{script}\n--- stdout\n{r.stdout}\n" \
                              f"--- stderr\n{r.stderr}"
    for (page, line), wanted in EXPECT.items():
        if block.page.name == page and any(line in ln for ln in block.text.splitlines()):
            for w in wanted:
                assert w in r.stdout, f"{block.id}: {w!r} not in\n{r.stdout}"


@pytest.mark.parametrize(("where", "example"), python_examples(), ids=lambda v: str(v)
                         if isinstance(v, str) else "")
def test_python_snippet(where: str, example: Any, world: dict[str, Any],
                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each snippet alone, from the checkout-shaped folder, as a reader pastes it."""
    monkeypatch.chdir(world["work"])
    src = example.parsed
    example.parsed = Lexeme(as_run_here(src, world["ports"]), src.offset, src.line_offset)
    example.namespace.clear()
    example.namespace["__name__"] = "__main__"
    example.evaluate()


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
