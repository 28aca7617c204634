"""A small reader for TOML tables that builds typed config objects.

Why by hand: the config is read once at start and on reload, every error must name
the file and the dotted key path, unknown keys must be rejected with the nearest
valid key suggested, and *all* problems must be reported at once (``edged check``).
A schema library would add a dependency without giving those messages.

Usage: each config section has a ``from_table(t: Table)`` that calls ``t.get(...)``
for every key it knows and finally ``t.done()``; problems are collected in a shared
list and raised together by :func:`raise_if_problems`.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from edged.errors import ConfigError

T = TypeVar("T")


class _Required:
    def __repr__(self) -> str:
        return "<required>"


REQUIRED: Any = _Required()

_TYPE_NAMES: dict[type, str] = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    list: "an array",
    dict: "a table",
}


def _describe(expected: type | tuple[type, ...]) -> str:
    if isinstance(expected, tuple):
        return " or ".join(_TYPE_NAMES.get(e, e.__name__) for e in expected)
    return _TYPE_NAMES.get(expected, expected.__name__)


class Table:
    """One TOML table plus where it came from; records problems instead of raising."""

    def __init__(
        self,
        data: dict[str, Any],
        path: str,
        file: str | Path,
        problems: list[str] | None = None,
        base_dir: Path | None = None,
    ) -> None:
        self.data = data
        self.path = path
        self.file = str(file)
        self.problems: list[str] = problems if problems is not None else []
        self.base_dir = base_dir if base_dir is not None else Path(file).resolve().parent
        self._seen: set[str] = set()

    # -- reporting -------------------------------------------------------------------
    def key_path(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def problem(self, key: str | None, message: str) -> None:
        where = self.key_path(key) if key else (self.path or "(top level)")
        self.problems.append(f"{self.file}: {where}: {message}")

    # -- access ----------------------------------------------------------------------
    def has(self, key: str) -> bool:
        return key in self.data

    def get(
        self,
        key: str,
        expected: type | tuple[type, ...],
        default: Any = REQUIRED,
        *,
        check: Callable[[Any], str | None] | None = None,
        choices: tuple[Any, ...] | None = None,
    ) -> Any:
        """The value at ``key`` if it has the expected type and passes ``check``.

        ``check`` returns an error text ("must be > 0") or None. On any problem the
        problem is recorded and the default (or None for a required key) is returned,
        so reading goes on and every problem is reported in one pass.
        """
        self._seen.add(key)
        if key not in self.data:
            if default is REQUIRED:
                self.problem(key, f"missing; expected {_describe(expected)}")
                return None
            return default
        value = self.data[key]
        exp = expected if isinstance(expected, tuple) else (expected,)
        # TOML ints are acceptable where floats are expected; bools are not ints here.
        if float in exp and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        ok = False if isinstance(value, bool) and bool not in exp else isinstance(value, exp)
        if not ok:
            self.problem(key, f"expected {_describe(expected)}, got {value!r}")
            return None if default is REQUIRED else default
        if choices is not None and value not in choices:
            self.problem(key, f"must be one of {', '.join(map(repr, choices))}; got {value!r}")
            return None if default is REQUIRED else default
        if check is not None:
            err = check(value)
            if err:
                self.problem(key, f"{err}; got {value!r}")
                return None if default is REQUIRED else default
        return value

    def get_list(
        self, key: str, item: type | tuple[type, ...], default: Any = REQUIRED
    ) -> list[Any] | None:
        value = self.get(key, list, default)
        if value is None or value is default:
            return value
        for i, v in enumerate(value):
            if not isinstance(v, item) or (isinstance(v, bool) and item is not bool):
                self.problem(f"{key}[{i}]", f"expected {_describe(item)}, got {v!r}")
                return None if default is REQUIRED else default
        return list(value)

    def get_path(self, key: str, default: Any = REQUIRED, must_exist: bool = False) -> Path | None:
        """A filesystem path, relative to the config file's folder."""
        value = self.get(key, str, default)
        if not isinstance(value, str):
            return value
        p = Path(value).expanduser()
        if not p.is_absolute():
            p = (self.base_dir / p).resolve()
        if must_exist and not p.exists():
            self.problem(key, f"file not found: {p}")
        return p

    def table(self, key: str, required: bool = False) -> Table:
        """A sub-table; an absent optional one reads as empty (all defaults)."""
        self._seen.add(key)
        value = self.data.get(key)
        if value is None:
            if required:
                self.problem(key, "missing table")
            value = {}
        elif not isinstance(value, dict):
            self.problem(key, f"expected a table, got {value!r}")
            value = {}
        return Table(value, self.key_path(key), self.file, self.problems, self.base_dir)

    def tables(self, key: str, required: bool = False) -> list[Table]:
        """An array of tables (``[[key]]``)."""
        self._seen.add(key)
        value = self.data.get(key)
        if value is None:
            if required:
                self.problem(key, "missing; expected at least one [[" + self.key_path(key) + "]]")
            return []
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            self.problem(key, "expected an array of tables ([[" + self.key_path(key) + "]])")
            return []
        return [
            Table(v, f"{self.key_path(key)}[{i}]", self.file, self.problems, self.base_dir)
            for i, v in enumerate(value)
        ]

    def done(self) -> None:
        """Reject keys nobody asked for, suggesting the nearest known one."""
        for key in self.data:
            if key in self._seen:
                continue
            near = difflib.get_close_matches(key, sorted(self._seen), n=1, cutoff=0.6)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            known = ", ".join(sorted(self._seen)) or "none"
            self.problem(key, f"unknown key{hint}; known keys here: {known}")


def positive(v: float) -> str | None:
    return None if v > 0 else "must be > 0"


def non_negative(v: float) -> str | None:
    return None if v >= 0 else "must be >= 0"


def raise_if_problems(problems: list[str]) -> None:
    if problems:
        raise ConfigError(problems)


def zmq_endpoint(e: str) -> str | None:
    """A ``check`` for a ZeroMQ endpoint the daemon binds."""
    if e.startswith("ipc://") and len(e) > 6:
        return None
    if e.startswith("tcp://") and ":" in e[6:]:
        return None
    return "must be ipc://PATH or tcp://HOST:PORT"
