"""MetaSchedule search strategies seeded by copula samples (:class:`CopulaSearch`).

``CopulaSearch(sampler)`` wraps MetaSchedule's ``EvolutionarySearch``: at ``pre_tuning`` it asks the fitted
:class:`.sampler.TraceCopulaSampler` for distinct, validated candidates of the task; the first batch
measures them (best guess first); later batches evolve a population made of those seeds, the best
records of the database and fresh random samples,
under whatever cost model the tuner uses.
``few_shot=True`` measures only the copula candidates, in order, and stops when they run out. With
``rank_pool`` the tuner's cost model (e.g. one pretrained on the sources by
:func:`.sources.pretrain_on_sources`) re-orders the copula's first candidates before any is measured.
"""

from __future__ import annotations

import logging

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule import _ffi_api
from tvm.s_tir.meta_schedule.search_strategy import EvolutionarySearch, MeasureCandidate

from tvm_transfer.search_strategy.base import (
    WrappingStrategy,
    measure_candidate,
    predicted_order,
    program_key,
)
from tvm_transfer.search_strategy.copula.sampler import Proposal, TraceCopulaSampler

log = logging.getLogger(__name__)

__all__ = ["CopulaSearch"]


@derived_object
class CopulaSearch(WrappingStrategy):
    """Copula-seeded evolutionary search, or plain few-shot measurement of the copula samples.

    Parameters
    ----------
    sampler:
        A fitted :class:`TraceCopulaSampler`.
    num_seeds:
        Copula candidates measured before evolution starts (default: the first batch's size in evolution
        mode, the whole trial budget in few-shot mode).
    few_shot:
        Only measure the copula's candidates, in order.
    seed:
        Seed of the copula draws.
    proposal_log:
        A list that receives every proposal made (shared with clones: ``tune_tir`` tunes a clone, so this
        is how a caller sees which candidates came from the copula).
    rank_pool:
        Ask the copula for at least this many candidates and put its first ``rank_pool`` in the order of
        the tuner's cost model (best predicted first) instead of the copula's. 0 (default): the copula's
        order. Only useful with a model that already knows the operator (pretrained on the sources): an
        untrained one orders at random. On CPU the pretrained model's pick among the sources' best
        configurations was a better first evaluation than the nearest source's (``docs/copula_search.md``).
        In evolution mode a pool larger than ``num_seeds`` lets the model choose the measured seeds from
        it; the candidates it passes over join the evolution's population (few-shot mode measures them
        all).
    keep_seeds:
        The copula's candidates join the population of every evolution (default), or, when False, of the
        first one only: later evolutions start from the measured bests and fresh samples, as
        MetaSchedule's own search does, so that unmeasured seeds of a poor region stop pulling the search
        back to it.
    evo_kwargs:
        ``EvolutionarySearch`` arguments (``population_size``, ``init_min_unmeasured``, ...).
    """

    def __init__(
        self,
        sampler: TraceCopulaSampler,
        num_seeds: int | None = None,
        few_shot: bool = False,
        seed: int = 0,
        proposal_log: list[Proposal] | None = None,
        rank_pool: int = 0,
        keep_seeds: bool = True,
        **evo_kwargs,
    ) -> None:
        if rank_pool < 0:
            raise ValueError(f"rank_pool must be >= 0, got {rank_pool}")
        self.sampler, self.num_seeds, self.few_shot, self.seed = sampler, num_seeds, few_shot, seed
        self.proposal_log, self.rank_pool, self.keep_seeds = proposal_log, rank_pool, keep_seeds
        self.evo_kwargs = evo_kwargs
        self.inner = EvolutionarySearch(**evo_kwargs)
        self.proposals: list[Proposal] = []

    def pre_tuning(
        self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None
    ) -> None:
        super().pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)
        self.max_trials, self.per_iter, self.database = int(max_trials), int(num_trials_per_iter), database
        self.trials, self.next_seed, self.evolutions = 0, 0, 0
        self.measured: set[int] = set()
        seeds = self.num_seeds or (self.max_trials if self.few_shot else self.per_iter)
        count = max(seeds, self.rank_pool)
        ctx = self.context
        self.proposals = self.sampler.propose(
            ctx.mod, ctx.target, list(design_spaces), list(ctx.space_generator.postprocs), count, self.seed
        )
        log.info("copula proposed %d valid candidates (asked %d)", len(self.proposals), count)
        if self.rank_pool:
            self.proposals = self._ranked(self.proposals, cost_model)
        # Few-shot measures every proposal; evolution only the seeds (the rest of a pool joins the population)
        self.num_measured_seeds = len(self.proposals) if self.few_shot else min(seeds, len(self.proposals))
        if self.proposal_log is not None:
            self.proposal_log.extend(self.proposals)

    def _ranked(self, proposals: list[Proposal], cost_model) -> list[Proposal]:
        """The first ``rank_pool`` proposals by the cost model's predicted score (best first, ties in the
        copula's order), then the rest in the copula's order."""
        if cost_model is None:
            log.warning("rank_pool is set but the tuner passed no cost model: keeping the copula's order")
            return proposals
        pool, rest = proposals[: self.rank_pool], proposals[self.rank_pool :]
        order = predicted_order(cost_model, self.context, [measure_candidate(p.schedule) for p in pool])
        return [pool[i] for i in order] + rest

    def _take(self, schedules, num: int) -> list[MeasureCandidate]:
        out = []
        for schedule in schedules:
            key = program_key(schedule)
            if key not in self.measured and len(out) < num:
                self.measured.add(key)
                out.append(measure_candidate(schedule))
        return out

    def generate_measure_candidates(self) -> list[MeasureCandidate] | None:
        if self.trials >= self.max_trials:
            return None
        num = min(self.per_iter, self.max_trials - self.trials)
        if self.next_seed < self.num_measured_seeds:
            batch = self.proposals[self.next_seed : min(self.next_seed + num, self.num_measured_seeds)]
            self.next_seed += len(batch)
            return self._take([p.schedule for p in batch], num) or None
        if self.few_shot:
            return None
        seeds = self.proposals if self.keep_seeds or not self.evolutions else []
        self.evolutions += 1
        population = [p.schedule for p in seeds] + self._database_best()
        size = int(self.evo_kwargs.get("population_size", 512))
        fresh = _ffi_api.SearchStrategyEvolutionarySearchSampleInitPopulation(
            self.inner, max(size - len(population), 1)
        )
        fresh = list(fresh)
        try:
            bests = _ffi_api.SearchStrategyEvolutionarySearchEvolveWithCostModel(
                self.inner, population + fresh, 2 * num
            )
        except RuntimeError as error:
            # TVM 0.27's mutation loop does not catch a failing replay inside a mutator. Copula seeds used to
            # trip it ("old_outputs.size() == new_outputs.size()" on conv2d) because they were post-processed
            # without an EnterPostproc marker; SpaceEncoding.replay now sets it and
            # tests/search/test_seeded_evolution.py checks that seeded conv2d populations evolve. Kept as a
            # guard: evolve the fresh samples alone rather than abort the whole tuning run.
            log.warning("evolution with the seeded population failed (%s); evolving fresh samples", error)
            bests = _ffi_api.SearchStrategyEvolutionarySearchEvolveWithCostModel(self.inner, fresh, 2 * num)
        return self._take(bests, num) or None

    def _database_best(self) -> list:
        """Best measured schedules of this task so far (MetaSchedule's own strategy starts from them too),
        marked as measured: read back from the database, a program can hash unlike the same program made
        here (:func:`~tvm_transfer.search_strategy.base.program_key`), and an evolution may return it as
        it is."""
        if self.database is None:
            return []
        k = int(int(self.evo_kwargs.get("population_size", 512)) * 0.2)
        workload = self.database.commit_workload(self.context.mod)
        out = []
        for record in self.database.get_top_k(workload, k):
            candidate = record.as_measure_candidate()
            if candidate is not None:
                self.measured.add(program_key(candidate.sch))
                out.append(candidate.sch)
        return out

    def notify_runner_results(self, measure_candidates, results) -> None:
        self.trials += len(results)
        super().notify_runner_results(measure_candidates, results)

    def clone(self) -> CopulaSearch:
        return CopulaSearch(
            self.sampler,
            self.num_seeds,
            self.few_shot,
            self.seed,
            self.proposal_log,
            self.rank_pool,
            self.keep_seeds,
            **self.evo_kwargs,
        )
