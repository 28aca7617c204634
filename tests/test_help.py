"""``edged --help`` and every command's help read as a user's manual: every command and
option has a one-line help, no internal module names, no reST, no checkout paths as
defaults, and the top-level description names every command."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator

import pytest
from support.paths import ROOT

from edged.cli.main import _COMMANDS, DESCRIPTION, build_parser

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


def test_the_description_names_every_command() -> None:
    listed = set(re.findall(r"(?m)^  ([a-z-]+)\s{2,}", DESCRIPTION))
    assert listed == set(_COMMANDS), set(_COMMANDS) ^ listed


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
