"""A task's design spaces, and random candidates from MetaSchedule's own initial-population sampler,
outside a tuning run."""

from __future__ import annotations

import tvm
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule import _ffi_api

from tvm_transfer.workloads import Workload


def initial_population(context: ms.TuneContext, count: int) -> list[ms.MeasureCandidate]:
    """``count`` random valid candidates of ``context``'s design spaces, as the evolutionary search samples
    its first population (``context.search_strategy`` must be an ``EvolutionarySearch``)."""
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


def design_spaces(
    workload: Workload | tvm.IRModule, target: tvm.target.Target
) -> tuple[tvm.IRModule, list, list]:
    """``(module, design spaces, post-processors)`` of ``workload`` (or a task's module) under MetaSchedule's
    default (post-order-apply) space generator on ``target``."""
    is_module = isinstance(workload, tvm.IRModule)
    context = ms.TuneContext(
        mod=workload if is_module else workload.ir_module(),
        target=target,
        space_generator="post-order-apply",
        search_strategy="evolutionary",
        task_name="main" if is_module else workload.name,
        num_threads=2,
    )
    return context.mod, list(context.generate_design_space()), list(context.space_generator.postprocs)
