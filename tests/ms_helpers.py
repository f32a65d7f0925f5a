"""MetaSchedule helpers for tests: a tuning context and sampled candidates of a workload."""

from __future__ import annotations

import tvm
from tvm.s_tir import meta_schedule as ms

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
    from tvm.s_tir.meta_schedule import _ffi_api

    strategy = context.search_strategy
    strategy.pre_tuning(
        count,
        count,
        context.generate_design_space(),
        ms.database.MemoryDatabase(),
        ms.cost_model.RandomModel(),
    )
    schedules = list(_ffi_api.SearchStrategyEvolutionarySearchSampleInitPopulation(strategy, count))[:count]
    strategy.post_tuning()
    return [
        ms.MeasureCandidate(s, ms.arg_info.ArgInfo.from_entry_func(s.mod, remove_preproc=True))
        for s in schedules
    ]
