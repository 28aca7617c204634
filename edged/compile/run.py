"""``edged compile`` as a library: build, validate, time and list a model's variants.

    from edged.compile.options import CompileOptions
    from edged.compile.run import run

    result = run(CompileOptions(model=Path("m.onnx"), out=Path("out"), steps=("int8",)))
    result.outcomes["m-int8.onnx"]  # "ok", "rejected", "forced", ...

Why steps: an ML engineer wants "everything for this device" in one go, but also to
redo one step (a new calibration set, a longer tuning run) without rebuilding the
rest. Each step (``edged.compile.steps``) writes artifacts with sidecars into
``out``; each is validated and timed right after it is built, through the daemon's
own backends (``edged.compile.checks``); the ladder (``out/variants.toml``) is
rewritten from every sidecar in ``out`` at the end.

Nothing here prints: every line of the report goes to ``say`` (and into
``Result.log``). Bad options raise ``OptionError`` when ``CompileOptions`` is made;
bad data raises ``sources.DataError`` before anything is built. A step that fails
is recorded and the others still run.
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from edged.backends.support.isa import cpu_isa
from edged.backends.support.sidecar import sha256_file
from edged.compile import card, checks, ladder_file, sources
from edged.compile import served_config as serving
from edged.compile.context import Context, StepSkipped
from edged.compile.modelinfo import io_specs
from edged.compile.options import CompileOptions
from edged.compile.steps import Step
from edged.compile.steps import find as find_step


@dataclass
class Result:
    """What one run made and how each artifact fared."""

    out: Path
    built: dict[str, list[Path]] = field(default_factory=dict)  # step -> artifacts
    skipped: dict[str, str] = field(default_factory=dict)  # step -> why
    outcomes: dict[str, str] = field(default_factory=dict)  # file name -> checks' verdict
    failures: list[str] = field(default_factory=list)  # failed steps and checks
    rejected: list[str] = field(default_factory=list)  # moved to out/rejected
    ladder: Path | None = None
    #: ``out/edged.toml``: the model, its preprocessing, the ladder and a governor
    config: Path | None = None
    only_step_skipped: bool = False  # the one step asked for could not run here
    log: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 when every step that ran succeeded and nothing was rejected, else 1."""
        return 1 if self.failures or self.rejected or self.only_step_skipped else 0


def run(opts: CompileOptions, say: Callable[[str], None] | None = None) -> Result:
    """Run the steps ``opts`` asks for (see the module docstring)."""
    result = Result(opts.out)

    def report(line: str) -> None:
        result.log.append(line)
        if say is not None:
            say(line)

    os.environ.setdefault("TVM_NUM_THREADS", str(opts.threads))  # before TVM's first import
    opts.out.mkdir(parents=True, exist_ok=True)
    inputs, outputs = io_specs(opts.model)
    ctx = Context(opts, inputs, outputs, sha256_file(opts.model), cpu_isa(opts.cpuinfo), report,
                  failures=result.failures, rejected=result.rejected)
    sources.load(ctx)
    if ctx.calib is not None:
        report(f"calibration data: {ctx.calib.source}")
    checks.reference(ctx)
    for name in opts.build_steps:
        _build(ctx, name, result)
    if "validate" in opts.steps:
        for p in checks.existing_artifacts(opts.out):
            result.outcomes[p.name] = checks.check(ctx, p)
    result.ladder, in_dir = ladder_file.write_with_text(opts.out, opts.relative_to,
                                                   confirm=checks.confirmer(ctx))
    report(f"wrote {result.ladder}")
    result.config = serving.write(ctx, in_dir, report)
    card_path = card.write(ctx)
    if card_path is not None:
        report(f"wrote {card_path}: `edged publish {opts.out}` packs the folder as it is")
    report(f"wrote {result.config}: serve it with edged serve --config {result.config}")
    if result.failures:
        report(f"failed steps: {', '.join(result.failures)}")
    if result.rejected:
        report(f"rejected: {', '.join(result.rejected)} (see {opts.out / 'rejected'}; "
               "--force keeps)")
    return result


def _run_step(step: Step, ctx: Context) -> list[Path]:
    """Import the step's module (only now: a CPU-only run never imports TVM) and build."""
    module, _, function = step.builder.partition(":")
    build: Callable[[Context], list[Path]] = getattr(importlib.import_module(module), function)
    return build(ctx)


def _build(ctx: Context, name: str, result: Result) -> None:
    """One step: build, then check each artifact; a failure is recorded, not raised."""
    t0 = time.monotonic()
    try:
        made = _run_step(find_step(name), ctx)
    except StepSkipped as e:
        ctx.say(f"{name}: skipped — {e}")
        result.skipped[name] = str(e)
        result.only_step_skipped = ctx.opts.steps == (name,)
        return
    except Exception as e:
        ctx.failures.append(name)
        ctx.say(f"{name}: FAILED — {type(e).__name__}: {e}")
        return
    result.built[name] = made
    ctx.say(f"{name}: built {', '.join(p.name for p in made)} in {time.monotonic() - t0:.1f} s")
    for p in made:
        result.outcomes[p.name] = checks.check(ctx, p)
