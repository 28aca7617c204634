"""``edged --help`` and every command's help read as a user's manual: every command and
option has a one-line help, no internal module names, no reST, no checkout paths as
defaults, and the top-level description names every command."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest
from support.paths import ROOT

from edged.cli.main import _COMMANDS, build_parser

#: what help text must not contain, and why
FORBIDDEN = {
    r"``": "reST literal",
    r":(func|mod|class|meth):`": "reST role",
    r"\bedged\.(?!toml\b|sock\b|service\b|json\b)[a-z_]+": "an internal module name",
    r"Why in the package": "a developer's note",
}


def parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    stack = [("edged", build_parser())]
    while stack:
        name, p = stack.pop()
        yield name, p
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                stack += [(f"{name} {n}", sub) for n, sub in a.choices.items()]


def test_the_help_lists_every_command_once_in_order() -> None:
    text = build_parser().format_help()
    listed = re.findall(r"(?m)^  ([a-z-]+)(?:\s{2,}|$)", text.split("commands:")[1])
    assert listed == list(_COMMANDS), listed
    for name in _COMMANDS:  # nowhere else: not in the description, not as {a,b,...}
        assert len(re.findall(rf"(?m)^\s+{re.escape(name)}\b", text)) == 1, name
    assert "{" not in text and "COMMAND\n" not in text


@pytest.mark.parametrize("name", [n for n, _ in parsers() if n != "edged"])
def test_every_command_help_opens_with_its_line(name: str) -> None:
    """``edged serve --help`` (and every other) says what the command is for before its
    options: a description of one sentence at least, read the same in a pipe."""
    text = dict(parsers())[name].format_help()
    after_usage = text.split("\n\n", 1)[1]
    first = after_usage.lstrip().splitlines()[0]
    assert not first.startswith(("positional arguments", "options")), (name, text)
    assert first[0].isupper() and len(first) > 10, (name, first)


def test_help_in_a_pipe_has_no_terminal_codes() -> None:
    r = subprocess.run([sys.executable, "-m", "edged", "--help"], capture_output=True,
                       text=True, env={**os.environ, "COLUMNS": "80"}, check=True)
    assert "\x1b[" not in r.stdout and "\r" not in r.stdout
    assert max(len(line) for line in r.stdout.splitlines()) <= 100


def test_every_command_and_option_has_one_line_help() -> None:
    missing = []
    for name, p in parsers():
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                missing += [f"{name} {c.dest}" for c in a._choices_actions if not c.help]
                continue
            if a.help is None or not str(a.help).strip():
                missing.append(f"{name} {'/'.join(a.option_strings) or a.dest}")
    assert not missing, "no help: " + ", ".join(sorted(missing))


@pytest.mark.parametrize("name", [n for n, _ in parsers()])
def test_help_has_no_internals_or_checkout_paths(name: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    p = dict(parsers())[name]
    text = p.format_help()
    for pattern, what in FORBIDDEN.items():
        m = re.search(pattern, text)
        assert m is None, f"{name} --help shows {what}: {m.group(0)!r}"
    assert str(ROOT) not in text, f"{name} --help shows a checkout path"
    assert sys.prefix not in text, f"{name} --help shows this venv's path"
