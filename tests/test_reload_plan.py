"""Reload planning is pure: ``plan_reload(old, new)`` names the models added, changed
and removed and the keys that need a restart, from two parsed configs alone."""

from __future__ import annotations

import tomllib
from pathlib import Path

from support.configs import digits_config, model_table, variant

from edged.config.file import load_config, parse_config
from edged.server.reload import plan_reload


def test_plan_reload_names_added_changed_removed_and_restart_keys(tmp_path: Path) -> None:
    old = load_config(digits_config(tmp_path))
    text = digits_config(tmp_path, variants=("cnn-fp32", "cnn-int8")).read_text()
    new_raw = text.replace('[server]', '[server]\nendpoints = ["tcp://127.0.0.1:1"]')
    new_raw += model_table("extra", [variant("null", backend="null")])
    new = parse_config(tomllib.loads(new_raw), tmp_path / "edged.toml")
    plan = plan_reload(old, new)
    assert [m.name for m in plan.added] == ["extra"]
    assert [m.name for m in plan.changed] == ["digits"]
    assert plan.removed == []
    assert plan.needs_restart == ["server.endpoints"]
    assert plan_reload(new, old).removed == ["extra"]
