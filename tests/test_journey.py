"""The first hour as a newcomer has it: the README's daemon started from the README's first
command and left running, then every page of docs/ in the README's order, each shell and
Python block as written, in one checkout-shaped folder, with what the pages before it
built (``build/digits`` from docs/compile.md, the KServe listener docs/kserve.md adds to
``config.toml``, ``~/.edged`` keys).

Why one journey and not a test per block: a reader does not run pages one at a time on a
clean machine. A block that only works on its own (a port another daemon holds, a name
the previous page never made, a bare ``edged`` after the README's ``.venv/bin/edged``)
fails here as it fails for them.

What differs from a reader's run, and only that:

- the fixed addresses a page names (5555, 9464, 8000, 8001) are free ports here, so the
  suite can run beside other daemons; a block's text is otherwise run as shown;
- ``.venv/bin/edged``, ``python`` and ``pip`` run the venv running these tests (with this
  checkout first on ``PYTHONPATH``), and nothing else is on ``PATH`` from it: a bare
  ``edged`` or a venv's ``python`` a page forgot to spell out fails;
- commands find the README's daemon through ``EDGED_CONTROL`` / ``EDGED_ENDPOINT`` (other
  daemons of other tests may run on this machine), except in a block that serves its own
  daemon, which finds that one by ``--config``;
- ``edged serve`` in a block runs in the background until the block ends (a reader's
  "another shell").

A block fails the journey on a non-zero exit (``bash -e -o pipefail``), a traceback, or
a line of output the page promises (``EXPECT``) missing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.daemons import Daemon, free_port
from support.docs import DOCS, README, Block, as_run_here, fenced, serving
from support.paths import ROOT

#: substrings the output of a run block must contain: (page, a line of the block)
EXPECT = {
    ("README.md", "infer digits"): ["class 7"],
    ("README.md", "infer person"): ["person", "wrote boxes.jpg"],
    ("README.md", "ctl level hot"): ["level hot (pinned by operator"],
    ("README.md", "health"): ["OK"],
    ("README.md", "metrics"): ["edged_requests_total"],
    ("operations.md", "edged status"): ["LISTENER", "digits", "person"],
    ("kserve.md", "ctl reload"): ["kserve"],
    ("kserve.md", "curl"): ['"logits"'],
    ("delivery.md", "edged publish build/digits"): ["published digits v2", "signed"],
    ("pipelines.md", "infer digits-reader"): ["digit"],
    ("compile.md", "ctl level hot"): ["level hot (pinned by operator", "[cnn-int8]",
                                      "below its top rung: governor level hot"],
}
#: what the checkout holds that the pages read (config.toml is copied: a page edits it)
CHECKOUT = ("models", "examples", "scripts", "systemd", "deploy", "pyproject.toml")


def readme_daemon_config() -> str:
    """The config the README's first command serves (``.venv/bin/edged serve --config F``)."""
    first = next(b for b in fenced(README) if b.language == "sh")
    words = first.text.split("&& .venv/bin/edged serve --config ", 1)[1].split()
    return words[0]


def _bin(venv: Path) -> None:
    """``.venv/bin/{edged,python,python3,pip}`` running this test's interpreter."""
    venv.mkdir(parents=True)
    for name, run in (("edged", "-m edged"), ("python", ""), ("python3", ""),
                      ("pip", "-m pip")):
        (venv / name).write_text(f'#!/bin/sh\nexec {sys.executable} {run} "$@"\n')
        (venv / name).chmod(0o755)


@pytest.fixture(scope="module")
def journey(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A checkout-shaped folder with ``.venv/bin``, and the README's daemon on its config."""
    tmp = tmp_path_factory.mktemp("journey")
    work = tmp / "checkout"
    work.mkdir()
    for name in CHECKOUT:
        (work / name).symlink_to(ROOT / name)
    cfg_name = readme_daemon_config()
    shutil.copy(ROOT / cfg_name, work / cfg_name)
    (work / "tmp").mkdir()
    _bin(work / ".venv" / "bin")
    d = Daemon(work / cfg_name, tmp / "daemon", metrics=True, cwd=work)
    ports = {"127.0.0.1:5555": f"127.0.0.1:{d.port}",
             "127.0.0.1:9464": f"127.0.0.1:{d.metrics_port}"}
    for fixed in ("8000", "8001"):  # a page adds a KServe listener on these
        here = str(free_port())
        ports |= {f"127.0.0.1:{fixed}": f"127.0.0.1:{here}",
                  f"localhost:{fixed}": f"127.0.0.1:{here}"}
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep)
            if p and not (Path(p) / "edged").exists()]
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGED_")}
    env.update(PATH=os.pathsep.join(path), PYTHONPATH=str(ROOT), HOME=str(tmp),
               TMPDIR=str(work / "tmp"), EDGED_CONTROL=d.control, EDGED_ENDPOINT=d.tcp)
    env.pop("XDG_RUNTIME_DIR", None)
    env.pop("VIRTUAL_ENV", None)
    try:
        yield {"work": work, "env": env, "ports": ports, "daemon": d}
    finally:
        d.stop()


def _run(block: Block, j: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    text = as_run_here(block.text, j["ports"])
    env = dict(j["env"])
    if block.language == "python":
        cmd = [str(j["work"] / ".venv" / "bin" / "python"), "-c", text]
    else:
        if "edged serve" in block.text:  # it serves its own daemon: found by --config
            env.pop("EDGED_CONTROL")
            env.pop("EDGED_ENDPOINT")
        text = serving(text)
        cmd = ["bash", "-e", "-o", "pipefail", "-c", text]
    return subprocess.run(cmd, cwd=j["work"], env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.parametrize("page", [p for p in DOCS if any(b.runs for b in fenced(p))],
                         ids=lambda p: p.name)
def test_page(page: Path, journey: dict[str, Any]) -> None:
    """Each block of ``page`` in order, as written, after every page before it."""
    for block in (b for b in fenced(page) if b.runs):
        r = _run(block, journey)
        said = f"{block.id}:\n{block.text}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"
        assert r.returncode == 0, f"failed: {said}"
        assert "Traceback (most recent call last)" not in r.stderr, f"a traceback: {said}"
        for (name, line), wanted in EXPECT.items():
            if page.name == name and any(line in ln for ln in block.text.splitlines()):
                missing = [w for w in wanted if w not in r.stdout]
                assert not missing, f"{missing} not in the output of {said}"


def test_the_readme_daemon_served_the_whole_journey(journey: dict[str, Any]) -> None:
    """Still up after every page, and nothing it logged was a traceback."""
    d: Daemon = journey["daemon"]
    assert d.proc.poll() is None, d.log_tail()
    assert "Traceback" not in d.log(), d.log()


def test_every_page_is_on_the_journey() -> None:
    """The README lists every page of docs/ (the journey's order), each once."""
    listed = [p.name for p in DOCS[1:]]
    assert sorted(listed) == sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert len(set(listed)) == len(listed)


def test_pages_spell_commands_one_way() -> None:
    """In the checkout a command is ``.venv/bin/edged`` (``python``, ``pip``), as in the
    README's first lines: a bare ``edged`` runs nothing or another install. Only a block
    run on the device (``# needs root ...``), where the installer put ``edged`` on the
    PATH, spells it bare. Fenced blocks of commands and indented ones alike."""
    bare = []
    for page in DOCS:
        fences = {b.line: b for b in fenced(page)}
        lines, inside = page.read_text().splitlines(), None
        for n, ln in enumerate(lines, 1):
            if inside is None and n in fences:
                inside = fences[n]
                continue
            if inside is not None:
                if ln.strip() == "```":
                    inside = None
                    continue
                on_device = re.match(r"#\s*needs root", inside.marker or "", re.I) is not None
                if inside.language not in ("", "sh", "bash", "shell", "console") or on_device:
                    continue
            elif not ln.startswith("    "):
                continue
            cmd = ln.split("#", 1)[0].strip().removeprefix("$ ")
            for part in (p.strip() for p in cmd.replace("&&", "|").split("|")):
                if part.split(" ", 1)[0] in ("edged", "python", "pip", "pytest"):
                    bare.append(f"{page.name}:{n}: {ln.strip()}")
    assert not bare, "spell them .venv/bin/...:\n" + "\n".join(bare)
