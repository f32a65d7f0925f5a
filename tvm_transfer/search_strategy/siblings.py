"""The best schedules of a run's other tasks, replayed on a task (:class:`SiblingBests`).

MetaSchedule tunes a network's tasks side by side in one database, but each task's search starts from its
own records only. The tasks of one network often share a design space and a good structure: the four dense
layers of a transformer encoder, the convolutions of one stage of a CNN. A task's population can then start
from the fastest programs its siblings have measured so far, their tile sizes repaired to the task's loop
extents (:func:`~tvm_transfer.search_strategy.replay.replay_trace`). Only what was measured in the run's
own database on its own target is used.
"""

from __future__ import annotations

import logging

import tvm_ffi
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms

from tenset_tools.metaschedule import mean_run_seconds
from tvm_transfer.search_strategy.replay import replay_trace

log = logging.getLogger(__name__)

__all__ = ["SiblingBests"]


class SiblingBests:
    """The ``top_k`` fastest records of every other workload in a tuning database, replayed on one task.

    A workload whose fastest record does not replay on the task (another design space, block names the
    task does not have) is foreign and never tried again; replays are cached by workload and latency, so a
    sibling is replayed again only once it has a new best.

    Parameters
    ----------
    context:
        The task's tuning context (its module and post-processors).
    database:
        The run's database, shared by all its tasks.
    top_k:
        Records of each sibling workload replayed, fastest first.
    """

    def __init__(self, context: ms.TuneContext, database: ms.database.Database, top_k: int = 1) -> None:
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k}")
        self.context, self.database, self.top_k = context, database, top_k
        self._own = tvm_ffi.structural_hash(context.mod)
        self._hashes: dict[ms.database.Workload, int] = {}  # a database's records share its workloads
        self._foreign: set[int] = set()
        self._replayed: dict[tuple[int, float], Schedule | None] = {}

    def schedules(self) -> list[Schedule]:
        """The siblings' best programs as schedules of the task, the fastest siblings first."""
        out = []
        for workload, records in self._bests().items():
            for rank, (seconds, record) in enumerate(records):
                if workload in self._foreign:
                    break
                key = (workload, seconds)
                if key not in self._replayed:
                    self._replayed[key] = self._replay(record, workload, fastest=rank == 0)
                if self._replayed[key] is not None:
                    out.append(self._replayed[key])
        return out

    def _bests(self) -> dict[int, list[tuple[float, ms.database.TuningRecord]]]:
        """Each other workload's ``top_k`` measured records (seconds, record), fastest first, the workloads
        ordered by their fastest."""
        by_workload: dict[int, list[tuple[float, ms.database.TuningRecord]]] = {}
        for record in self.database.get_all_tuning_records():
            workload = self._hashes.get(record.workload)
            if workload is None:
                workload = self._hashes[record.workload] = tvm_ffi.structural_hash(record.workload.mod)
            seconds = mean_run_seconds(record.run_secs)
            if workload != self._own and workload not in self._foreign and seconds < float("inf"):
                by_workload.setdefault(workload, []).append((seconds, record))
        tops = {w: sorted(rs, key=lambda pair: pair[0])[: self.top_k] for w, rs in by_workload.items()}
        return dict(sorted(tops.items(), key=lambda item: item[1][0][0]))

    def _replay(self, record: ms.database.TuningRecord, workload: int, fastest: bool) -> Schedule | None:
        try:
            schedule, _ = replay_trace(record.trace, self.context.mod, self.context)
        except ValueError as error:
            if fastest:
                self._foreign.add(workload)
            log.debug("sibling %x does not replay on %s: %s", workload, self.context.task_name, error)
            return None
        return schedule
