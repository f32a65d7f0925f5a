"""MetaSchedule helpers for tests: a tuning context and sampled candidates of a workload."""

from __future__ import annotations

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


def tiny_tune_tir(workload: Workload, target: tvm.target.Target, work_dir, cost_model: ms.CostModel) -> None:
    """A real 16-trial ``ms.tune_tir`` of ``workload`` (batches of 8, population 32) with ``cost_model``."""
    from tvm_transfer.runner import measuring_workers

    with measuring_workers(target) as (builder, runner):
        ms.tune_tir(
            mod=workload.prim_func().with_attr("global_symbol", "main"),
            target=target,
            work_dir=str(work_dir),
            max_trials_global=16,
            num_trials_per_iter=8,
            builder=builder,
            runner=runner,
            cost_model=cost_model,
            strategy=ms.search_strategy.EvolutionarySearch(population_size=32, init_min_unmeasured=8),
            seed=1,
        )
