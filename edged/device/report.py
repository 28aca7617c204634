"""The check lines of ``edged device-check``: INFO facts, PASS/SKIP/FAIL checks, tables.

Why one collector: each line is printed as it happens (a slow TensorRT build shows what
came before it), and the same lines make up the ``--json`` document and the exit status.
"""

from __future__ import annotations

import json
from typing import Any

PASS, SKIP, FAIL, INFO = "PASS", "SKIP", "FAIL", "INFO"


class Report:
    """Collects checks; prints each line as it happens unless --json."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.facts: dict[str, Any] = {}
        self.checks: list[dict[str, Any]] = []
        self.tables: list[str] = []

    def table(self, text: str) -> None:
        self.tables.append(text)
        if not self.as_json:
            print("\n" + text + "\n", flush=True)

    def fact(self, key: str, value: Any) -> None:
        self.facts[key] = value
        if not self.as_json:
            print(f"{INFO:<5} {key:<34} {value}", flush=True)

    def add(self, name: str, status: str, detail: str, **data: Any) -> None:
        self.checks.append({"name": name, "status": status, "detail": detail, **data})
        if not self.as_json:
            print(f"{status:<5} {name:<34} {detail}", flush=True)

    @property
    def failed(self) -> bool:
        return any(c["status"] == FAIL for c in self.checks)

    def finish(self) -> int:
        """The verdict (a JSON document with --json): exit status 1 when a check FAILed."""
        counts = {s: sum(c["status"] == s for c in self.checks) for s in (PASS, SKIP, FAIL)}
        if self.as_json:
            print(json.dumps({"ok": not self.failed, "counts": counts, "facts": self.facts,
                              "checks": self.checks, "tables": self.tables}, indent=2,
                             default=str))
        else:
            verdict = "FAILED" if self.failed else "OK"
            print(f"{verdict}: {counts[PASS]} passed, {counts[SKIP]} skipped, "
                  f"{counts[FAIL]} failed")
        return 1 if self.failed else 0
