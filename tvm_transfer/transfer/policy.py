"""What a tuning run takes from a transfer pack beyond the zero-trial exact matches of :mod:`.apply`.

A :class:`TransferPolicy` names the parts a run uses and turns a pack into the run's
:class:`~tvm_transfer.tuning.plan.TuningPlan` (:meth:`TransferPolicy.plan`):

* ``pretrained_model``: the pack's default cost model ranks candidates, under a
  :class:`~tvm_transfer.transfer.guard.GuardedCostModel` that hands the ranking to a model learning from
  the run alone when the pretrained one does not rank the task's own measurements; with ``fine_tune`` the
  pretrained model also learns the run's measurements, as a correction of what it predicted;
* ``seed_search``: each task's evolutionary search starts from the pack's best schedules of tasks with the
  same design space, repaired to the task's shape, then from copula samples conditioned on it
  (:class:`~tvm_transfer.search_strategy.copula.CopulaSearch` over the pack's schedule databases).
* ``refine_exact``: a task applied from the pack is tuned on from its record when the run has more trials
  per task than the pack's corpus measured of it (:func:`~tvm_transfer.transfer.apply.worth_refining`).
* ``measure_other_targets``: a task's first batch measures the pack's records of its workload measured on
  other targets (:class:`~tvm_transfer.transfer.apply.OtherTargetCandidates`), when the pack has any.
* ``tasks_by_work``: a network's tasks get their first batch heaviest first (the plan's
  ``tasks_by_work``), so that a budget smaller than the network's tasks leaves the lightest ones on
  TVM's default lowering rather than whichever come last in extraction order.

:data:`DEFAULT_POLICY` is what ``tune``, ``tune-network`` and ``compile`` use with a pack; which parts it
holds was chosen by measurement on development networks (``docs/transfer_pack.md``). A run without a pack
is TVM's own default: :data:`NO_TRANSFER_COST_MODEL` under evolutionary search.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tvm_transfer.tuning.plan import TuningPlan

if TYPE_CHECKING:
    from tvm.s_tir import meta_schedule as ms

    from tvm_transfer.transfer.pack import TransferPack
    from tvm_transfer.tuning.session import TuneOptions

__all__ = ["DEFAULT_POLICY", "NO_TRANSFER_COST_MODEL", "ONLINE_COST_MODEL", "TransferPolicy"]

#: The cost model of a run without transfer: MetaSchedule's own ``XGBModel``, as TVM tunes by default.
NO_TRANSFER_COST_MODEL = "tvm-xgb"
#: The model learning from the run's own measurements under the guard, unless the user names another.
ONLINE_COST_MODEL = "xgboost"


@dataclass(frozen=True)
class TransferPolicy:
    """The parts of a transfer pack a tuning run uses; the defaults are the adopted policy,
    :data:`DEFAULT_POLICY`, which the commands use (each field is one decision: ``docs/transfer_pack.md``).

    Parameters
    ----------
    pretrained_model:
        Rank candidates with the pack's default model, guarded (needs a pack with a model).
    seed_search:
        Start every task's search from the pack's best schedules of tasks with its design space.
    fine_tune:
        The pretrained model learns the run's measurements as a correction of what it predicts
        (``XGBoostCostModel.fine_tuned``); a pack model that cannot (not XGBoost) ranks as it is.
    keep_seeds:
        With ``seed_search``, the seeds join the population of every batch's evolution (``False``: the
        first batch's only, later evolutions start from the measured bests; ``CopulaSearch(keep_seeds=...)``).
    refine_exact:
        Tune a task applied from the pack on from the pack's record when the run gives each task more
        trials than the pack's corpus measured of it (``False``: an applied record is always final; the
        plan's ``refine_from_pack``).
    measure_other_targets:
        Measure the pack's records of a task's workload taken on other targets as the task's first batch
        (at most one batch; the cost model chooses when there are more), before the search proper.
    blend:
        How the guard blends the pretrained and the online model's scores while both have a share:
        ``"rank"`` or ``"linear"`` (``GuardedCostModel(blend=...)``).
    tasks_by_work:
        Visit a network's tasks heaviest first (``weight x FLOPs``) in the task scheduler's first round,
        one batch each (``False``: in extraction order, as MetaSchedule does; the plan's ``tasks_by_work``).
    """

    pretrained_model: bool = True
    seed_search: bool = True
    fine_tune: bool = True
    keep_seeds: bool = False
    refine_exact: bool = True
    measure_other_targets: bool = True
    blend: str = "linear"
    tasks_by_work: bool = True

    @property
    def name(self) -> str:
        """A short label of the parts used: ``model+seeds``, ``tuned-model+seeds`` (``fine_tune``),
        ``model``, ``tuned-model``, ``seeds`` or ``none``."""
        model = ("tuned-" if self.fine_tune else "") + "model"
        parts = [label for label, on in ((model, self.pretrained_model), ("seeds", self.seed_search)) if on]
        return "+".join(parts) or "none"

    def plan(
        self, pack: TransferPack | None, options: TuneOptions, online: str | ms.CostModel | None = None
    ) -> TuningPlan:
        """The tuning plan of a run with ``pack`` and ``options``: its :meth:`cost_model` (``online``
        learning from the run), its :meth:`search_strategy`, the pack's exact matches (refined with
        ``refine_exact``) and the first round's task order; without a pack, TVM alone (``online``, by
        default :data:`NO_TRANSFER_COST_MODEL`, under evolutionary search, tasks in extraction order)."""
        if pack is None:
            return TuningPlan(cost_model=self.cost_model(None, online, options.seed))
        from tvm_transfer.transfer.apply import ExactMatches

        return TuningPlan(
            cost_model=self.cost_model(pack, online, options.seed),
            search_strategy=self.search_strategy(pack, options),
            pack_schedules=ExactMatches(pack),
            refine_from_pack=self.refine_exact,
            tasks_by_work=self.tasks_by_work,
        )

    @staticmethod
    def build_plan(pack: TransferPack | None) -> TuningPlan:
        """The plan of a run that builds without tuning: only the pack's exact matches (measured on the
        run's target), applied with zero trials (a pack's models and seeds would not be used)."""
        from tvm_transfer.transfer.apply import ExactMatches

        return TuningPlan(pack_schedules=ExactMatches(pack) if pack is not None else None)

    def cost_model(
        self, pack: TransferPack | None, online: str | ms.CostModel | None = None, seed: int = 0
    ) -> str | ms.CostModel:
        """The run's cost model: the pack's pretrained model guarded, ``online`` (a name or a model;
        default :data:`ONLINE_COST_MODEL`) learning from the run; ``online`` alone when the policy or the
        pack has no pretrained model; :data:`NO_TRANSFER_COST_MODEL` without a pack and without
        ``online``."""
        if pack is None:
            return online or NO_TRANSFER_COST_MODEL
        online = online or ONLINE_COST_MODEL
        if not (self.pretrained_model and pack.model_names):
            return online
        from tvm_transfer.transfer.guard import GuardedCostModel
        from tvm_transfer.tuning.session import resolve_cost_model

        pretrained = pack.model()
        tuned = self.fine_tune and hasattr(pretrained, "fine_tuned")
        return GuardedCostModel(
            pretrained.fine_tuned() if tuned else pretrained,
            online=resolve_cost_model(online, seed),
            adapt_pretrained=tuned,
            blend=self.blend,
        )

    def search_strategy(
        self, pack: TransferPack | None, options: TuneOptions
    ) -> ms.search_strategy.SearchStrategy | None:
        """The run's search with ``pack`` (``None``: the run's default evolutionary search, also without a
        pack): seeded from the pack's best schedules; with ``measure_other_targets`` it (or evolutionary
        search) measures the pack's records of the task's workload from other targets first. With the
        pretrained model the seeds of the first batch are measured in the model's order."""
        if pack is None:
            return None
        search = self._seeded_search(pack, options) if self.seed_search else None
        if not self.measure_other_targets:
            return search
        from tvm_transfer.search_strategy.measure_first import MeasureFirst
        from tvm_transfer.transfer.apply import OtherTargetCandidates
        from tvm_transfer.tuning.session import evolution

        return MeasureFirst(search or evolution(options), OtherTargetCandidates(pack))

    def _seeded_search(self, pack: TransferPack, options: TuneOptions) -> ms.search_strategy.SearchStrategy:
        from tvm_transfer.search_strategy.copula import CopulaSearch
        from tvm_transfer.tuning.session import evolution_settings

        ranked = self.pretrained_model and bool(pack.model_names)
        return CopulaSearch(
            pack.seed_sampler(),
            seed=options.seed,
            rank_pool=options.trials_per_iter if ranked else 0,
            keep_seeds=self.keep_seeds,
            **evolution_settings(options.population_size),
        )


#: The policy of ``tune``, ``tune-network`` and ``compile`` with a transfer pack: the guarded pretrained
#: model, fine-tuned on the run, and a first batch of the pack's seeds. The first batch measures the seeds
#: the pretrained model ranks highest (the nearest tasks' best schedules repaired to the task's shape, then
#: copula samples); later evolutions start from the measured bests, as MetaSchedule's own search does. The
#: pretrained model alone tends to pick programs it merely scores high, while a seed is a program measured
#: fast on a task with the same design space; kept in every batch's population, seeds from tasks unlike the
#: task held searches in poor regions. Fine-tuning made its second and later batches find faster programs
#: on development operators. The guard waits for 16 measured candidates of a task before judging the model
#: on them: best at 16 trials on development operators, and independent of the batch size. Exact matches
#: are tuned on once the run has more trials per task than the pack measured of them: on a network of the
#: pack, kept final they fell far behind TVM alone at large budgets, while tuning them on kept close to it.
#: While both models have a share, the guard blends their scores linearly: scored alone, a candidate keeps
#: its score, as the search's comparison across generations needs. A network's tasks get their first batch
#: heaviest first: on development networks at budgets below their task counts, extraction order left their
#: heaviest tasks on TVM's default lowering.
DEFAULT_POLICY = TransferPolicy()
