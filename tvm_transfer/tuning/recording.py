"""Records written as they are measured: a tuning run's database holds each candidate the moment its
measurement ends, not when MetaSchedule's task scheduler collects the batch.

MetaSchedule commits a batch's records (its ``AddToDatabase`` measure callback) when the task scheduler
joins the task. The gradient scheduler joins the first batch of every task only after each task has had
one, so a run stopped before then kept none of its first round: on a network of sixty tasks, most of a
budget. Here the runner (:class:`~tvm_transfer.runner.TimedRunner`) hands every result to a
:class:`RecordOnMeasure`, which finds the candidate in the task whose builds are being measured and commits
its record at once; at the join, :class:`CommitBuildFailures` commits the candidates that never reached the
runner. Together they write the records ``AddToDatabase`` writes, each once.
"""

from __future__ import annotations

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

from tenset_tools.metaschedule import FAILURE_MARKER_SECONDS

__all__ = ["CommitBuildFailures", "RecordOnMeasure", "recording_callbacks"]


def _commit(
    database: ms.database.Database,
    task: ms.task_scheduler.TaskRecord,
    candidate: ms.MeasureCandidate,
    run_secs: list[float] | None,
) -> None:
    """Commit ``candidate`` of ``task`` as ``AddToDatabase`` would (a failure as MetaSchedule's marker,
    :data:`~tenset_tools.metaschedule.FAILURE_MARKER_SECONDS`)."""
    database.commit_tuning_record(
        ms.database.TuningRecord(
            trace=candidate.sch.trace,
            workload=database.commit_workload(task.ctx.mod),
            run_secs=list(run_secs) if run_secs is not None else [FAILURE_MARKER_SECONDS],
            target=task.ctx.target,
            args_info=list(candidate.args_info),
        )
    )


class RecordOnMeasure:
    """Commit each measured candidate of a run of ``scheduler`` to ``database`` as its result comes in
    (call it with the runner input and its result)."""

    def __init__(self, scheduler: ms.task_scheduler.TaskScheduler, database: ms.database.Database) -> None:
        self.scheduler = scheduler
        self.database = database

    def __call__(self, runner_input: ms.runner.RunnerInput, result: ms.runner.RunnerResult) -> None:
        task, candidate = self._candidate(str(runner_input.artifact_path))
        _commit(self.database, task, candidate, result.run_secs if result.error_msg is None else None)

    def _candidate(self, artifact_path: str) -> tuple[ms.task_scheduler.TaskRecord, ms.MeasureCandidate]:
        # The task being measured is the one whose batch is built but not yet sent to the runner (the
        # scheduler sets its runner futures when the runner returns).
        for task in self.scheduler.tasks_:
            if task.builder_results is None or task.runner_futures is not None:
                continue
            for index, build in enumerate(task.builder_results):
                if build.artifact_path == artifact_path:
                    return task, task.measure_candidates[index]
        raise RuntimeError(f"no candidate of the running task was built to {artifact_path}")


@derived_object
class CommitBuildFailures(PyMeasureCallback):
    """At the join, commit the candidates of the batch that failed to build (the measured ones were
    committed by :class:`RecordOnMeasure`)."""

    def __init__(self, database: ms.database.Database) -> None:
        super().__init__()
        self.database = database

    def apply(
        self,
        task_scheduler: ms.task_scheduler.TaskScheduler,
        task_id: int,
        measure_candidates: list[ms.MeasureCandidate],
        builder_results: list[ms.builder.BuilderResult],
        runner_results: list[ms.runner.RunnerResult],
    ) -> None:
        task = task_scheduler.tasks_[task_id]
        for candidate, build in zip(measure_candidates, builder_results, strict=True):
            if build.error_msg is not None:
                _commit(self.database, task, candidate, None)


def recording_callbacks(database: ms.database.Database) -> list[ms.MeasureCallback]:
    """MetaSchedule's default measure callbacks with ``AddToDatabase`` replaced by
    :class:`CommitBuildFailures`, for a run whose runner commits through :class:`RecordOnMeasure`."""
    return [
        CommitBuildFailures(database) if isinstance(callback, ms.measure_callback.AddToDatabase) else callback
        for callback in ms.measure_callback.MeasureCallback.create("default")
    ]
