"""Measure known programs before a search starts: :class:`MeasureFirst` wraps any search strategy, makes
the task's first batch the candidates a provider knows for it (for example a transfer pack's records of
the same workload measured on other CPUs), and hands every later batch to the wrapped strategy.

The wrapped strategy is told the first batch's results, so its trial count includes them, and the
measured programs reach the database, where MetaSchedule's evolutionary search starts its population
from the best records. Wrap the result in ``SkipMeasured`` (``tvm_transfer.tuning.session.skip_measured``)
so that a resumed run does not measure the known candidates twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate, SearchStrategy

from tvm_transfer.search_strategy.base import WrappingStrategy, predicted_order, program_key

__all__ = ["CandidateProvider", "MeasureFirst"]

log = logging.getLogger(__name__)

#: Returns the candidates known for a task (its module and target are the context's), best guess first.
CandidateProvider = Callable[[ms.TuneContext], Sequence[MeasureCandidate]]


@derived_object
class MeasureFirst(WrappingStrategy):
    """``provider``'s candidates of the task as its first batch, then ``inner``'s batches.

    Parameters
    ----------
    inner:
        The search strategy of every later batch (e.g. ``EvolutionarySearch``).
    provider:
        The task's known candidates (:data:`CandidateProvider`); none makes this strategy ``inner``.
        Distinct programs are kept; when there are more than one batch holds, the tuner's cost model
        chooses (best predicted first), else the provider's order.
    """

    def __init__(self, inner: SearchStrategy, provider: CandidateProvider) -> None:
        self.inner = inner
        self.provider = provider
        self.first: list[MeasureCandidate] = []

    def pre_tuning(
        self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None
    ) -> None:
        super().pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)
        known = _distinct(self.provider(self.context))
        size = min(int(num_trials_per_iter), int(max_trials))
        if len(known) > size:
            known = [known[i] for i in predicted_order(cost_model, self.context, known)]
        self.first = known[:size]
        if self.first:
            log.info("%s: measuring %d known candidate(s) first", self.context.task_name, len(self.first))

    def generate_measure_candidates(self) -> list[MeasureCandidate] | None:
        if self.first:
            batch, self.first = self.first, []
            return batch
        return super().generate_measure_candidates()

    def post_tuning(self) -> None:
        self.first = []
        super().post_tuning()

    def clone(self) -> MeasureFirst:
        return MeasureFirst(self.inner.clone(), self.provider)


def _distinct(candidates: Sequence[MeasureCandidate]) -> list[MeasureCandidate]:
    """``candidates`` without repeated programs (:func:`program_key`), in order."""
    seen: set[int] = set()
    out = []
    for candidate in candidates:
        key = program_key(candidate.sch)
        if key not in seen:
            seen.add(key)
            out.append(candidate)
    return out
