"""Never measure a schedule twice: :class:`SkipMeasured` wraps any search strategy and drops the candidates
whose program the database already holds.

MetaSchedule's ``EvolutionarySearch`` remembers what it measured in a set that starts empty at every
``pre_tuning`` (TVM leaves "add records from the database" as a to-do), while it seeds each population with
the database's best records. On a resumed run the cost model then rates those already-measured programs
highly and they are sent for measurement again. The wrapper fills its own set from the database's records of
the task (each record's trace replayed to its program, compared by structural hash like MetaSchedule's
module equality) and filters every batch against it.
"""

from __future__ import annotations

import logging

import tvm_ffi
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate, PySearchStrategy, SearchStrategy

__all__ = ["SkipMeasured", "measured_program_keys"]

log = logging.getLogger(__name__)


def measured_program_keys(database: ms.database.Database, mod) -> set[int]:
    """Structural hashes of the programs of every record of ``mod``'s task in ``database`` (failed ones
    included: measuring them again fails again). A record whose trace no longer replays is left out."""
    workload = database.commit_workload(mod)
    keys = set()
    for record in database.get_all_tuning_records():
        if record.workload.same_as(workload):
            try:
                keys.add(tvm_ffi.structural_hash(record.as_measure_candidate().sch.mod))
            except Exception:  # TVM replay errors: such a record cannot be proposed again either
                continue
    return keys


@derived_object
class SkipMeasured(PySearchStrategy):
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

    def _initialize_with_tune_context(self, context: ms.TuneContext) -> None:
        self.context = context
        self.inner._initialize_with_tune_context(context)

    def pre_tuning(
        self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None
    ) -> None:
        self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)
        self.measured = measured_program_keys(database, self.context.mod) if database is not None else set()
        self.skipped = 0

    def generate_measure_candidates(self) -> list[MeasureCandidate] | None:
        for _ in range(self.max_empty_batches):
            candidates = self.inner.generate_measure_candidates()
            if candidates is None:
                return None
            fresh = []
            for candidate in candidates:
                key = tvm_ffi.structural_hash(candidate.sch.mod)
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

    def notify_runner_results(self, measure_candidates, results) -> None:
        self.inner.notify_runner_results(measure_candidates, results)

    def post_tuning(self) -> None:
        if self.skipped:
            log.info(
                "%s: %d candidate(s) measured before were not measured again",
                self.context.task_name,
                self.skipped,
            )
        self.inner.post_tuning()

    def clone(self) -> SkipMeasured:
        return SkipMeasured(self.inner.clone(), self.max_empty_batches)
