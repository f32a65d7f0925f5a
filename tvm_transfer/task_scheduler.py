"""Task schedulers: which of a run's tasks measures the next batch of candidates.

``"gradient"`` is MetaSchedule's own: one batch per task, in order, then the task whose weighted latency
its batches of *this call* lowered most (a resumed run starts that account afresh). A budget of a few
batches per task thus goes to the tasks nearly evenly, whatever their share of the network's latency.

``"weighted-share"`` (:class:`WeightedShareScheduler`) gives each task without a measurement one batch,
in order, and then every batch to the task whose share of the network's latency per trial spent on it
is largest, counting the records an earlier call measured. It is meant for batches small enough that
the first round leaves most of the budget to share (:func:`first_round_batch`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from tvm_transfer.runner import batch_seconds

__all__ = ["TASK_SCHEDULERS", "WeightedShareScheduler", "first_round_batch", "make_task_scheduler"]

#: Per task scheduler, the share of the trials still to measure that its first round (one batch per task
#: without a measurement) may take; ``"gradient"``'s takes all it needs.
FIRST_ROUND_SHARE = {"gradient": 1.0, "weighted-share": 0.5}

#: The ``task_scheduler`` names :func:`make_task_scheduler` accepts.
TASK_SCHEDULERS = tuple(FIRST_ROUND_SHARE)


@derived_object
class WeightedShareScheduler(ms.task_scheduler.PyTaskScheduler):
    """Every task with no trial gets one batch, in the order given; after that each batch goes to the task
    with the largest ``weight x best latency / trials``.

    ``weight x best latency`` is the task's share of the network's latency; if a task's latency falls by
    a fixed fraction each time its trials double (the usual shape of a tuning curve), one more trial
    gains in proportion to that share over the trials spent, so the largest ratio is the best use of the
    next batch. ``bests`` (seconds, ``inf`` for none) and ``trials`` (failures included) are what each
    task's records held before the call; :meth:`callback`, given to the run's measure callbacks, adds
    each batch measured. A task whose trials all failed counts as slow as the slowest measured task, so
    it is retried without taking every batch.
    """

    def __init__(self, bests: Sequence[float], trials: Sequence[int]) -> None:
        super().__init__()
        if len(bests) != len(trials):
            raise ValueError(f"{len(bests)} best latencies for {len(trials)} trial counts")
        self.bests = [float(b) for b in bests]
        self.trials = [int(t) for t in trials]

    def next_task_id(self) -> int:
        """The task to measure next (``-1`` when every task has terminated); joins its running batch."""
        scheduler = self._outer()
        for index in range(len(scheduler.tasks_)):
            scheduler.touch_task(index)  # joins batches already measured, so their latencies count
        tasks = scheduler.tasks_
        alive = [i for i, task in enumerate(tasks) if not task.is_terminated]
        if not alive:
            return -1
        # `max` keeps the first of equal priorities: unmeasured tasks go in the order given.
        pick = max(alive, key=lambda i: self.priority(i, tasks[i].task_weight))
        if tasks[pick].runner_futures is not None:
            scheduler.join_running_task(pick)
        return pick

    def priority(self, task: int, weight: float) -> float:
        """``weight x best / trials`` of ``task`` in seconds per trial; ``inf`` before its first trial."""
        if self.trials[task] == 0:
            return math.inf
        measured = [b for b in self.bests if math.isfinite(b)]
        best = self.bests[task] if math.isfinite(self.bests[task]) else max(measured, default=1.0)
        return weight * best / self.trials[task]

    def record(self, task: int, latencies: Sequence[float]) -> None:
        """Count a measured batch of ``task`` (seconds, ``inf`` for failures)."""
        self.trials[task] += len(latencies)
        self.bests[task] = min([self.bests[task], *latencies])

    def callback(self) -> ms.measure_callback.PyMeasureCallback:
        """The measure callback that feeds this scheduler the run's batches."""
        return _CountBatches(self)


@derived_object
class _CountBatches(ms.measure_callback.PyMeasureCallback):
    def __init__(self, scheduler: WeightedShareScheduler) -> None:
        super().__init__()
        self.scheduler = scheduler

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        self.scheduler.record(task_id, batch_seconds(builder_results, runner_results))


def make_task_scheduler(
    name: str, bests: Sequence[float], trials: Sequence[int]
) -> tuple[ms.task_scheduler.TaskScheduler, list[ms.measure_callback.MeasureCallback]]:
    """The task scheduler ``name`` (one of :data:`TASK_SCHEDULERS`) for tasks whose records so far hold
    ``bests`` (seconds, ``inf`` for none) and ``trials``, and the measure callbacks it needs in the run."""
    if _known(name) == "gradient":
        return ms.task_scheduler.TaskScheduler.create("gradient"), []
    scheduler = WeightedShareScheduler(bests, trials)
    return scheduler, [scheduler.callback()]


def first_round_batch(
    name: str, trials_per_iter: int, remaining: int, tasks: int, share: float | None = None
) -> int:
    """Candidates per batch for ``tasks`` tasks with ``remaining`` trials to measure under task scheduler
    ``name``: ``trials_per_iter``, or fewer so that the first round, one batch per task, takes at most
    ``share`` of them (``None``: the scheduler's :data:`FIRST_ROUND_SHARE`; at least one candidate). A
    task the first round never reaches keeps TVM's unscheduled lowering, far slower than any tuned
    schedule."""
    share = FIRST_ROUND_SHARE[_known(name)] if share is None else share
    if not 0.0 < share <= 1.0:
        raise ValueError(f"first-round share must be in (0, 1], got {share}")
    return max(1, min(trials_per_iter, int(remaining * share) // max(tasks, 1)))


def _known(name: str) -> str:
    """``name`` itself when it is one of :data:`TASK_SCHEDULERS`; else ``ValueError`` naming the choices."""
    if name not in TASK_SCHEDULERS:
        raise ValueError(f"unknown task scheduler {name!r}; choose one of {', '.join(TASK_SCHEDULERS)}")
    return name
