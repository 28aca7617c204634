"""MetaSchedule tuning with a reusable JSON database and a progress bar.

Why this is not a plain ``tune_relax`` call (what TVM 0.27 does, and what we
measured on a 2-core box):

* ``tune_relax`` re-tunes every task even when the database already holds records
  for it; we query the database per task and tune only the missing ones, so a second
  run over the same model, target and batch sizes tunes nothing;
* LocalBuilder's default build function imports ``tvm.s_tir.tensor_intrin``, which
  registers every CUDA/ROCm tensor intrinsic and takes ~25 s per worker process;
  with the default 30 s timeout every candidate fails. We raise the timeout to 180 s
  and, for CPU targets, use a build function without that import; and in this
  process we load only the CPU intrinsics (x86, arm) before MetaSchedule asks for
  the whole package. This cut a 12-trial run from ~140 s to ~40 s here;
* the tuning database is TVM's own JSON (``database_workload.json`` and
  ``database_tuning_record.json``), never pickle.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class TuneSettings:
    trials: int  # global trial budget per batch size
    trials_per_task: int | None = None
    per_iter: int = 16
    cost_model: str = "xgb"  # "xgb" needs xgboost; "random" does not
    strategy: str = "evolutionary"  # or "replay-trace" (no search: fast, for smoke runs)
    builder_timeout: int = 180
    progress: bool = True


_INTRIN = "tvm.s_tir.tensor_intrin"


def _light_tensor_intrin(target_kind: str) -> bool:
    """Register only the CPU tensor intrinsics (see module docstring).

    Returns True when a stand-in package was put in ``sys.modules``; the caller
    removes it after tuning (``_drop_stand_in``) so a later ``import`` of the real
    package still registers the GPU intrinsics (the CPU submodules stay imported).
    """
    name = _INTRIN
    if target_kind != "llvm" or name in sys.modules:
        return False
    spec = importlib.util.find_spec(name)
    if spec is None or spec.submodule_search_locations is None:
        return False
    pkg = types.ModuleType(name)
    pkg.__path__ = list(spec.submodule_search_locations)
    pkg.__spec__ = spec
    pkg.__file__ = spec.origin
    pkg._edged_stand_in = True  # type: ignore[attr-defined]
    sys.modules[name] = pkg
    try:
        importlib.import_module(name + ".x86")
        importlib.import_module(name + ".arm_cpu")
    except Exception:  # fall back to the real package
        for k in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            del sys.modules[k]
        return False
    return True


def _drop_stand_in() -> None:
    if getattr(sys.modules.get(_INTRIN), "_edged_stand_in", False):
        del sys.modules[_INTRIN]


def _cpu_build_function() -> Any:
    """A LocalBuilder build function that skips the 25 s intrinsic import.

    Returned as a closure so cloudpickle ships it by value to the builder workers,
    which need not be able to import edged.
    """

    def build(mod: Any, target: Any, _params: Any) -> Any:
        from tvm.driver import build as tvm_build
        from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

        mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
        return tvm_build(mod, target=target)

    return build


def _progress_callback(total: int, label: str, enabled: bool) -> Any:
    from tqdm import tqdm
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

    bar = tqdm(total=total, desc=f"tvm: tuning {label}", unit="trial", disable=not enabled)

    @derived_object
    class Progress(PyMeasureCallback):
        def apply(self, task_scheduler: Any, task_id: int, measure_candidates: Any,
                  builder_results: Any, runner_results: Any) -> None:
            bar.update(min(len(measure_candidates), max(0, bar.total - bar.n)))

    return Progress(), bar


def open_database(db_dir: Path) -> Any:
    from tvm.s_tir import meta_schedule as ms

    db_dir.mkdir(parents=True, exist_ok=True)
    return ms.database.JSONDatabase(work_dir=str(db_dir))


def tune(mod: Any, target: Any, db_dir: Path, s: TuneSettings, label: str) -> tuple[Any, dict]:
    """Tune the tasks of fused ``mod`` that ``db_dir`` has no record for."""
    stand_in = _light_tensor_intrin(target.kind.name)
    try:
        return _tune(mod, target, db_dir, s, label)
    finally:
        if stand_in:
            _drop_stand_in()


def _tune(mod: Any, target: Any, db_dir: Path, s: TuneSettings, label: str) -> tuple[Any, dict]:
    from tvm.s_tir import meta_schedule as ms

    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    db = open_database(db_dir)
    tasks = ms.relax_integration.extract_tasks(mod, target)
    todo = [t for t in tasks
            if db.query_tuning_record(t.dispatched[0], target, t.task_name) is None]
    summary: dict[str, Any] = {
        "database": str(db_dir), "tasks": len(tasks), "tasks_tuned": len(todo),
        "tasks_reused": len(tasks) - len(todo), "trials": 0,
        "cost_model": s.cost_model, "strategy": s.strategy,
    }
    if not todo:
        return db, summary
    per_task = s.trials_per_task or max(1, s.trials // len(todo))
    budget = min(s.trials, per_task * len(todo))
    ctxs, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
        todo, work_dir=str(db_dir), strategy=s.strategy)
    builder = ms.builder.LocalBuilder(
        timeout_sec=s.builder_timeout,
        f_build=_cpu_build_function() if target.kind.name == "llvm" else None,
    )
    cb, bar = _progress_callback(budget, label, s.progress)
    try:
        ms.tune.tune_tasks(
            tasks=ctxs, task_weights=weights, work_dir=str(db_dir),
            max_trials_global=budget, max_trials_per_task=per_task,
            num_trials_per_iter=min(s.per_iter, per_task), builder=builder,
            database=db, cost_model=s.cost_model,
            measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), cb],
        )
    finally:
        bar.close()
    summary["trials"] = budget
    summary["tasks_tuned"] = sum(
        db.query_tuning_record(t.dispatched[0], target, t.task_name) is not None for t in todo)
    return db, summary
