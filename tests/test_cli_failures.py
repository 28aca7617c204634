"""Every subcommand, given a broken input, fails by the one rule (docs/operations.md,
"When a command fails"): no traceback, a non-zero code from ``edged.cli.exits``, a line
that names what to change.

The subcommands are enumerated from the parser, so a new one fails
``test_every_subcommand_has_a_broken_input`` until it is given one here. Each runs as a
user types it (a subprocess of ``edged``), with no daemon to find: a ``TMPDIR`` of its
own and no ``EDGED_*`` in the environment.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.paths import ROOT

from edged.cli import exits
from edged.cli import main as cli_main
from edged.cli.main import build_parser

#: what a line that names the fix looks like: a flag, or a verb telling what to do
FIX = re.compile(r"(?<![\w-])--[a-z]|\b(fix|give|pass|start|change|set|use|run|create|pick|"
                 r"name|install|publish|check)\b")

#: a broken input per subcommand ({tmp} is an empty folder), and the code it must get
NONE = "ipc://{tmp}/none.sock"
BROKEN: dict[str, tuple[list[str], int]] = {
    "serve": (["--config", "{tmp}/missing.toml"], exits.CONFIG),
    "check": (["{tmp}/bad.toml"], exits.CONFIG),
    "infer": (["digits", "{tmp}/missing.png"], exits.USAGE),
    "models": (["--endpoint", NONE], exits.UNREACHABLE),
    "health": (["--endpoint", NONE], exits.UNREACHABLE),
    "status": (["--control", NONE], exits.UNREACHABLE),
    "publish": (["{tmp}", "--to", "file://{tmp}/src", "--model", "m", "--version", "v1",
                 "--unsigned"], exits.USAGE),
    "compile": (["{tmp}/missing.onnx", "--out", "{tmp}/out"], exits.USAGE),
    "bench": (["--model", "digits", "--endpoint", NONE], exits.UNREACHABLE),
    "bench soak": (["--config", "{tmp}/bad.toml"], exits.CONFIG),
    "bench footprint": (["--config", "{tmp}/missing.toml"], exits.CONFIG),
    "governor replay": (["{tmp}/missing.csv"], exits.USAGE),
    "device-check": (["--max-batch", "0"], exits.USAGE),
    "isa-check": (["--timeout", "soon"], exits.USAGE),
    "frigate labelmap": (["det", "--config", "{tmp}/missing.toml"], exits.CONFIG),
    "keys generate": (["server", "--dir", "/proc/edged-keys"], exits.USAGE),
    **{f"ctl {a}": ([*args, "--control", NONE], exits.UNREACHABLE) for a, args in (
        ("status", []), ("models", []), ("reload", []), ("load", ["digits"]),
        ("unload", ["digits"]), ("level", ["hot"]), ("swap", ["digits", "auto"]),
        ("pull", ["digits"]), ("promote", ["digits", "v2"]), ("rollback", ["digits"]),
        ("energy", ["--budget-wh", "5", "--mission", "1h"]))},
}


def leaves(p: argparse.ArgumentParser, name: str = "") -> Iterator[str]:
    """Every command a user can run: a parser without a required subcommand."""
    subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    if name and not any(a.required for a in subs):
        yield name
    for a in subs:
        for child, cp in a.choices.items():
            yield from leaves(cp, f"{name} {child}".strip())


def test_every_subcommand_has_a_broken_input() -> None:
    assert set(leaves(build_parser())) == set(BROKEN)


@pytest.mark.parametrize("command", sorted(BROKEN))
def test_a_broken_input_fails_by_the_rule(command: str, tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text("[server]\nendpoints = [\n")
    argv, code = BROKEN[command]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("EDGED_") and k not in ("RUNTIME_DIRECTORY", "XDG_RUNTIME_DIR")}
    env.update(PYTHONPATH=str(ROOT), TMPDIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-m", "edged", *command.split(),
                        *(a.format(tmp=tmp_path) for a in argv)],
                       capture_output=True, text=True, env=env, timeout=120, cwd=str(tmp_path))
    said = r.stdout + r.stderr
    assert "Traceback" not in said, said
    assert r.returncode == code and code in exits.MEANING and code != exits.OK, (
        r.returncode, said)
    assert FIX.search(said), f"{command}: no line says what to change:\n{said}"
    if code == exits.CONFIG:
        assert "missing.toml" in said or f"{tmp_path}/bad.toml:2:14: invalid TOML" in said, said


def test_an_unexpected_error_is_one_line_and_debug_shows_its_traceback(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A bug (an exception no command expects): one line, code 5, the way to see more;
    ``--debug`` (anywhere on the line) lets the traceback through."""
    def broken(args: argparse.Namespace) -> int:
        raise KeyError("the_bug")

    monkeypatch.setitem(cli_main._COMMANDS, "keys", broken)
    assert cli_main.main(["keys", "generate", "x"]) == exits.INTERNAL
    err = capsys.readouterr().err
    assert err.startswith("edged: internal error: KeyError: 'the_bug'\n"), err
    assert "--debug" in err and len(err.splitlines()) == 2
    for argv in (["--debug", "keys", "generate", "x"], ["keys", "generate", "x", "--debug"]):
        with pytest.raises(KeyError, match="the_bug"):
            cli_main.main(argv)


def test_the_documented_table_is_the_codes() -> None:
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text[text.index("### When a command fails"):]
    rows = re.findall(r"(?m)^\| (\d+) \| ", section)
    assert [int(c) for c in rows] == sorted(exits.MEANING), rows
