"""Tuning one operator (a :class:`~tvm_transfer.workloads.Workload`) and reading back its best schedule."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import tvm
from tvm.s_tir import meta_schedule as ms

from tvm_transfer.builder import import_tensor_intrin_fast
from tvm_transfer.target import as_target
from tvm_transfer.tuning.session import (
    ContextsTuning,
    TuneOptions,
    best_seconds,
    cost_model_name,
    evolutionary_search,
    meta_schedule_log_level,
    open_database,
    records_of,
    search_threads,
    skip_measured,
    tune_contexts,
)
from tvm_transfer.tuning.workdir import check_work_dir_target
from tvm_transfer.workloads import Workload

if TYPE_CHECKING:
    from tvm_transfer.transfer.pack import TransferPack


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
    work_dir: str | Path,
    *,
    cost_model: str | ms.CostModel = "xgboost",
    target: tvm.target.Target | dict | None = None,
    options: TuneOptions | None = None,
    reference: bool = True,
    search_strategy: ms.search_strategy.SearchStrategy | None = None,
    transfer_pack: TransferPack | None = None,
    refine_from_pack: bool = True,
) -> TuneResult:
    """Tune one operator with MetaSchedule and the given cost model (a name of ``COST_MODELS`` or an object).

    ``reference`` also times the same operator in PyTorch on this machine for comparison.
    ``search_strategy`` replaces the default evolutionary search (e.g. a copula-seeded
    ``tvm_transfer.search_strategy.copula.CopulaSearch``); either way a program already measured in
    ``work_dir`` is not measured again. When ``transfer_pack`` holds the operator measured on
    ``target``'s id, its best record is committed to the work dir; nothing is measured unless
    ``refine_from_pack`` and ``options.trials`` exceeds what the pack's corpus measured of the operator
    (:func:`~tvm_transfer.transfer.apply.worth_refining`) or an earlier run tuned on from it already; then
    tuning goes on from that record, which counts as no trial. Raises ``ValueError`` when ``work_dir``
    holds records measured for another target (:func:`~tvm_transfer.tuning.workdir.check_work_dir_target`).
    """
    options = options or TuneOptions()
    target = as_target(target)
    check_work_dir_target(work_dir, target)
    import_tensor_intrin_fast()  # TuneContext imports it, slowly unless done this way
    mod = workload.ir_module()
    applied, tune_on = _apply_pack(
        workload, mod, Path(work_dir), target, transfer_pack, options.trials if refine_from_pack else 0
    )
    run = ContextsTuning([], {}, 0.0)
    if not applied or tune_on:
        context = _tune_context(workload.name, mod, Path(work_dir), target, options, search_strategy)
        run = tune_contexts([context], [1.0], Path(work_dir), cost_model, options, unmeasured=int(applied))
    records = records_of(open_database(Path(work_dir)), mod)
    return TuneResult(
        name=workload.name,
        target=str(target),
        cost_model=cost_model_name(cost_model),
        flops=workload.flops,
        trials=len(records) - int(applied),
        new_trials=len(run.latencies),
        best_seconds=best_seconds(records),
        tuning_seconds=run.seconds,
        curve=list(np.minimum.accumulate(run.latencies)) if run.latencies else [],
        profile=run.profile,
        reference_seconds=workload.reference_seconds() if reference else None,
        from_pack=str(transfer_pack.path) if applied else None,
    )


def _tune_context(
    name: str,
    mod: tvm.IRModule,
    work_dir: Path,
    target: tvm.target.Target,
    options: TuneOptions,
    search_strategy: ms.search_strategy.SearchStrategy | None,
) -> ms.TuneContext:
    """The tuning context of operator ``name``: ``search_strategy`` skipping what ``work_dir`` measured, or
    the run's evolutionary search, logging to the work dir."""
    return ms.TuneContext(
        mod=mod,
        target=target,
        space_generator="post-order-apply",
        search_strategy=skip_measured(search_strategy) if search_strategy else evolutionary_search(options),
        task_name=name,
        rand_state=ms.utils.fork_seed(options.seed, 1)[0],
        num_threads=search_threads(options),
        logger=ms.logging.get_loggers_from_work_dir(str(work_dir), [name])[0],
    )


def _apply_pack(
    workload: Workload,
    mod: tvm.IRModule,
    work_dir: Path,
    target: tvm.target.Target,
    pack: TransferPack | None,
    trials: int,
) -> tuple[bool, bool]:
    """Apply ``pack``'s record of ``workload`` on ``target`` to ``work_dir``: whether the work dir holds
    one now, and whether a run of ``trials`` trials tunes on from it (0: never): when the pack measured
    the operator fewer times, or an earlier run tuned on from it already."""
    if pack is None:
        return False, False
    from tvm_transfer.transfer.apply import apply_pack, worth_refining

    pairs = [(workload.name, mod)]
    applied = apply_pack(pack, pairs, target, work_dir)
    if not applied or not trials:
        return bool(applied), False
    records = [records_of(open_database(work_dir), mod)]
    return True, bool(worth_refining(pack, pairs, applied, trials, records))


def best_schedule(
    workload: Workload, work_dir: str | Path, target: tvm.target.Target | dict | None = None
) -> tvm.s_tir.Schedule | None:
    """The best tuned schedule of ``workload`` in ``work_dir``'s database (``None`` if never measured)."""
    mod = workload.ir_module()
    return open_database(Path(work_dir)).query_schedule(mod, as_target(target), workload.name)
