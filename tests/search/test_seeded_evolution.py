"""Copula seeds must survive MetaSchedule's evolution: a seeded conv2d population is mutated and evolved.

Regression test for the TVM internal check ``old_outputs.size() == new_outputs.size()`` that
``EvolveWithCostModel`` raised on copula-seeded conv2d populations: seeds were post-processed without an
``EnterPostproc`` marker, so a mutant's replay re-ran the post-processing instructions on a changed loop
nest. With the marker, seeds evolve like MetaSchedule's own samples (and ``CopulaSearch``'s fallback for that
error is not needed).
"""

from __future__ import annotations

import math

import pytest
from ms_helpers import sample_candidates, tune_context
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule import _ffi_api

from tvm_transfer.search_strategy.copula import (
    TraceCopulaSampler,
    load_sources,
    task_descriptor,
    trace_decisions,
)
from tvm_transfer.workloads import make_workload

TARGET_SHAPE = (1, 7, 7, 32, 32, 3, 1, 1)  # a padded 3x3 conv2d: its space has a compute-location decision


@pytest.fixture(scope="module")
def conv2d_sources(tmp_path_factory, target):
    """Databases of two other conv2d shapes: real sampled candidates, synthetic run times (faster when the
    innermost output-channel tile is 8) to keep the test fast; the sampler only reads traces and times."""
    records = []
    for shape in [(1, 14, 14, 32, 32, 3, 1, 1), (1, 7, 7, 64, 32, 3, 1, 1)]:
        work_dir = tmp_path_factory.mktemp("conv2d_source")
        workload = make_workload("conv2d", shape)
        database = ms.database.JSONDatabase(work_dir=str(work_dir))
        entry = database.commit_workload(workload.ir_module())
        for candidate in sample_candidates(tune_context(workload, target), 16):
            tiles = [d for d in trace_decisions(candidate.sch.trace) if isinstance(d, list)]
            seconds = 1e-4 * (1 + abs(math.log2(tiles[-1][-1]) - 3))
            database.commit_tuning_record(
                ms.database.TuningRecord(candidate.sch.trace, entry, [seconds], target, candidate.args_info)
            )
        records += load_sources([work_dir])
    return records


def test_seeded_conv2d_population_evolves(conv2d_sources, target):
    context = tune_context(make_workload("conv2d", TARGET_SHAPE), target)
    spaces = context.generate_design_space()
    postprocs = list(context.space_generator.postprocs)
    sampler = TraceCopulaSampler(anchors=False).fit(conv2d_sources)
    proposals = sampler.propose(context.mod, target, spaces, postprocs, 8)
    seeds = [p.schedule for p in proposals]
    assert len(seeds) >= 4
    # order "density" without anchors: the repaired conditional centre is measured first
    encodings = sampler.encodings(context.mod, spaces, postprocs)
    encoding = max(encodings, key=lambda e: sampler.weights_[e.signature])  # the most-sourced space
    centre = encoding.repair(
        sampler.copulas_[encoding.signature].centre(task_descriptor(context.mod, target)).to_numpy()[0]
    )
    assert proposals[0].decisions == centre
    for seed in seeds:  # post-processing is marked, as in MetaSchedule's own samples
        kinds = [inst.kind.name for inst in seed.trace.insts]
        assert "EnterPostproc" in kinds
        assert any(k.startswith("Sample") for k in kinds[: kinds.index("EnterPostproc")])
    strategy = context.search_strategy
    strategy.pre_tuning(64, 8, spaces, ms.database.MemoryDatabase(), ms.cost_model.RandomModel())
    try:
        # Before the fix every one of these calls raised (6 of 6 in a 64-member conv2d run).
        for _ in range(2):
            fresh = list(_ffi_api.SearchStrategyEvolutionarySearchSampleInitPopulation(strategy, 8))
            evolved = _ffi_api.SearchStrategyEvolutionarySearchEvolveWithCostModel(strategy, seeds + fresh, 8)
            assert len(evolved) > 0
    finally:
        strategy.post_tuning()
