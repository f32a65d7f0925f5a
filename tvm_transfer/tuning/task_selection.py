"""FLOPs-aware task selection for network tuning (after Verma et al., ExHET 2023).

A network's tasks differ in work by orders of magnitude: in ``bert_tiny_layer`` four matmuls carry ~84% of
the FLOPs while a dozen reshapes, transposes and slices carry none. MetaSchedule's gradient task scheduler
first spends one batch on *every* task (its warm-up), so a small budget is mostly spent on tasks that do not
matter. Here tasks are ranked by ``weight x FLOPs`` (weight = how often the fused function is called), the
smallest prefix carrying ``flops_share`` of the network's work is selected (optionally capped at
``top_tasks``), and the trial budget is split between the selected tasks in proportion to their work, with a
floor of one measurement batch each. Tasks left out are given schedules transferred from similar tuned
tasks (:mod:`tvm_transfer.tuning.schedule_transfer`) or keep TVM's default lowering.

The ranking is the same notion of work that :func:`tenset_tools.prune.prune` uses to prune datasets.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import tvm

__all__ = ["TaskSelection", "TaskWork", "allocate_trials", "select_tasks", "task_work"]


@dataclass(frozen=True)
class TaskSelection:
    """Which tasks of a network get tuning trials, and whether the others get transferred schedules.

    Parameters
    ----------
    flops_share:
        Select the smallest set of tasks (largest ``weight x FLOPs`` first) whose work covers this fraction
        of the network's work, in (0, 1]. 0.9 is the coverage the ExHET paper's pruning keeps (and
        :func:`tenset_tools.prune.prune`'s default): on ``bert_tiny_layer`` it selects the 4 big matmul
        tasks out of 17 and leaves ~8% of the FLOPs to transferred or default schedules.
    top_tasks:
        Select at most this many tasks (``None``: no cap). With ``flops_share=1.0`` this is a pure top-N.
    min_trials:
        Floor of each selected task's budget, in trials; ``None`` means one measurement batch
        (``TuneOptions.trials_per_iter``), since a batch is the smallest unit MetaSchedule measures in.
        When the budget cannot give every selected task its floor, the lightest selected tasks are dropped.
    transfer:
        Replay the best schedules of tuned tasks on similar untuned tasks (see
        :func:`tvm_transfer.tuning.schedule_transfer.transfer_schedules`).
    transfer_candidates:
        How many of a source task's best records are tried on each untuned task.
    """

    flops_share: float = 0.9
    top_tasks: int | None = None
    min_trials: int | None = None
    transfer: bool = True
    transfer_candidates: int = 3

    def __post_init__(self) -> None:
        if not 0.0 < self.flops_share <= 1.0:
            raise ValueError(f"flops_share must be in (0, 1], got {self.flops_share}")
        if self.top_tasks is not None and self.top_tasks < 1:
            raise ValueError(f"top_tasks must be at least 1, got {self.top_tasks}")
        if self.min_trials is not None and self.min_trials < 1:
            raise ValueError(f"min_trials must be at least 1, got {self.min_trials}")
        if self.transfer_candidates < 1:
            raise ValueError(f"transfer_candidates must be at least 1, got {self.transfer_candidates}")


@dataclass(frozen=True)
class TaskWork:
    """One task of a network and its work: ``flops`` per call (FLOPs), ``weight`` = calls per inference,
    ``work = weight x flops`` and ``share`` = its fraction of the network's total work."""

    index: int
    name: str
    weight: float
    flops: float
    work: float
    share: float


def task_flops(task) -> float:
    """FLOPs of one call of an extracted task (TVM's estimate on the dispatched PrimFunc; 0 for pure data
    movement such as reshapes)."""
    return float(tvm.s_tir.analysis.estimate_tir_flops(task.dispatched[0]))


def task_work(tasks: Sequence) -> list[TaskWork]:
    """``TaskWork`` of each extracted task (``ExtractedTask``: task_name, weight, dispatched), in the
    input order."""
    flops = [task_flops(t) for t in tasks]
    work = [float(t.weight) * f for t, f in zip(tasks, flops, strict=True)]
    total = sum(work)
    return [
        TaskWork(i, t.task_name, float(t.weight), f, w, w / total if total > 0 else 1.0 / len(tasks))
        for i, (t, f, w) in enumerate(zip(tasks, flops, work, strict=True))
    ]


def select_tasks(works: Sequence[TaskWork], selection: TaskSelection) -> list[TaskWork]:
    """The selected tasks, heaviest first: the shortest prefix of the ranking by work whose cumulative
    share reaches ``selection.flops_share`` (ties keep input order), capped at ``selection.top_tasks``.
    Tasks without work are never selected unless the whole network has none."""
    if not works:
        return []
    ranked = sorted(works, key=lambda w: -w.work)  # sorted() is stable: ties keep extraction order
    if ranked[0].work <= 0:
        chosen = ranked
    else:
        cumulative = np.cumsum([w.share for w in ranked])
        n_keep = int(np.searchsorted(cumulative, selection.flops_share - 1e-12) + 1)
        chosen = [w for w in ranked[: min(n_keep, len(ranked))] if w.work > 0]
    if selection.top_tasks is not None:
        chosen = chosen[: selection.top_tasks]
    return chosen


def allocate_trials(work: Sequence[float], total: int, floor: int) -> list[int]:
    """Split ``total`` trials over tasks in proportion to ``work``, each getting at least ``floor``.

    Water-filling: tasks whose proportional share is below the floor get the floor and the rest is shared
    again among the others; the real-valued shares are then rounded by largest remainder so that the
    result sums to ``total`` exactly. Raises ``ValueError`` when ``total < floor x len(work)``.
    """
    n = len(work)
    if n == 0:
        return []
    if floor < 0 or total < floor * n:
        raise ValueError(f"a budget of {total} trials cannot give {n} tasks {floor} trials each")
    weights = np.maximum(np.asarray(work, dtype=np.float64), 0.0)
    if weights.sum() <= 0:
        weights = np.ones(n)
    shares = np.zeros(n)
    floored = np.zeros(n, dtype=bool)
    while True:
        free = ~floored
        budget = total - floor * floored.sum()
        shares[free] = (
            budget * weights[free] / weights[free].sum() if weights[free].sum() > 0 else budget / free.sum()
        )
        shares[floored] = floor
        below = free & (shares < floor)
        if not below.any():
            break
        floored |= below
    whole = np.floor(shares).astype(int)
    remainder = total - int(whole.sum())
    # Largest remainder first; ties go to the heavier task, then to the earlier one.
    order = sorted(range(n), key=lambda i: (-(shares[i] - whole[i]), -weights[i], i))
    for i in order[:remainder]:
        whole[i] += 1
    return [int(x) for x in whole]


def plan_budget(
    works: Sequence[TaskWork], selection: TaskSelection, total: int, batch: int
) -> tuple[list[TaskWork], list[int]]:
    """The selected tasks and their trial budgets under ``total`` trials: the floor is
    ``selection.min_trials`` or one ``batch``; selected tasks that the budget cannot floor are dropped,
    lightest first (they become transfer candidates)."""
    floor = selection.min_trials or batch
    chosen = select_tasks(works, selection)
    affordable = max(total // floor, 1) if total > 0 else 0
    chosen = chosen[:affordable]
    if not chosen:
        return [], []
    floor = min(floor, math.floor(total / len(chosen)))
    return chosen, allocate_trials([w.work for w in chosen], total, floor)


def tune_selected(
    name: str,
    extracted: Sequence,
    work_dir,
    *,
    cost_model,
    target: tvm.target.Target,
    options,
    selection: TaskSelection,
    search_strategy,
    measure=None,
):
    """Tune the tasks chosen by ``selection`` one after another, each for its share of
    ``options.trials`` (records already in ``work_dir`` count against each task's share), with one cost
    model shared by all tasks; then transfer schedules to the other tasks. Returns a
    :class:`tvm_transfer.tuning.session.NetworkTuneResult` whose ``status`` says per task ``tuned``,
    ``transferred-from-<task>`` or ``default``. ``search_strategy``: each task tunes a clone of it.
    Called by :func:`tvm_transfer.tuning.session.tune_network`."""
    import dataclasses
    import time
    from pathlib import Path

    from tqdm.auto import tqdm
    from tvm.s_tir import meta_schedule as ms

    from tvm_transfer.builder import PersistentBuilder
    from tvm_transfer.cost_model import make_cost_model
    from tvm_transfer.runner import local_runner
    from tvm_transfer.tuning.schedule_transfer import transfer_schedules
    from tvm_transfer.tuning.session import (
        Measurement,
        NetworkTuneResult,
        _best_seconds,
        _database,
        _num_threads,
        _records_of,
        _tune_contexts,
        meta_schedule_log_level,
    )

    work_dir = Path(work_dir)
    works = task_work(extracted)
    chosen, budgets = plan_budget(works, selection, options.trials, options.trials_per_iter)
    measure = measure or Measurement()
    builder = measure.builder or PersistentBuilder()
    cores = int(target.attrs.get("num-cores", 0)) or None
    runner = measure.runner or local_runner(num_threads=cores)
    model = make_cost_model(cost_model, seed=options.seed) if isinstance(cost_model, str) else cost_model
    bar = measure.progress_bar or tqdm(
        total=options.trials, unit="trial", disable=not options.progress, desc="tuning"
    )
    shared = Measurement(builder=builder, runner=runner, progress_bar=bar)
    start = time.perf_counter()
    new_trials, profile = 0, {}
    tune_seconds = transfer_seconds = 0.0
    outcomes = []
    try:
        for rank, (work, budget) in enumerate(zip(chosen, budgets, strict=True)):
            # MetaSchedule's logger set-up runs once per task here: each gets the caller's level.
            with meta_schedule_log_level():
                contexts, _ = ms.relax_integration.extracted_tasks_to_tune_contexts(
                    [extracted[work.index]], str(work_dir), strategy=search_strategy,
                    num_threads=_num_threads(options), seed=options.seed + rank,
                )  # fmt: skip
                if not contexts:  # an already scheduled function: MetaSchedule skips it, so do we
                    continue
                latencies, task_profile, _, _, _ = _tune_contexts(
                    list(contexts),
                    [work.weight],
                    work_dir,
                    model,
                    dataclasses.replace(options, trials=budget),
                    shared,
                )
                new_trials += len(latencies)
                for key, seconds in task_profile.items():
                    profile[key] = profile.get(key, 0.0) + seconds
        tune_seconds = time.perf_counter() - start
        database = _database(work_dir)
        records = [_records_of(database, task.dispatched[0]) for task in extracted]
        tuned = [i for i, r in enumerate(records) if np.isfinite(_best_seconds(r))]
        untuned = [i for i in range(len(extracted)) if i not in tuned]
        if selection.transfer and tuned and untuned:
            outcomes = transfer_schedules(
                [extracted[i] for i in untuned], [extracted[i] for i in tuned], database, target,
                candidates=selection.transfer_candidates, builder=builder, runner=runner, seed=options.seed,
            )  # fmt: skip
        transfer_seconds = time.perf_counter() - start - tune_seconds
    finally:
        if measure.builder is None:
            builder.shutdown()
        if measure.progress_bar is None:
            bar.close()
    by_name = {o.task: o for o in outcomes}
    status, tasks = [], []
    for task, task_records in zip(extracted, records, strict=True):
        best = _best_seconds(task_records)
        outcome = by_name.get(task.task_name)
        if outcome is not None and outcome.status == "transferred":
            label, best = outcome.label, outcome.seconds
        elif np.isfinite(best):
            label = "tuned"
        else:
            label = "default"
        status.append(label)
        tasks.append((task.task_name, float(task.weight), task_flops(task), best, len(task_records)))
    chosen_names = {w.name for w in chosen}
    return NetworkTuneResult(
        name=name,
        target=str(target),
        cost_model=cost_model if isinstance(cost_model, str) else type(cost_model).__name__,
        tasks=tasks,
        new_trials=new_trials,
        tuning_seconds=time.perf_counter() - start,
        profile=profile,
        status=status,
        selection={
            "flops_share": selection.flops_share,
            "top_tasks": selection.top_tasks,
            "selected": [w.name for w in chosen],
            "budgets": dict(zip([w.name for w in chosen], budgets, strict=True)),
            "selected_share": float(sum(w.share for w in chosen)),
            "tune_seconds": tune_seconds,
            "transfer_seconds": transfer_seconds,
            "transfers": [dataclasses.asdict(o) for o in outcomes],
            "unselected": [w.name for w in works if w.name not in chosen_names],
        },
    )
