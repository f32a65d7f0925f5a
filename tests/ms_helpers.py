"""MetaSchedule helpers for tests: a tuning context and sampled candidates of a workload."""

from __future__ import annotations

from collections.abc import Sequence

import tvm
from tvm.s_tir import meta_schedule as ms

from tvm_transfer.search_strategy.copula.population import initial_population
from tvm_transfer.workloads import Workload


def tune_context(workload: Workload, target: tvm.target.Target) -> ms.TuneContext:
    mod = workload.ir_module()
    return ms.TuneContext(
        mod=mod,
        target=target,
        space_generator="post-order-apply",
        search_strategy=ms.search_strategy.EvolutionarySearch(population_size=32, init_min_unmeasured=8),
        task_name=workload.name,
        rand_state=1,
        num_threads=2,
    )


def sample_candidates(context: ms.TuneContext, count: int) -> list[ms.MeasureCandidate]:
    """``count`` random valid candidates of the context's design space (MetaSchedule's own sampler)."""
    return initial_population(context, count)


def tiny_tune_tir(
    workload: Workload,
    target: tvm.target.Target,
    work_dir,
    cost_model: ms.CostModel | str,
    trials: int = 16,
    strategy: ms.search_strategy.SearchStrategy | None = None,
    seed: int | None = 1,
    trials_per_iter: int = 8,
    callbacks: Sequence[ms.measure_callback.MeasureCallback] = (),
    **runner_options,
) -> ms.database.Database:
    """A real ``ms.tune_tir`` of ``workload`` for ``trials`` trials in batches of ``trials_per_iter`` with
    ``cost_model``, by default under evolutionary search of population 32; ``callbacks`` run after
    MetaSchedule's default ones; ``runner_options`` go to the run's runner
    (:func:`tvm_transfer.runner.measuring_workers`). Returns the run's database."""
    from tvm_transfer.runner import measuring_workers

    strategy = strategy or ms.search_strategy.EvolutionarySearch(population_size=32, init_min_unmeasured=8)
    builder, runner = measuring_workers(target, **runner_options)
    return ms.tune_tir(
        mod=workload.prim_func().with_attr("global_symbol", "main"),
        target=target,
        work_dir=str(work_dir),
        max_trials_global=trials,
        num_trials_per_iter=trials_per_iter,
        builder=builder,
        runner=runner,
        cost_model=cost_model,
        measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), *callbacks],
        strategy=strategy,
        seed=seed,
    )
