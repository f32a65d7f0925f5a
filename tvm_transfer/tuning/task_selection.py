"""FLOPs-aware task selection for network tuning (after Verma et al., ExHET 2023): a pure policy, which
decides what to tune and for how many trials; :mod:`tvm_transfer.tuning.network` does the tuning.

A network's tasks differ in work by orders of magnitude: in ``bert_tiny_layer`` four matmuls carry most of
the FLOPs while a dozen reshapes, transposes and slices carry none. MetaSchedule's gradient task scheduler
first spends one batch on *every* task (its warm-up), so a small budget is mostly spent on tasks that do not
matter. Here tasks are ranked by ``weight x FLOPs`` (weight = how often the fused function is called), the
smallest prefix carrying ``flops_share`` of the network's work is selected (optionally capped at
``top_tasks``), and the trial budget is split between the selected tasks in proportion to their work, with a
floor of one measurement batch each. Tasks left out are given schedules transferred from similar tuned
tasks (:mod:`tvm_transfer.tuning.schedule_transfer`) or keep TVM's default lowering.

The ranking is the rule :func:`tenset_tools.prune.prune` uses to prune datasets
(:func:`tenset_tools.prune.covering_tasks`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tenset_tools.flops import estimate_flops
from tenset_tools.prune import covering_tasks

if TYPE_CHECKING:
    from tvm.s_tir import meta_schedule as ms

__all__ = [
    "TaskSelection",
    "TaskWork",
    "allocate_trials",
    "heaviest_first",
    "plan_budget",
    "select_tasks",
    "task_work",
]


@dataclass(frozen=True)
class TaskSelection:
    """Which tasks of a network get tuning trials, and whether the others get transferred schedules.

    Parameters
    ----------
    flops_share:
        Select the smallest set of tasks (largest ``weight x FLOPs`` first) whose work covers this fraction
        of the network's work, in (0, 1]. 0.9 is the coverage the ExHET paper's pruning keeps (and
        :func:`tenset_tools.prune.prune`'s default): on ``bert_tiny_layer`` it selects the 4 big matmul
        tasks and leaves the rest of the FLOPs to transferred or default schedules.
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
    """One task of a network and its work: ``flops`` per call (FLOPs; ``nan`` when TVM cannot estimate
    them), ``weight`` = calls per inference, ``work = weight x flops`` (0 when the FLOPs are unknown) and
    ``share`` = its fraction of the network's total work."""

    index: int
    name: str
    weight: float
    flops: float
    work: float
    share: float


def task_work(tasks: Sequence[ms.ExtractedTask]) -> list[TaskWork]:
    """``TaskWork`` of each extracted task, in the input order. FLOPs come from
    :func:`tenset_tools.flops.estimate_flops`; a task whose FLOPs TVM cannot estimate (``nan``) counts as
    no work, so it is never selected for tuning."""
    flops = [estimate_flops(t.dispatched[0]) for t in tasks]
    work = [float(t.weight) * f if np.isfinite(f) else 0.0 for t, f in zip(tasks, flops, strict=True)]
    total = sum(work)
    return [
        TaskWork(i, t.task_name, float(t.weight), f, w, w / total if total > 0 else 1.0 / len(tasks))
        for i, (t, f, w) in enumerate(zip(tasks, flops, work, strict=True))
    ]


def heaviest_first(works: Sequence[TaskWork]) -> list[int]:
    """The tasks' indices by ``work``, heaviest first; tasks of equal work (those without any among them)
    keep their input order."""
    return [w.index for w in sorted(works, key=lambda w: -w.work)]


def select_tasks(works: Sequence[TaskWork], selection: TaskSelection) -> list[TaskWork]:
    """The selected tasks, heaviest first: the shortest prefix of the ranking by work whose cumulative
    share reaches ``selection.flops_share`` (ties keep input order), capped at ``selection.top_tasks``.
    Tasks without work are never selected unless the whole network has none."""
    kept, _ = covering_tasks([w.work for w in works], selection.flops_share)
    chosen = [works[i] for i in kept]
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
