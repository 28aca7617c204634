"""What every script that writes a generated part of a page shares: measure, print, and
write the text between the page's begin and end markers (or, with ``--check``, only print).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def main(doc: Path, begin: str, end: str, make: Callable[[], str], description: str,
         argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--check", action="store_true", help="print the section, write nothing")
    args = ap.parse_args(argv)
    text = make()
    print(text)
    if args.check:
        return 0
    page = doc.read_text()
    if begin not in page or end not in page:
        print(f"{doc}: no {begin!r} ... {end!r} markers to write between", file=sys.stderr)
        return 1
    head, rest = page.split(begin, 1)
    doc.write_text(head + text + rest.split(end, 1)[1])
    print(f"wrote {doc}")
    return 0
