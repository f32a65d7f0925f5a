"""Never measure a schedule twice: :class:`SkipMeasured` wraps any search strategy and drops the candidates
whose program the database already holds.

MetaSchedule's ``EvolutionarySearch`` remembers what it measured in a set that starts empty at every
``pre_tuning`` (TVM leaves "add records from the database" as a to-do), while it seeds each population with
the database's best records. On a resumed run the cost model then rates those already-measured programs
highly and they are sent for measurement again. The wrapper fills its own set from the database's records of
the task (the program the search would make of each, :func:`record_program_key`) and filters every batch
against it.
"""

from __future__ import annotations

import logging

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate, SearchStrategy
from tvm.s_tir.schedule import Trace

from tvm_transfer.search_strategy.base import WrappingStrategy, program_key
from tvm_transfer.search_strategy.replay import replay_trace

__all__ = ["SkipMeasured", "measured_program_keys", "record_program_key"]

log = logging.getLogger(__name__)


def record_program_key(trace: Trace, context: ms.TuneContext) -> int:
    """:func:`program_key` of the program ``context``'s search makes of a record's ``trace``: the trace
    replayed without post-processing, then the context's post-processors. Replaying the saved trace whole
    would not do: a record read back from a database file carries some annotation values as integers where
    those post-processors write booleans, and the same program would hash two ways. Raises ``ValueError``
    when the trace does not replay on ``context.mod``."""
    schedule, _ = replay_trace(trace, context.mod, context)
    return program_key(schedule)


def measured_program_keys(database: ms.database.Database, context: ms.TuneContext) -> set[int]:
    """:func:`record_program_key` of every record of ``context``'s task in ``database`` (failed ones
    included: measuring them again fails again). A record whose trace no longer replays is left out: the
    search cannot propose it again either."""
    workload = database.commit_workload(context.mod)
    keys = set()
    for record in database.get_all_tuning_records():
        if record.workload.same_as(workload):
            try:
                keys.add(record_program_key(record.trace, context))
            except ValueError:
                continue
    return keys


@derived_object
class SkipMeasured(WrappingStrategy):
    """``inner``'s candidates minus those already measured (in the database at ``pre_tuning``, or earlier
    in this run).

    Parameters
    ----------
    inner:
        The search strategy proposing candidates (e.g. ``EvolutionarySearch``, ``CopulaSearch``).
    max_empty_batches:
        Batches in a row that may be filtered to nothing before the search ends (each one makes the
        inner strategy add those programs to its own measured set, so asking again yields others).
    """

    def __init__(self, inner: SearchStrategy, max_empty_batches: int = 8) -> None:
        self.inner = inner
        self.max_empty_batches = max_empty_batches
        self.measured: set[int] = set()
        self.skipped = 0

    def pre_tuning(
        self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None
    ) -> None:
        super().pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)
        self.measured = measured_program_keys(database, self.context) if database is not None else set()
        self.skipped = 0

    def generate_measure_candidates(self) -> list[MeasureCandidate] | None:
        for _ in range(self.max_empty_batches):
            candidates = super().generate_measure_candidates()
            if candidates is None:
                return None
            fresh = []
            for candidate in candidates:
                key = program_key(candidate.sch)
                if key not in self.measured:
                    self.measured.add(key)
                    fresh.append(candidate)
            self.skipped += len(candidates) - len(fresh)
            if fresh:
                return fresh
        log.info(
            "%s: every candidate proposed was measured before; ending its search", self.context.task_name
        )
        return None

    def post_tuning(self) -> None:
        if self.skipped:
            log.info(
                "%s: %d candidate(s) measured before were not measured again",
                self.context.task_name,
                self.skipped,
            )
        super().post_tuning()

    def clone(self) -> SkipMeasured:
        return SkipMeasured(self.inner.clone(), self.max_empty_batches)
