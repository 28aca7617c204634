"""What one ``edged compile`` run is asked to do: typed, checked once, at construction.

Why a dataclass and not argparse's Namespace: a compile run is a library (tests and
scripts call ``edged.compile.run.run(CompileOptions(...))``), so its inputs need types, defaults
and one place that refuses bad values, naming the option. The CLI only turns flags
into these fields (one field per flag, same name with ``-`` for ``_``).

Light on purpose (standard library only): ``edged --help`` imports it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from edged.backends.tensorrt.keys import PRECISIONS as TRT_PRECISIONS
from edged.compile.steps import EXTRA_STEPS, STEP_NAMES

CALIB_METHODS = ("minmax", "entropy", "percentile")
REDUCE_RANGE = ("auto", "on", "off")
COST_MODELS = ("xgb", "random")
TUNE_STRATEGIES = ("evolutionary", "replay-trace")


class OptionError(ValueError):
    """A bad option value. ``option`` is the field name; other options named in
    ``problem`` are written in backticks (the CLI shows them as ``--flags``)."""

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"{option}: {problem.replace('`', '')}")
        self.option = option
        self.problem = problem


@dataclass(frozen=True)
class CompileOptions:
    """One run: the model, where artifacts go, which steps, and how to check and time them."""

    model: Path  # the trained fp32 ONNX model
    out: Path  # output directory (created)
    steps: tuple[str, ...] = STEP_NAMES  # build steps in order; "validate" re-checks `out`
    name: str | None = None  # variant name prefix; default: model stem without -fp32
    val: Path | None = None  # validation data (default: what model.json names)
    calib: Path | None = None  # INT8 calibration data (default: model.json's, else val)
    preprocess: Path | None = None  # model.json with the preprocessing for uint8 images
    postprocess: Path | None = None  # a detector's [postprocess] TOML: validate by mAP
    calib_method: str = "minmax"
    int8_reduce_range: str = "auto"  # 7-bit weights: auto = on for x86 without VNNI
    calib_limit: int = 512
    max_drop: float = 2.0  # accuracy points a variant may lose
    force: bool = False  # keep rejected variants (marked FORCED)
    max_batch: int = 8
    threads: int = field(default_factory=lambda: os.cpu_count() or 1)
    bench_runs: int = 50
    target: str = "llvm"  # TVM: llvm, aarch64, cuda or a JSON dict
    cc: str | None = None
    batch_sizes: tuple[int, ...] | None = None  # TVM static batch sizes
    tune_trials: int = 0
    tune_trials_per_task: int | None = None
    tuning_db: Path | None = None
    cost_model: str | None = None  # default xgb when installed, else random
    tune_strategy: str = "evolutionary"
    trt_precisions: tuple[str, ...] = TRT_PRECISIONS
    #: variants.toml paths are relative to this folder (default: ``out``, so the folder
    #: moves as a whole); ``out/edged.toml``'s are always relative to ``out``
    relative_to: Path | None = None
    progress: bool = False  # progress bars on calibration and TVM builds
    cpuinfo: Path | None = None  # the build CPU's cpuinfo (default: edged.backends.support.isa's)

    def __post_init__(self) -> None:
        if self.relative_to is None:
            _set(self, "relative_to", self.out)
        for name in ("model", "out", "relative_to"):
            _set(self, name, Path(getattr(self, name)))
        for name in ("val", "calib", "preprocess", "postprocess", "tuning_db", "cpuinfo"):
            if getattr(self, name) is not None:
                _set(self, name, Path(getattr(self, name)))
        _set(self, "steps", tuple(self.steps))
        _set(self, "trt_precisions", tuple(self.trt_precisions))
        if self.batch_sizes is not None:
            _set(self, "batch_sizes", tuple(sorted(set(self.batch_sizes))))
        self._check()

    def _check(self) -> None:
        if not self.model.is_file():
            raise OptionError("model", f"not found: {self.model}; give the path of an "
                                       "ONNX file")
        bad = [s for s in self.steps if s not in STEP_NAMES + EXTRA_STEPS]
        if bad or not self.steps:
            raise OptionError("steps", f"unknown step(s) {', '.join(bad) or '(none given)'}; "
                              f"known: {', '.join(STEP_NAMES + EXTRA_STEPS)}")
        _choice("calib_method", self.calib_method, CALIB_METHODS)
        _choice("int8_reduce_range", self.int8_reduce_range, REDUCE_RANGE)
        _choice("tune_strategy", self.tune_strategy, TUNE_STRATEGIES)
        if self.cost_model is not None:
            _choice("cost_model", self.cost_model, COST_MODELS)
        bad = [p for p in self.trt_precisions if p not in TRT_PRECISIONS]
        if bad or not self.trt_precisions:
            raise OptionError("trt_precisions", "TensorRT precisions must be a comma list of "
                              f"{', '.join(TRT_PRECISIONS)} or all; "
                              f"got {list(self.trt_precisions)}")
        for name in ("max_batch", "threads", "bench_runs", "calib_limit"):
            _at_least(name, getattr(self, name), 1)
        _at_least("tune_trials", self.tune_trials, 0)
        if self.tune_trials_per_task is not None:
            _at_least("tune_trials_per_task", self.tune_trials_per_task, 1)
        if self.max_drop < 0:
            raise OptionError("max_drop", f"must be >= 0, got {self.max_drop}")
        if self.batch_sizes is not None and (not self.batch_sizes or self.batch_sizes[0] < 1):
            raise OptionError("batch_sizes",
                              f"need positive integers, got {list(self.batch_sizes)}")
        if self.postprocess is not None and self.val is None:
            raise OptionError("postprocess", "needs `val`: a .npz with 'images' and 'boxes', "
                              "or a folder of photos with boxes.csv")
        for name in ("val", "calib", "preprocess", "postprocess"):
            p = getattr(self, name)
            if p is not None and not p.exists():
                raise OptionError(name, f"not found: {p}")

    @property
    def prefix(self) -> str:
        """The variant name prefix: ``name``, else the model's stem without ``-fp32``."""
        return self.name or self.model.stem.removesuffix("-fp32")

    @property
    def build_steps(self) -> tuple[str, ...]:
        return tuple(s for s in self.steps if s in STEP_NAMES)


def parse_steps(text: str) -> tuple[str, ...]:
    """``"all"``, ``"int8,tvm"``, ``"all,validate"`` -> step names in order."""
    steps = [s.strip() for s in text.split(",") if s.strip()]
    if "all" in steps:
        steps = [*STEP_NAMES, *[s for s in steps if s in EXTRA_STEPS]]
    return tuple(steps)


def parse_ints(text: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> (1, 2, 4); ValueError naming the text otherwise."""
    try:
        return tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise ValueError(f"need a comma list of positive integers, got {text!r}") from None


def parse_precisions(text: str) -> tuple[str, ...]:
    """``"all"`` or a comma list of TensorRT precisions, in canonical order."""
    if text.strip() == "all":
        return TRT_PRECISIONS
    got = {p.strip() for p in text.split(",") if p.strip()}
    bad = sorted(got - set(TRT_PRECISIONS))
    if bad or not got:
        raise ValueError(f"TensorRT precisions must be a comma list of "
                         f"{', '.join(TRT_PRECISIONS)} or all; got {text!r}")
    return tuple(p for p in TRT_PRECISIONS if p in got)


def _set(opts: CompileOptions, name: str, value: object) -> None:
    object.__setattr__(opts, name, value)  # frozen: normalised once, here


def _choice(name: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise OptionError(name, f"{value!r} is not one of {', '.join(choices)}")


def _at_least(name: str, value: int, low: int) -> None:
    if not isinstance(value, int) or value < low:
        raise OptionError(name, f"must be an integer >= {low}, got {value!r}")
