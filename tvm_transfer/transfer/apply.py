"""Applying a transfer pack to a run: tasks the pack holds measured schedules of, on the run's own target,
go into the run's database with zero trials.

For each task whose workload the pack's best-schedule database holds for the *same target id*
(:meth:`~tvm_transfer.transfer.schedules.ScheduleDatabase.exact`), the fastest record is committed to the
work dir's MetaSchedule database as a tuning record carrying the pack's measured latency, so that
``compile`` builds it without a trial. Records measured on other targets are never committed. What was
applied is written to the sidecar ``transfer_pack.json`` of the work dir (per task: workload hash, target
id, latency, the pack it came from), which also makes applying idempotent.

Tuning leaves an applied task out unless the run has more trials for it than the pack's corpus spent on
it (:meth:`ExactMatches.worth_refining`): then the task is tuned on from the pack's record, as TVM alone
would measure it more often than the corpus did, and ``compile`` builds its best record, the pack's or a
new one. :class:`ExactMatches` is what a :class:`~tvm_transfer.tuning.plan.TuningPlan` holds of a pack.

A task the pack holds only as measured on other targets gets those records as candidates to measure
(:class:`OtherTargetCandidates`, the first batch of a
:class:`~tvm_transfer.search_strategy.measure_first.MeasureFirst` search): a program fast on another CPU is
often fast on this one, but only a measurement here may make it the task's schedule.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Mapping, Sequence

import tvm
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.utils import shash2hex

from tenset_tools.features import target_id
from tenset_tools.metaschedule import task_id_of_mod
from tvm_transfer.search_strategy.base import measure_candidate
from tvm_transfer.search_strategy.replay import replay_trace
from tvm_transfer.transfer.pack import TransferPack
from tvm_transfer.tuning.workdir import AppliedTask, WorkDir

log = logging.getLogger(__name__)

__all__ = [
    "ExactMatches",
    "OtherTargetCandidates",
]


class ExactMatches:
    """A transfer pack's schedules of a run's tasks measured on the run's own target: the
    :class:`~tvm_transfer.tuning.plan.PackSchedules` of a :class:`~tvm_transfer.tuning.plan.TuningPlan`."""

    def __init__(self, pack: TransferPack) -> None:
        self.pack = pack

    def describe(self) -> str:
        """The pack's path."""
        return str(self.pack.path)

    def apply(
        self,
        tasks: Sequence[tuple[str, tvm.IRModule]],
        target: tvm.target.Target,
        work_dir: str | os.PathLike,
    ) -> dict[int, AppliedTask]:
        """Commit the pack's fastest same-target record of each of ``tasks`` (``(name, module)`` pairs) to
        ``work_dir``'s database; returns ``{index in tasks: AppliedTask}`` for every task that has one there
        now (applied by this call or an earlier one). A record whose trace does not replay on the task is
        skipped with a warning (the next one is tried)."""
        work_dir = WorkDir(work_dir)
        before = work_dir.applied_tasks()
        database = None
        schedules = self.pack.schedules()
        tid = target_id(target)
        result: dict[int, AppliedTask] = {}
        added: dict[str, AppliedTask] = {}
        for index, (name, mod) in enumerate(tasks):
            key = shash2hex(mod)
            done = before.get(key) or added.get(key)
            if done is not None and done.target_id == tid:
                result[index] = done
                continue
            for record in schedules.exact(mod, target):
                database = database or work_dir.database()
                try:
                    tuning_record = record.tuning_record(database.commit_workload(mod), target)
                except ValueError as error:
                    log.warning("%s: pack record %d skipped: %s", name, record.entry.rank, error)
                    continue
                database.commit_tuning_record(tuning_record)
                applied = AppliedTask(name, key, tid, record.seconds, record.entry.rank, self.describe())
                added[key] = result[index] = applied
                break
        if added:
            work_dir.record_applied(added)
            log.info("%d task(s) applied from %s with 0 trials", len(added), self.pack.path)
        return result

    def worth_refining(
        self,
        tasks: Sequence[tuple[str, tvm.IRModule]],
        applied: Mapping[int, AppliedTask],
        trials_per_task: float,
        records: Sequence[Sequence[ms.database.TuningRecord]],
    ) -> list[int]:
        """The indices (into ``tasks``, in order) of the ``applied`` tasks that a run giving each task
        ``trials_per_task`` trials on average tunes on from the pack's record: those of which the pack's
        corpus measured fewer candidates on the target they were applied for, and those an earlier run
        tuned on already (their ``records`` in the work dir, aligned with ``tasks``, hold more than the
        pack's). The others keep the pack's record as final: TVM alone would measure them no more often
        than the corpus did."""
        return [
            index
            for index, task in sorted(applied.items())
            if len(records[index]) > 1
            or self.pack.measurements(task_id_of_mod(tasks[index][1]), task.target_id) < trials_per_task
        ]


class OtherTargetCandidates:
    """The candidates a tuning context's task has in ``pack``: the pack's records of its workload measured
    on targets other than the context's, replayed on the task and post-processed for the context's target
    as its own search would (each target's fastest first, then each one's second, ...). A
    :data:`~tvm_transfer.search_strategy.measure_first.CandidateProvider`; records whose traces do not
    replay are skipped, with one warning per task that counts them by cause and target."""

    def __init__(self, pack: TransferPack) -> None:
        self.pack = pack

    def __call__(self, context: ms.TuneContext) -> list[ms.MeasureCandidate]:
        records = self.pack.schedules().other_targets(context.mod, context.target)
        workload = ms.database.Workload(context.mod)
        candidates = []
        skipped: dict[str, Counter[str]] = {}
        for record in sorted(records, key=lambda r: r.entry.rank):
            try:
                schedule, _ = replay_trace(record.trace(workload), context.mod, context)
                candidates.append(measure_candidate(schedule))
            except ValueError as error:
                skipped.setdefault(str(error), Counter())[record.entry.target_id] += 1
        if skipped:
            causes = "; ".join(
                f"{cause} ({', '.join(f'{n} of {target}' for target, n in sorted(by_target.items()))})"
                for cause, by_target in skipped.items()
            )
            count = sum(n for by_target in skipped.values() for n in by_target.values())
            log.warning(
                "%s: %d of the pack's %d records from other targets skipped: %s",
                context.task_name,
                count,
                len(records),
                causes,
            )
        return candidates
