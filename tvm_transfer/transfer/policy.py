"""What a tuning run takes from a transfer pack beyond the zero-trial exact matches of :mod:`.apply`.

A :class:`TransferPolicy` names the parts a run uses and turns a pack into the run's cost model and search
strategy:

* ``pretrained_model``: the pack's default cost model ranks candidates, under a
  :class:`~tvm_transfer.transfer.guard.GuardedCostModel` that hands the ranking to a model learning from
  the run alone when the pretrained one does not rank the task's own measurements; with ``fine_tune`` the
  pretrained model also learns the run's measurements, as a correction of what it predicted;
* ``seed_search``: each task's evolutionary search starts from the pack's best schedules of tasks with the
  same design space, repaired to the task's shape, then from copula samples conditioned on it
  (:class:`~tvm_transfer.search_strategy.copula.CopulaSearch` over the pack's schedule databases); with
  ``sibling_seeds`` its evolutions also start from the best schedules of the run's other tasks.
* ``refine_exact``: a task applied from the pack is tuned on from its record when the run has more trials
  per task than the pack's corpus measured of it (:func:`~tvm_transfer.transfer.apply.worth_refining`).
* ``measure_other_targets``: a task's first batch measures the pack's records of its workload measured on
  other targets (:class:`~tvm_transfer.transfer.apply.OtherTargetCandidates`), when the pack has any.
* ``tasks_by_work``: a network's tasks get their first batch heaviest first (``tune_network``'s
  ``tasks_by_work``), so that a budget smaller than the network's tasks leaves the lightest ones on
  TVM's default lowering rather than whichever come last in extraction order.
* ``task_scheduler``: which task of a network measures each batch (``tune_network``'s ``task_scheduler``):
  MetaSchedule's gradient scheduler, or :class:`~tvm_transfer.task_scheduler.WeightedShareScheduler`,
  which gives the budget left after a short first round to the tasks with the largest share of the
  network's latency per trial spent on them.

:data:`DEFAULT_POLICY` is what ``tune``, ``tune-network`` and ``compile`` use with a pack; which parts it
holds was chosen by measurement on development networks (``docs/transfer_pack.md``). A run without a pack
is TVM's own default: :data:`NO_TRANSFER_COST_MODEL` under evolutionary search.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

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
    """The parts of a transfer pack a tuning run uses (both on unless told otherwise; the commands use
    :data:`DEFAULT_POLICY`).

    Parameters
    ----------
    pretrained_model:
        Rank candidates with the pack's default model, guarded (needs a pack with a model).
    seed_search:
        Start every task's search from the pack's best schedules of tasks with its design space.
    fine_tune:
        The pretrained model learns the run's measurements as a correction of what it predicts
        (``XGBoostCostModel.fine_tuned``); a pack model that cannot (not XGBoost) ranks as it is.
    guard_min_measured:
        Measured candidates of a task before the guard judges the pretrained model on them
        (``GuardedCostModel(min_measured=...)``).
    population_size:
        Programs per generation of the evolutionary search ranked by the cost model (``None``: the run's
        ``TuneOptions.population_size``). A model that already knows the hardware can rank a larger
        population before the first measurement; an untrained one cannot.
    measured_seeds:
        With ``seed_search``, the seeds measured before the evolution starts (``None``: one batch); the
        other seeds join the evolution's population.
    keep_seeds:
        With ``seed_search``, the seeds join the population every batch's evolution starts from (``False``:
        the first batch's only; ``CopulaSearch(keep_seeds=...)``).
    sibling_seeds:
        With ``seed_search``, the fastest ``sibling_seeds`` records of each of the run's other tasks,
        replayed on the task, join every batch's evolution (0: none; ``CopulaSearch(siblings=...)``).
    refine_exact:
        Tune a task applied from the pack on from the pack's record when the run gives each task more
        trials than the pack's corpus measured of it (``False``: an applied record is always final; the
        ``refine_from_pack`` of ``tune_network`` and ``tune_workload``).
    measure_other_targets:
        Measure the pack's records of a task's workload taken on other targets as the task's first batch
        (at most one batch; the cost model chooses when there are more), before the search proper.
    model_name:
        The pack's model that ranks as the pretrained one (``None``: the pack's default model).
    blend:
        How the guard blends the pretrained and the online model's scores while both have a share:
        ``"rank"`` or ``"linear"`` (``GuardedCostModel(blend=...)``).
    selection_power:
        Sharpen the guarded model's scores so that the evolutionary search draws parents more often from
        the top (``GuardedCostModel(selection_power=...)``; ``None``: the scores as they are).
    tasks_by_work:
        Visit a network's tasks heaviest first (``weight x FLOPs``) in the task scheduler's first round,
        one batch each (``False``: in extraction order, as MetaSchedule does; ``tune_network``'s
        ``tasks_by_work``).
    task_scheduler:
        The task scheduler of a network's run, one of :data:`~tvm_transfer.task_scheduler.TASK_SCHEDULERS`
        (``tune_network``'s ``task_scheduler``).
    first_round_share:
        The share of a network's trials left that the task scheduler's first round, one batch per task,
        may take; batches shrink to fit (``None``: the scheduler's own,
        :data:`~tvm_transfer.task_scheduler.FIRST_ROUND_SHARE`; ``tune_network``'s ``first_round_share``).
    """

    pretrained_model: bool = True
    seed_search: bool = True
    fine_tune: bool = False
    guard_min_measured: int = 16
    population_size: int | None = None
    measured_seeds: int | None = None
    keep_seeds: bool = True
    sibling_seeds: int = 0
    refine_exact: bool = True
    measure_other_targets: bool = True
    model_name: str | None = None
    blend: str = "rank"
    selection_power: float | None = None
    tasks_by_work: bool = True
    task_scheduler: str = "gradient"
    first_round_share: float | None = None

    @property
    def name(self) -> str:
        """A short label of the parts used: ``model+seeds``, ``tuned-model+seeds`` (``fine_tune``),
        ``model``, ``tuned-model``, ``seeds`` or ``none``."""
        model = ("tuned-" if self.fine_tune else "") + "model"
        parts = [label for label, on in ((model, self.pretrained_model), ("seeds", self.seed_search)) if on]
        return "+".join(parts) or "none"

    def network_tuning(self, pack: TransferPack | None) -> dict:
        """``tune_network``'s keyword arguments for how a network's run uses ``pack``: the pack itself, its
        exact matches refined, the first round's task order, the task scheduler and its first round's
        share; without a pack, MetaSchedule's own (extraction order, the gradient scheduler)."""
        uses_pack = pack is not None
        return {
            "transfer_pack": pack,
            "refine_from_pack": uses_pack and self.refine_exact,
            "tasks_by_work": uses_pack and self.tasks_by_work,
            "task_scheduler": self.task_scheduler if uses_pack else "gradient",
            "first_round_share": self.first_round_share if uses_pack else None,
        }

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

        pretrained = pack.model(self.model_name)
        tuned = self.fine_tune and hasattr(pretrained, "fine_tuned")
        return GuardedCostModel(
            pretrained.fine_tuned() if tuned else pretrained,
            online=resolve_cost_model(online, seed),
            min_measured=self.guard_min_measured,
            adapt_pretrained=tuned,
            blend=self.blend,
            selection_power=self.selection_power,
        )

    def search_strategy(
        self, pack: TransferPack | None, options: TuneOptions
    ) -> ms.search_strategy.SearchStrategy | None:
        """The run's search with ``pack`` (``None``: the run's default evolutionary search, also without a
        pack): seeded from the pack's best schedules, or evolutionary search of the policy's
        ``population_size``; with ``measure_other_targets`` either one measures the pack's records of the
        task's workload from other targets first. With the pretrained model the seeds are measured in the
        model's order (the first batch, or the first ``measured_seeds``)."""
        from tvm_transfer.tuning.session import evolution

        if pack is None:
            return None
        if self.population_size is not None:
            options = dataclasses.replace(options, population_size=self.population_size)
        search = self._seeded_search(pack, options) if self.seed_search else None
        if not self.measure_other_targets:
            return search if search is not None or self.population_size is None else evolution(options)
        from tvm_transfer.search_strategy.measure_first import MeasureFirst
        from tvm_transfer.transfer.apply import OtherTargetCandidates

        return MeasureFirst(search or evolution(options), OtherTargetCandidates(pack))

    def _seeded_search(self, pack: TransferPack, options: TuneOptions) -> ms.search_strategy.SearchStrategy:
        from tvm_transfer.search_strategy.copula import CopulaSearch
        from tvm_transfer.tuning.session import evolution_settings

        ranked = self.pretrained_model and bool(pack.model_names)
        return CopulaSearch(
            pack.seed_sampler(),
            num_seeds=self.measured_seeds,
            seed=options.seed,
            rank_pool=options.trials_per_iter if ranked else 0,
            keep_seeds=self.keep_seeds,
            siblings=self.sibling_seeds,
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
DEFAULT_POLICY = TransferPolicy(fine_tune=True, blend="linear", keep_seeds=False)
