"""What a tuning run uses to choose and measure candidates, as one object: :class:`TuningPlan`.

A plan is made once per run, by the transfer policy from a transfer pack
(:meth:`tvm_transfer.transfer.policy.TransferPolicy.plan`) or by a caller for TVM alone, and the tuners
(:mod:`~tvm_transfer.tuning.network`, :mod:`~tvm_transfer.tuning.operator`) only read it. A pack reaches
tuning through the plan alone: its cost model and search are plan fields, and its zero-trial exact
matches are a :class:`PackSchedules` the tuners call, so tuning never imports the transfer package.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from tvm_transfer.tuning.workdir import AppliedTask, WorkDir

__all__ = ["PackSchedules", "TuningPlan"]


class PackSchedules(Protocol):
    """A transfer pack's measured schedules of a run's tasks on the run's own target."""

    def describe(self) -> str:
        """Where the schedules come from (the pack's path), for results."""

    def apply(
        self, tasks: Sequence[tuple[str, tvm.IRModule]], target: tvm.target.Target, work_dir: WorkDir
    ) -> dict[int, AppliedTask]:
        """Commit the pack's best record of each of ``tasks`` (``(name, module)``) measured on ``target``
        to ``work_dir``'s database (at most once per task); ``{index in tasks: AppliedTask}`` of every task
        that has one there."""

    def worth_refining(
        self,
        tasks: Sequence[tuple[str, tvm.IRModule]],
        applied: dict[int, AppliedTask],
        trials_per_task: float,
        records: Sequence[Sequence[ms.database.TuningRecord]],
    ) -> list[int]:
        """The indices of the ``applied`` tasks a run giving each task ``trials_per_task`` trials tunes on
        from the pack's record (``records``: each task's records in the work dir)."""


@dataclass(frozen=True)
class TuningPlan:
    """How a run tunes: the cost model, the search, and what it takes from a transfer pack.

    ``cost_model`` is a name of :data:`~tvm_transfer.cost_model.COST_MODELS` or a model object (e.g. a
    pack's guarded pretrained model); ``search_strategy`` replaces MetaSchedule's evolutionary search
    (``None``: that search, with the run's population); ``pack_schedules`` applies a pack's exact matches
    with zero trials (``None``: no pack); a task so applied is tuned on from its record only with
    ``refine_from_pack`` (:meth:`PackSchedules.worth_refining`). ``tasks_by_work`` gives a network's tasks
    their first batch heaviest first (``weight x FLOPs``) rather than in extraction order, so that a
    budget smaller than the network's task count leaves the lightest ones unscheduled. The default plan
    is TVM alone with our XGBoost model."""

    cost_model: str | ms.CostModel = "xgboost"
    search_strategy: ms.search_strategy.SearchStrategy | None = None
    pack_schedules: PackSchedules | None = None
    refine_from_pack: bool = True
    tasks_by_work: bool = False

    @property
    def cost_model_name(self) -> str:
        """How results name the cost model: its ``COST_MODELS`` name, or its class name for an object."""
        return self.cost_model if isinstance(self.cost_model, str) else type(self.cost_model).__name__
