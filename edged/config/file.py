"""The daemon's configuration: parsed from TOML once into frozen, validated objects.

Every problem names the file, the dotted key path and what was expected, and all
problems are reported together (``edged check``). Paths in the file are relative to
the file's own folder, so a config and its models can move together.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from edged.config.frigate import check_frigate
from edged.config.governor import GovernorConfig
from edged.config.kserve import OffloadConfig, check_offload_models, parse_offload
from edged.config.models import ModelConfig, overridden, read_model
from edged.config.pipelines import PipelineConfig, check_pipelines, is_pipeline, read_pipeline
from edged.config.schema import Table, raise_if_problems
from edged.config.server import MetricsConfig, ServerConfig, parse_listen, read_metrics, read_server
from edged.errors import ConfigError


@dataclass(frozen=True)
class Config:
    file: Path
    server: ServerConfig
    metrics: MetricsConfig
    models: tuple[ModelConfig, ...]
    governor: GovernorConfig
    offload: OffloadConfig = field(default_factory=OffloadConfig)
    #: ``[[models]]`` entries of kind "pipeline" (docs/pipelines.md)
    pipelines: tuple[PipelineConfig, ...] = ()

    def model(self, name: str) -> ModelConfig | None:
        return next((m for m in self.models if m.name == name), None)

    def pipeline(self, name: str) -> PipelineConfig | None:
        return next((p for p in self.pipelines if p.name == name), None)

    def warnings(self) -> list[str]:
        """Valid settings that another setting overrides, each naming both keys."""
        return [f"{self.file}: {w}" for m in self.models for w in overridden(m)]

    def with_overrides(
        self, endpoints: list[str] | None = None, metrics: str | None = None,
        runtime_dir: str | None = None, control: str | None = None,
    ) -> Config:
        """Apply CLI flags (they win over the file) so daemons can run side by side."""
        server = self.server
        if endpoints:
            server = replace(server, endpoints=tuple(endpoints))
        if runtime_dir:
            server = replace(server, runtime_dir=Path(runtime_dir))
        if control:
            server = replace(server, control=control)
        m = self.metrics
        if metrics is not None:
            m = parse_listen(metrics, "--metrics")
        return replace(self, server=server, metrics=m)




def parse_config(data: dict[str, Any], file: Path | str) -> Config:
    """Build a Config from already-parsed TOML (``file`` anchors relative paths)."""
    file = Path(file).resolve()
    root = Table(data, "", file)
    server = read_server(root.table("server"))
    metrics = read_metrics(root.table("metrics"))
    entries = root.tables("models", required=True)
    models = [m for m in (read_model(mt) for mt in entries if not is_pipeline(mt)) if m]
    pipelines = [p for p in (read_pipeline(mt) for mt in entries if is_pipeline(mt)) if p]
    names = [m.name for m in models] + [p.name for p in pipelines]
    for n in {n for n in names if names.count(n) > 1}:
        root.problem("models", f"model name {n!r} is used twice")
    check_pipelines(root, entries, pipelines, models)
    check_frigate(root, server.frigate, server.endpoints, models, pipelines)
    frigate_models = {f.model for f in server.frigate}
    models = [replace(m, overload=m.overload.resolved(m.name in frigate_models))
              for m in models]
    pipelines = [replace(p, overload=p.overload.resolved(p.name in frigate_models))
                 for p in pipelines]
    gov_t = root.table("governor")
    governor = GovernorConfig.from_table(gov_t)
    off_t = root.table("offload")
    offload = parse_offload(off_t)
    check_offload_models(off_t, offload, {m.name: [v.name for v in m.variants] for m in models})
    for lv in governor.levels or ():
        for name in lv.offload:
            if offload.for_model(name) is None:
                root.problem("governor.levels", f"level {lv.name!r}: offload {name!r} has no "
                             "[[offload.models]] entry (where would its requests go?)")
    root.done()
    raise_if_problems(root.problems)
    return Config(file=file, server=server, metrics=metrics, models=tuple(models),
                  governor=governor, offload=offload, pipelines=tuple(pipelines))


def load_config(path: str | Path) -> Config:
    """Read and validate a config file; raises ConfigError listing every problem."""
    p = Path(path)
    return parse_config(_read_toml(p), p)


def load_governor(path: str | Path | None) -> GovernorConfig:
    """The ``[governor]`` table of a config file, read as the daemon reads it.

    Why not ``load_config``: ``python -m edged.governor`` and ``edged governor replay``
    run on a board before it serves anything, from a file that may hold only a
    ``[governor]`` table, so the rest of the file is not checked. The table itself goes
    through the same reader, so a problem names the file and ``governor.<key>`` exactly
    as ``edged check`` and the daemon do. ``None`` gives the defaults of an empty table.
    """
    if path is None:
        root = Table({}, "", "(defaults)", base_dir=Path.cwd())
    else:
        file = Path(path).resolve()
        root = Table(_read_toml(file), "", file)
    governor = GovernorConfig.from_table(root.table("governor"))
    raise_if_problems(root.problems)
    return governor


def _read_toml(p: Path) -> dict[str, Any]:
    """A config file's TOML; a file that cannot be read is one problem naming it."""
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise ConfigError([f"{p}: cannot read config file: {e.strerror or e}"]) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError([f"{p}: not UTF-8 text: {e}"]) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError([toml_problem(p, e, text)]) from None


def toml_problem(p: Path, e: tomllib.TOMLDecodeError, doc: str) -> str:
    """``FILE:LINE:COLUMN: invalid TOML: what`` (as a compiler says it, so an editor
    jumps there); tomllib puts the place in its message ("(at line 3, column 5)")."""
    text = str(e)
    m = re.search(r"\s*\(at line (\d+), column (\d+)\)$", text)
    line, col = (getattr(e, "lineno", None), getattr(e, "colno", None))
    if m is not None:
        line, col, text = int(m.group(1)), int(m.group(2)), text[:m.start()]
    elif text.endswith("(at end of document)"):
        lines = doc.splitlines() or [""]
        line, col = len(lines), len(lines[-1]) + 1
        text = text[:-len("(at end of document)")].rstrip() + " at the end of the file"
    where = f"{p}:{line}:{col}" if line else str(p)
    return f"{where}: invalid TOML: {text}"
