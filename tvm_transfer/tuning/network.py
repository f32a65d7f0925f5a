"""Tuning a network (any model :func:`tvm_transfer.networks.load_model` resolves): its MetaSchedule tasks,
tuned together by the gradient task scheduler, or only the tasks a
:class:`~tvm_transfer.tuning.task_selection.TaskSelection` picks (each for its own budget) with schedules
transferred to the others. Every measured batch is logged per task (:mod:`~tvm_transfer.tuning.rounds`)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import tvm
from tqdm.auto import tqdm
from tvm.s_tir import meta_schedule as ms

from tvm_transfer.builder import import_tensor_intrin_fast
from tvm_transfer.runner import measuring_workers
from tvm_transfer.tuning.rounds import ROUNDS_FILE, RoundLog, read_rounds
from tvm_transfer.tuning.run import NetworkRun, RunConfig
from tvm_transfer.tuning.schedule_transfer import TransferOutcome, transfer_schedules
from tvm_transfer.tuning.session import (
    ContextsTuning,
    Measurement,
    TuneOptions,
    best_seconds,
    evolution,
    meta_schedule_log_level,
    records_of,
    resolve_cost_model,
    search_threads,
    skip_measured,
    tune_contexts,
)
from tvm_transfer.tuning.task_selection import (
    TaskSelection,
    TaskWork,
    heaviest_first,
    plan_budget,
    task_work,
)
from tvm_transfer.tuning.workdir import WorkDir

#: One task of a result: (name, weight, FLOPs per call, best seconds, trials).
TaskRow = tuple[str, float, float, float, int]


@dataclass
class NetworkTuneResult:
    """Outcome of tuning a network's tasks: per task ``(name, weight, FLOPs, best seconds, trials)``."""

    name: str
    target: str
    cost_model: str
    tasks: list[TaskRow]
    new_trials: int
    tuning_seconds: float
    profile: dict[str, float] = field(default_factory=dict)
    # With a TaskSelection: per task "tuned", "transferred-from-<task>" or "default", and the plan
    # (selected tasks, budgets, transfer outcomes); see tvm_transfer.tuning.task_selection.
    status: list[str] = field(default_factory=list)
    selection: dict = field(default_factory=dict)
    # The round log of the work dir (tvm_transfer.tuning.rounds): per batch, every task's best so far.
    rounds: list[dict] = field(default_factory=list)
    # Tasks whose schedule came from a transfer pack (measured on this target), with 0 trials, and those
    # of them the run tuned on from it (the budget per task exceeded what the pack measured of them).
    from_pack: list[str] = field(default_factory=list)
    refined: list[str] = field(default_factory=list)

    @property
    def weighted_latency(self) -> float:
        """Sum over tasks of weight x best latency, in seconds (the network's tuned operator time)."""
        return sum(weight * best for _, weight, _, best, _ in self.tasks)

    def table(self) -> str:
        """A plain-text table of the tasks and the weighted latency."""
        header = (
            f"{'task':<50} {'weight':>6} {'MFLOP':>9} {'FLOPs%':>6} {'best ms':>9} {'GFLOPS':>8} "
            f"{'trials':>6}"
        )
        lines = [header + ("  status" if self.status else "")]
        total = sum(w * f for _, w, f, _, _ in self.tasks if np.isfinite(f)) or 1.0
        for i, (task, weight, flops, best, trials) in enumerate(self.tasks):
            gflops = flops / best / 1e9 if np.isfinite(best) else 0.0
            share = 100 * weight * flops / total
            row = (
                f"{task[:50]:<50} {weight:>6g} {flops / 1e6:>9.2f} {share:>6.1f} {best * 1e3:>9.4f} "
                f"{gflops:>8.1f}"
            )
            lines.append(f"{row} {trials:>6}" + (f"  {self.status[i]}" if self.status else ""))
        latency = f"{self.weighted_latency * 1e3:.4f} ms"
        if self.status and not np.isfinite(self.weighted_latency):
            # Tasks on TVM's default lowering were not measured: sum the others only.
            known = sum(w * best for _, w, _, best, _ in self.tasks if np.isfinite(best))
            latency = f"{known * 1e3:.4f} ms over the tuned and transferred tasks"
        lines.append(
            f"{self.name} on {self.target} with {self.cost_model}: weighted latency "
            f"{latency}, {self.new_trials} trials in {self.tuning_seconds:.1f} s"
        )
        if self.from_pack:
            line = f"{len(self.from_pack)} task(s) applied from the transfer pack with 0 trials"
            if self.refined:
                line += f", {len(self.refined)} of them tuned on from there"
            lines.append(line)
        return "\n".join(lines)


@meta_schedule_log_level()
def tune_network(
    run: RunConfig | NetworkRun,
    *,
    selection: TaskSelection | None = None,
    measure: Measurement | None = None,
) -> NetworkTuneResult:
    """Tune the tasks of a network run (a :class:`~tvm_transfer.tuning.run.RunConfig`, prepared here, or a
    :class:`~tvm_transfer.tuning.run.NetworkRun` already prepared); ``options.trials`` is the budget for
    the whole network (measured records already in the work dir count), shared by MetaSchedule's gradient
    task scheduler. ``measure`` supplies a builder, runner, progress bar or extra measure callbacks.

    With ``selection`` only the tasks carrying most of the network's FLOPs are tuned, one after another,
    each for a budget proportional to its weight x FLOPs (records already in the work dir count against
    each task's share), with one cost model shared by all tasks; the other tasks then get schedules
    transferred from similar tuned tasks, and the result's ``status`` says per task ``tuned``,
    ``transferred-from-<task>``, ``from-pack`` or ``default``. ``None`` keeps the gradient scheduler over
    all tasks. The plan's ``search_strategy`` replaces the default evolutionary search; every task tunes
    its own clone (e.g. a :class:`tvm_transfer.search_strategy.copula.CopulaSearch`, which then seeds each
    task from its own source tasks).

    Batches shrink when the trials left would not give every task one batch (:func:`first_round_batch`),
    so that no task is left on TVM's unscheduled lowering while another gets a whole batch. The
    scheduler's first round visits the tasks in extraction order, as MetaSchedule does, or with the plan's
    ``tasks_by_work`` heaviest first (``weight x FLOPs``).

    After every measured batch the best latency of every task is appended to the work dir's round log
    (:mod:`tvm_transfer.tuning.rounds`; the result's ``rounds``), and the progress bar shows the task being
    tuned and the estimated network latency.

    A task the plan's transfer pack applied (measured on the run's target) is tuned on from that record
    only when the plan's ``refine_from_pack`` and the budget per task exceeds what the pack's corpus
    measured of it (:meth:`~tvm_transfer.tuning.plan.PackSchedules.worth_refining`; not with a
    ``selection``), and then after every other task's first batch; otherwise it is not tuned. The pack's
    records count as no trials.

    With the config's ``measure_caches`` ``"cold"`` every run is timed after the CPU caches are flushed
    of the candidate's arguments but its input (:func:`~tvm_transfer.runner.cold_evaluator_config`);
    raises ``ValueError`` for ``cold`` with a runner in ``measure`` (that runner times as it was made)."""
    config = run.config if isinstance(run, NetworkRun) else run
    measure = _measurement(measure or Measurement(), config.measure_caches, config.target)
    run = run if isinstance(run, NetworkRun) else NetworkRun(config)
    options, plan, work_dir = config.options, config.plan, config.work_dir
    work_dir.record_settings(config.settings)  # how this run times candidates, before it measures any
    strategy = skip_measured(plan.search_strategy or evolution(options))
    import_tensor_intrin_fast()
    extracted, applied = run.tasks, run.applied
    if selection is not None:
        result = _tune_selected(run, selection, measure, strategy)
        result.status = ["from-pack" if i in applied else s for i, s in enumerate(result.status)]
        result.from_pack = [extracted[i].task_name for i in sorted(applied)]
        return result
    previous = _records_by_task(work_dir, extracted)
    works = task_work(extracted)
    order = heaviest_first(works) if plan.tasks_by_work else range(len(extracted))
    schedulable = [i for i in order if not extracted[i].mod.attrs.get("tirx.is_scheduled", False)]
    refined = (
        plan.pack_schedules.worth_refining(
            run.task_pairs, applied, options.trials / max(len(schedulable), 1), previous
        )
        if plan.refine_from_pack and applied
        else []
    )
    # Refined tasks last: the scheduler's first round, one batch per task in order, reaches them after
    # every task that has no schedule yet.
    tunable = [i for i in schedulable if i not in applied] + refined
    contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
        [extracted[i] for i in tunable], str(work_dir), strategy=strategy,
        num_threads=search_threads(options), seed=options.seed,
    )  # fmt: skip
    log, bar = _round_log(extracted, previous, work_dir, options, measure, tunable, len(refined))
    logged = dataclasses.replace(
        measure, progress_bar=bar, callbacks=[*measure.callbacks, log.callback(tunable)]
    )
    try:
        batch = first_round_batch(options.trials_per_iter, max(options.trials - log.trials, 0), len(tunable))
        batched = dataclasses.replace(options, trials_per_iter=batch)
        # Every task applied from the pack and none refined: nothing to measure.
        tuning = (
            tune_contexts(
                list(contexts),
                list(weights),
                work_dir,
                plan.cost_model,
                batched,
                logged,
                unmeasured=len(refined),
            )
            if contexts
            else ContextsTuning([], {}, 0.0)
        )
    finally:
        if measure.progress_bar is None:
            bar.close()
    database = work_dir.database()
    return NetworkTuneResult(
        name=config.model.name,
        target=str(config.target),
        cost_model=plan.cost_model_name,
        tasks=[
            _task_row(
                work,
                records_of(database, extracted[work.index].dispatched[0]),
                unmeasured=int(work.index in applied),
            )
            for work in works
        ],
        new_trials=len(tuning.latencies),
        tuning_seconds=tuning.seconds,
        profile=tuning.profile,
        rounds=read_rounds(work_dir),
        from_pack=[extracted[i].task_name for i in sorted(applied)],
        refined=[extracted[i].task_name for i in refined],
    )


def first_round_batch(trials_per_iter: int, remaining: int, tasks: int) -> int:
    """Candidates per batch for ``tasks`` tasks with ``remaining`` trials to measure: ``trials_per_iter``,
    or fewer so that the gradient scheduler's first round, one batch per task, fits in them (at least one
    candidate). A task the first round never reaches keeps TVM's unscheduled lowering, far slower than any
    tuned schedule."""
    return max(1, min(trials_per_iter, remaining // max(tasks, 1)))


def _measurement(measure: Measurement, caches: str, target: tvm.target.Target) -> Measurement:
    """``measure`` with a runner timing with cold caches when ``caches`` is ``cold``."""
    if caches == "warm":
        return measure
    if measure.runner is not None:
        raise ValueError(
            "measure_caches='cold' replaces the default runner: give a runner timing cold instead"
        )
    return dataclasses.replace(measure, runner=measuring_workers(target, cold_caches=True)[1])


def _records_by_task(
    work_dir: WorkDir, extracted: Sequence[ms.ExtractedTask]
) -> list[list[ms.database.TuningRecord]]:
    """Every task's records in the work dir's database (failed ones included)."""
    database = work_dir.database()
    return [records_of(database, task.dispatched[0]) for task in extracted]


def _round_log(
    extracted: list[ms.ExtractedTask],
    previous: Sequence[Sequence[ms.database.TuningRecord]],
    work_dir: WorkDir,
    options: TuneOptions,
    measure: Measurement,
    counted: Sequence[int],
    unmeasured: int,
) -> tuple[RoundLog, tqdm]:
    """The work dir's round log, primed with the records already there (``previous``, per task), and the
    progress bar it annotates (the caller's, else a new one over the trials still to measure). The trials
    done are the records of the ``counted`` tasks (those the run tunes), less ``unmeasured`` of them that
    came from a transfer pack."""
    done = sum(len(previous[i]) for i in counted) - unmeasured
    bar = measure.progress_bar or tqdm(
        total=max(options.trials - done, 0), unit="trial", disable=not options.progress, desc="tuning"
    )
    log = RoundLog(
        work_dir / ROUNDS_FILE,
        [task.task_name for task in extracted],
        [float(task.weight) for task in extracted],
        [best_seconds(r) for r in previous],
        done,
        bar,
    )
    return log, bar


def _task_row(
    work: TaskWork,
    records: Sequence[ms.database.TuningRecord],
    seconds: float | None = None,
    unmeasured: int = 0,
) -> TaskRow:
    """A result row of the task ``work`` describes; ``seconds`` overrides the best latency of its
    ``records``, of which ``unmeasured`` (a transfer pack's) count as no trials."""
    best = best_seconds(records) if seconds is None else seconds
    return (work.name, work.weight, work.flops, best, len(records) - unmeasured)


def _tune_selected(
    run: NetworkRun,
    selection: TaskSelection,
    measure: Measurement,
    search_strategy: ms.search_strategy.SearchStrategy,
) -> NetworkTuneResult:
    """:func:`tune_network` with a ``selection``: tune the planned tasks (not those the run's pack applied,
    which have a schedule from it), then transfer schedules."""
    config, extracted, applied = run.config, run.tasks, set(run.applied)
    options, work_dir, target = config.options, config.work_dir, config.target
    every = task_work(extracted)
    works = [w for w in every if w.index not in applied]
    chosen, budgets = plan_budget(works, selection, options.trials, options.trials_per_iter)
    previous = _records_by_task(work_dir, extracted)
    counted = [i for i in range(len(extracted)) if i not in applied]
    log, bar = _round_log(extracted, previous, work_dir, options, measure, counted, 0)
    model = resolve_cost_model(config.plan.cost_model, options.seed)
    start = time.perf_counter()
    tune_seconds = transfer_seconds = 0.0
    outcomes: list[TransferOutcome] = []
    builder, runner = measuring_workers(target, builder=measure.builder, runner=measure.runner)
    try:
        shared = dataclasses.replace(measure, builder=builder, runner=runner, progress_bar=bar)
        new_trials, profile = _tune_each(
            extracted, chosen, budgets, work_dir, model, options, shared, search_strategy, log
        )
        tune_seconds = time.perf_counter() - start
        database = work_dir.database()
        records = [records_of(database, task.dispatched[0]) for task in extracted]
        if selection.transfer:
            outcomes = _transfer_to_untuned(extracted, records, database, target, selection, shared, options)
        transfer_seconds = time.perf_counter() - start - tune_seconds
    finally:
        if measure.progress_bar is None:
            bar.close()
    status, rows = _status_and_rows(every, records, outcomes, applied)
    return NetworkTuneResult(
        name=config.model.name,
        target=str(target),
        cost_model=config.plan.cost_model_name,
        tasks=rows,
        new_trials=new_trials,
        tuning_seconds=time.perf_counter() - start,
        profile=profile,
        status=status,
        rounds=read_rounds(work_dir),
        selection={
            "flops_share": selection.flops_share,
            "top_tasks": selection.top_tasks,
            "selected": [w.name for w in chosen],
            "budgets": dict(zip([w.name for w in chosen], budgets, strict=True)),
            "selected_share": float(sum(w.share for w in chosen)),
            "tune_seconds": tune_seconds,
            "transfer_seconds": transfer_seconds,
            "transfers": [dataclasses.asdict(o) for o in outcomes],
            "unselected": [w.name for w in works if w.name not in {c.name for c in chosen}],
        },
    )


def _tune_each(
    extracted: list[ms.ExtractedTask],
    chosen: list[TaskWork],
    budgets: list[int],
    work_dir: WorkDir,
    model: ms.CostModel,
    options: TuneOptions,
    measure: Measurement,
    search_strategy: ms.search_strategy.SearchStrategy,
    log: RoundLog,
) -> tuple[int, dict[str, float]]:
    """Tune each chosen task alone for its budget, logging its batches in ``log``; returns the trials
    measured and the summed profile (seconds per MetaSchedule phase)."""
    new_trials, profile = 0, {}
    for rank, (work, budget) in enumerate(zip(chosen, budgets, strict=True)):
        # MetaSchedule's logger set-up runs once per task here: each gets the caller's level.
        with meta_schedule_log_level():
            contexts, _ = ms.relax_integration.extracted_tasks_to_tune_contexts(
                [extracted[work.index]], str(work_dir), strategy=search_strategy,
                num_threads=search_threads(options), seed=options.seed + rank,
            )  # fmt: skip
            if not contexts:  # an already scheduled function: MetaSchedule skips it, so do we
                continue
            run = tune_contexts(
                list(contexts),
                [work.weight],
                work_dir,
                model,
                dataclasses.replace(options, trials=budget),
                dataclasses.replace(measure, callbacks=[*measure.callbacks, log.callback([work.index])]),
            )
            new_trials += len(run.latencies)
            for key, seconds in run.profile.items():
                profile[key] = profile.get(key, 0.0) + seconds
    return new_trials, profile


def _transfer_to_untuned(
    extracted: list[ms.ExtractedTask],
    records: list[list[ms.database.TuningRecord]],
    database: ms.database.Database,
    target: tvm.target.Target,
    selection: TaskSelection,
    measure: Measurement,
    options: TuneOptions,
) -> list[TransferOutcome]:
    """Transfer schedules from the tasks with a successful record to the others (none when either side
    is empty)."""
    tuned = [i for i, r in enumerate(records) if np.isfinite(best_seconds(r))]
    untuned = [i for i in range(len(extracted)) if i not in tuned]
    if not tuned or not untuned:
        return []
    return transfer_schedules(
        [extracted[i] for i in untuned], [extracted[i] for i in tuned], database, target,
        candidates=selection.transfer_candidates, builder=measure.builder, runner=measure.runner,
        seed=options.seed,
    )  # fmt: skip


def _status_and_rows(
    works: list[TaskWork],
    records: list[list[ms.database.TuningRecord]],
    outcomes: list[TransferOutcome],
    applied: set[int],
) -> tuple[list[str], list[TaskRow]]:
    """Per task its status (``tuned``, ``transferred-from-<task>`` or ``default``) and result row; a
    transferred task's best latency is the transferred schedule's; the record a transfer pack applied to a
    task of ``applied`` (indices) counts as no trial."""
    by_name = {o.task: o for o in outcomes}
    status, rows = [], []
    for work, task_records in zip(works, records, strict=True):
        outcome = by_name.get(work.name)
        if outcome is not None and outcome.status == "transferred":
            status.append(outcome.label)
            rows.append(_task_row(work, task_records, outcome.seconds))
            continue
        status.append("tuned" if np.isfinite(best_seconds(task_records)) else "default")
        rows.append(_task_row(work, task_records, unmeasured=int(work.index in applied)))
    return status, rows
