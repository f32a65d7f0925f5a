"""Tuning one operator (a :class:`~tvm_transfer.workloads.Workload`) and reading back its best schedule."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm.s_tir import meta_schedule as ms

from tvm_transfer.builder import import_tensor_intrin_fast
from tvm_transfer.target import as_target
from tvm_transfer.tuning.plan import TuningPlan
from tvm_transfer.tuning.session import (
    ContextsTuning,
    TuneOptions,
    best_seconds,
    evolution,
    meta_schedule_log_level,
    records_of,
    search_threads,
    skip_measured,
    tune_contexts,
)
from tvm_transfer.tuning.workdir import WorkDir, open_database
from tvm_transfer.workloads import Workload


@dataclass
class TuneResult:
    """Outcome of a tuning run. Times in seconds; ``curve[i]`` is the best latency after trial ``i + 1``
    of this run (``inf`` until the first success)."""

    name: str
    target: str
    cost_model: str
    flops: float
    trials: int
    new_trials: int
    best_seconds: float
    tuning_seconds: float
    curve: list[float] = field(default_factory=list)
    profile: dict[str, float] = field(default_factory=dict)
    reference_seconds: float | None = None
    # The transfer pack holding a record of the operator measured on this target, applied with 0 trials
    # and tuned on from when trials > 0 (None: tuned here from scratch).
    from_pack: str | None = None

    @property
    def gflops(self) -> float:
        """Throughput of the best schedule, in GFLOP/s (0 when nothing was measured successfully)."""
        return self.flops / self.best_seconds / 1e9 if np.isfinite(self.best_seconds) else 0.0

    def table(self) -> str:
        """A plain-text result table."""
        rows = [
            ("workload", self.name),
            ("target", self.target),
            ("cost model", self.cost_model),
            ("trials (this run / total)", f"{self.new_trials} / {self.trials}"),
            ("best latency", f"{self.best_seconds * 1e3:.4f} ms"),
            ("throughput", f"{self.gflops:.1f} GFLOPS"),
            ("tuning time (this run)", f"{self.tuning_seconds:.1f} s"),
        ]
        if self.from_pack:
            how = "tuned on from the record of" if self.trials else "from"
            rows.append(("schedule", f"{how} transfer pack {self.from_pack} (measured on this target)"))
        if self.reference_seconds:
            ref_gflops = self.flops / self.reference_seconds / 1e9
            rows.append(
                ("PyTorch reference", f"{self.reference_seconds * 1e3:.4f} ms ({ref_gflops:.1f} GFLOPS)")
            )
            rows.append(("TVM speed / PyTorch", f"{self.reference_seconds / self.best_seconds:.2f}x"))
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


@meta_schedule_log_level()
def tune_workload(
    workload: Workload,
    work_dir: str | os.PathLike,
    *,
    target: tvm.target.Target | dict | None = None,
    options: TuneOptions | None = None,
    plan: TuningPlan | None = None,
    reference: bool = True,
) -> TuneResult:
    """Tune one operator with MetaSchedule as ``plan`` says (default: our XGBoost model, evolutionary
    search); a program already measured in ``work_dir`` is not measured again.

    ``reference`` also times the same operator in PyTorch on this machine for comparison. When the plan's
    transfer pack holds the operator measured on ``target``'s id, its best record is committed to the work
    dir; nothing is measured unless the plan's ``refine_from_pack`` and ``options.trials`` exceeds what the
    pack's corpus measured of the operator or an earlier run tuned on from it already
    (:meth:`~tvm_transfer.tuning.plan.PackSchedules.worth_refining`); then tuning goes on from that record,
    which counts as no trial. Raises :class:`~tvm_transfer.tuning.workdir.WorkDirMismatchError` (a
    ``ValueError``) when ``work_dir`` holds records measured for another target.
    """
    options = options or TuneOptions()
    plan = plan or TuningPlan()
    target = as_target(target)
    work_dir = work_dir if isinstance(work_dir, WorkDir) else WorkDir(work_dir)
    work_dir.check_target(target)
    import_tensor_intrin_fast()  # TuneContext imports it, slowly unless done this way
    mod = workload.ir_module()
    applied, tune_on = _apply_pack(workload, mod, work_dir, target, plan, options.trials)
    tuning = ContextsTuning([], {}, 0.0)
    if not applied or tune_on:
        context = _tune_context(workload.name, mod, work_dir, target, options, plan.search_strategy)
        tuning = tune_contexts(
            [context], [1.0], work_dir.path, plan.cost_model, options, unmeasured=int(applied)
        )
    records = records_of(work_dir.database(), mod)
    return TuneResult(
        name=workload.name,
        target=str(target),
        cost_model=plan.cost_model_name,
        flops=workload.flops,
        trials=len(records) - int(applied),
        new_trials=len(tuning.latencies),
        best_seconds=best_seconds(records),
        tuning_seconds=tuning.seconds,
        curve=list(np.minimum.accumulate(tuning.latencies)) if tuning.latencies else [],
        profile=tuning.profile,
        reference_seconds=workload.reference_seconds() if reference else None,
        from_pack=plan.pack_schedules.describe() if applied else None,
    )


def _tune_context(
    name: str,
    mod: tvm.IRModule,
    work_dir: WorkDir,
    target: tvm.target.Target,
    options: TuneOptions,
    search_strategy: ms.search_strategy.SearchStrategy | None,
) -> ms.TuneContext:
    """The tuning context of operator ``name``: ``search_strategy`` (default: the run's evolutionary search)
    skipping what ``work_dir`` measured, logging to the work dir."""
    return ms.TuneContext(
        mod=mod,
        target=target,
        space_generator="post-order-apply",
        search_strategy=skip_measured(search_strategy or evolution(options)),
        task_name=name,
        rand_state=ms.utils.fork_seed(options.seed, 1)[0],
        num_threads=search_threads(options),
        logger=ms.logging.get_loggers_from_work_dir(str(work_dir), [name])[0],
    )


def _apply_pack(
    workload: Workload,
    mod: tvm.IRModule,
    work_dir: WorkDir,
    target: tvm.target.Target,
    plan: TuningPlan,
    trials: int,
) -> tuple[bool, bool]:
    """Apply the plan's pack's record of ``workload`` on ``target`` to ``work_dir``: whether the work dir
    holds one now, and whether a run of ``trials`` trials tunes on from it: when the plan refines exact
    matches and the pack measured the operator fewer times, or an earlier run tuned on from it already."""
    pack = plan.pack_schedules
    if pack is None:
        return False, False
    pairs = [(workload.name, mod)]
    applied = pack.apply(pairs, target, work_dir)
    if not applied or not (plan.refine_from_pack and trials):
        return bool(applied), False
    records = [records_of(work_dir.database(), mod)]
    return True, bool(pack.worth_refining(pairs, applied, trials, records))


def best_schedule(
    workload: Workload, work_dir: str | os.PathLike, target: tvm.target.Target | dict | None = None
) -> tvm.s_tir.Schedule | None:
    """The best tuned schedule of ``workload`` in ``work_dir``'s database (``None`` if never measured)."""
    mod = workload.ir_module()
    return open_database(work_dir).query_schedule(mod, as_target(target), workload.name)
