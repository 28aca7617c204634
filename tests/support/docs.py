"""The pages as a reader meets them: README.md, then docs/ in the README's order; their
fenced blocks; what a block's first line says instead of being run; and a page's text made
to run here (the fixed ports it names mapped to the test daemon's, an ``edged serve`` line
run in the background until its block ends).

Shared by ``tests/test_docs.py`` (every block run or marked; config blocks that load) and
``tests/test_journey.py`` (every page followed in order beside the README's daemon).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from support.paths import ROOT

README = ROOT / "README.md"
#: what a shell block's first line may say instead of being run
MARKER = re.compile(r"^#\s*(needs\b|takes\b.*\brun by\b|run by\b)", re.I)
#: an unlabeled fenced block that shows commands (a ``$ `` prompt or a command word)
COMMANDISH = re.compile(r"^\s*(\$ |sudo |edged |\.venv/|python3? |scripts/|curl |pip )")
SHELL = ("sh", "bash", "shell")


def readme_order() -> list[Path]:
    """README.md, then each page of docs/ in the order the README's table lists them."""
    names = re.findall(r"\]\(docs/([\w-]+)\.md\)", README.read_text().split("| `docs/` |")[1]
                       .split("\n")[0])
    return [README, *(ROOT / "docs" / f"{n}.md" for n in names)]


DOCS = readme_order()


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

    @property
    def runs(self) -> bool:
        """A shell or Python block a reader runs as shown (not marked)."""
        return self.language in (*SHELL, "python") and self.marker is None


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
    return [b for p in DOCS for b in fenced(p) if b.language in SHELL]


def as_run_here(text: str, ports: dict[str, str]) -> str:
    """``text`` with each fixed address it names replaced by the test daemon's."""
    for fixed, here in ports.items():
        text = text.replace(fixed, here)
    return text


def serving(script: str) -> str:
    """``edged serve --config F ...`` lines run in the background until the block ends,
    and the next line waits until that daemon answers (``edged health --config F``), as a
    reader runs the next commands from another shell."""
    out = []
    for line in script.splitlines():
        m = re.match(r"^((\S*edged) serve .*--config (\S+).*?)(\s+#.*)?$", line)
        if m:
            out += [f"{m.group(1)} > serve.log 2>&1 &", "trap 'kill %1; wait' EXIT",
                    f"for i in $(seq 240); do {m.group(2)} health --config {m.group(3)} "
                    ">/dev/null 2>&1 && break; sleep 0.25; done"]
        else:
            out.append(line)
    return "\n".join(out)
