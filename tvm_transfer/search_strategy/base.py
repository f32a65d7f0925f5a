"""What the search strategies of this package share: :class:`WrappingStrategy`, the base of a strategy that
wraps another, and three helpers on candidates: which program a schedule is (:func:`program_key`), a
schedule as a candidate to measure (:func:`measure_candidate`), and the order the tuner's cost model
prefers (:func:`predicted_order`).
"""

from __future__ import annotations

from collections.abc import Sequence

import tvm_ffi
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate, PySearchStrategy, SearchStrategy

__all__ = ["WrappingStrategy", "measure_candidate", "predicted_order", "program_key"]


class WrappingStrategy(PySearchStrategy):
    """A search strategy that forwards each call of MetaSchedule's contract to ``self.inner``.

    Subclasses set ``self.inner`` in their constructor, override only the calls they change (calling
    ``super()`` to keep ``inner`` informed), define ``clone``, and are decorated with TVM's
    ``derived_object`` themselves (this base is not: a decorated class cannot be subclassed).
    ``self.context`` is the tuning context once initialised.
    """

    inner: SearchStrategy

    def _initialize_with_tune_context(self, context: ms.TuneContext) -> None:
        self.context = context
        self.inner._initialize_with_tune_context(context)

    def pre_tuning(
        self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None
    ) -> None:
        self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)

    def generate_measure_candidates(self) -> list[MeasureCandidate] | None:
        return self.inner.generate_measure_candidates()

    def notify_runner_results(self, measure_candidates, results) -> None:
        self.inner.notify_runner_results(measure_candidates, results)

    def post_tuning(self) -> None:
        self.inner.post_tuning()


def program_key(schedule) -> int:
    """The identity of a scheduled program (a ``tir.Schedule``): the structural hash of its module, as
    MetaSchedule's own module equality compares them. Compare programs made the same way: a record read
    back from a database file replays some annotation values as integers where a post-processor run here
    writes booleans, and the hash tells them apart (see
    :func:`~tvm_transfer.search_strategy.unmeasured.measured_program_keys`)."""
    return tvm_ffi.structural_hash(schedule.mod)


def measure_candidate(schedule) -> MeasureCandidate:
    """A scheduled program (a ``tir.Schedule``) as a candidate to measure, its arguments those of its
    entry function."""
    return MeasureCandidate(schedule, ms.arg_info.ArgInfo.from_entry_func(schedule.mod, remove_preproc=True))


def predicted_order(cost_model, context: ms.TuneContext, candidates: Sequence[MeasureCandidate]) -> list[int]:
    """Indices of ``candidates`` by ``cost_model``'s predicted score, best first (ties keep their order).
    With no cost model, or fewer than two candidates, their own order."""
    if cost_model is None or len(candidates) < 2:  # TVM's predict cannot return an empty array
        return list(range(len(candidates)))
    scores = cost_model.predict(context, list(candidates))
    return sorted(range(len(candidates)), key=lambda i: -float(scores[i]))
