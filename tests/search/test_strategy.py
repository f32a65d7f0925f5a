"""The copula-seeded search strategy in real MetaSchedule runs, and the CLI hooks."""

from __future__ import annotations

import math
import re
import shutil
from dataclasses import replace

import numpy as np
import pytest
from log_helpers import warnings_of
from ms_helpers import sample_candidates, tiny_tune_tir, tune_context
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.cost_model import PyCostModel

from tenset_tools.ansor.records import LoadStats
from tenset_tools.metaschedule import iter_database_records
from tvm_transfer.cli import main
from tvm_transfer.cost_model import load_cost_model
from tvm_transfer.cost_model.gbdt import XGBoostCostModel
from tvm_transfer.search_strategy.copula import (
    CopulaSearch,
    TraceCopulaSampler,
    load_sources,
    pretrain_on_sources,
    trace_decisions,
)
from tvm_transfer.tuning.network import tune_network
from tvm_transfer.tuning.run import RunConfig
from tvm_transfer.tuning.session import TuneOptions
from tvm_transfer.tuning.task_selection import TaskSelection
from tvm_transfer.workloads import make_workload


@derived_object
class _Recorder(ms.measure_callback.PyMeasureCallback):
    """Records the decisions of every measured candidate, in measurement order."""

    def __init__(self) -> None:
        super().__init__()
        self.decisions: list = []

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        self.decisions += [trace_decisions(c.sch.trace) for c in measure_candidates]


@pytest.fixture(scope="module")
def source_dir(tmp_path_factory, target):
    """A database of another matmul shape: 24 real sampled candidates of its design space, with run times
    from a synthetic rule (faster when the innermost N tile is 16) instead of measurements, to keep the test
    fast; the strategy under test only reads traces and run times."""
    work_dir = tmp_path_factory.mktemp("source")
    workload = make_workload("matmul", (64, 64, 64))
    candidates = sample_candidates(tune_context(workload, target), 24)
    database = ms.database.JSONDatabase(work_dir=str(work_dir))
    entry = database.commit_workload(workload.ir_module())
    for candidate in candidates:
        inner_n = trace_decisions(candidate.sch.trace)[1][-1]
        seconds = 1e-4 * (1 + abs(math.log2(inner_n) - 4))
        database.commit_tuning_record(
            ms.database.TuningRecord(candidate.sch.trace, entry, [seconds], target, candidate.args_info)
        )
    return work_dir


def _inner_n_distance(decisions) -> float:
    """How far a candidate is from the sources' rule (innermost N tile 16), in log2 steps."""
    return abs(math.log2(decisions[1][-1]) - 4)


def _tune(target, strategy, trials, work_dir, cost_model="random"):
    recorder = _Recorder()
    matmul = make_workload("matmul", (64, 128, 64))
    tiny_tune_tir(
        matmul, target, work_dir, cost_model, trials=trials, strategy=strategy, seed=None,
        trials_per_iter=3, callbacks=[recorder], num_threads=2,
    )  # fmt: skip
    return recorder.decisions


def test_first_measured_candidates_are_the_copula_samples(target, source_dir, tmp_path):
    records = load_sources([source_dir])
    assert len(records) == 24 and all(r.descriptor["a0_d0"] == 6.0 for r in records)  # log2(64)
    sampler = TraceCopulaSampler().fit(records)
    proposals: list = []  # tune_tir tunes a clone of the strategy; the log is shared with it
    strategy = CopulaSearch(sampler, proposal_log=proposals, population_size=16, init_min_unmeasured=4)
    measured = _tune(target, strategy, 6, tmp_path)
    assert len(proposals) == 3 and len(measured) == 6
    assert measured[:3] == [p.decisions for p in proposals]
    assert all(d not in measured[:3] for d in measured[3:])  # evolution continues with new candidates

    # the copula learned the sources' preference (innermost N tile near 16) better than their average
    sources = [_inner_n_distance(r.decisions) for r in records]
    assert sum(_inner_n_distance(p.decisions) for p in proposals) / 3 < sum(sources) / len(sources)


def test_pretrain_on_sources_skips_corrupt_records_and_the_excluded_task(source_dir, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(source_dir, copy)
    with open(copy / "database_tuning_record.json", "a") as records:
        records.write("[0, {not json\n")
    assert pretrain_on_sources(XGBoostCostModel(num_rounds=5), [copy]).num_samples == 24
    assert "skipped corrupt record" in capsys.readouterr().err
    assert pretrain_on_sources(XGBoostCostModel(num_rounds=5), [tmp_path]).num_samples == 24  # its folder
    source_task = make_workload("matmul", (64, 64, 64)).ir_module()
    assert pretrain_on_sources(XGBoostCostModel(), [copy], exclude=source_task).num_samples == 0
    with pytest.raises(FileNotFoundError, match="no MetaSchedule database"):
        pretrain_on_sources(XGBoostCostModel(), [tmp_path / "missing"])


def test_anchors_propose_the_best_source_tilings_first(target, source_dir):
    records = load_sources([source_dir])
    context = tune_context(make_workload("matmul", (64, 128, 64)), target)
    spaces, postprocs = context.generate_design_space(), list(context.space_generator.postprocs)
    sampler = TraceCopulaSampler().fit(records)
    proposals = sampler.propose(context.mod, target, spaces, postprocs, 6)
    anchors = [
        encoding.repair(row)
        for encoding in sampler.encodings(context.mod, spaces, postprocs)
        for row in sampler.copulas_[encoding.signature].kept_rows_[encoding.columns].to_numpy()
    ]
    is_anchor = [p.decisions in anchors for p in proposals]
    assert len(anchors) >= 2 and is_anchor[0]
    assert is_anchor == sorted(is_anchor, reverse=True)  # every anchor before any draw
    # the kept sources are the fastest by the rule (innermost N tile near 16); repaired to N=128 they keep it
    kept = [_inner_n_distance(p.decisions) for p, anchor in zip(proposals, is_anchor, strict=True) if anchor]
    sources = [_inner_n_distance(r.decisions) for r in records]
    assert max(kept) < sum(sources) / len(sources), (kept, sources)


def test_sources_with_more_arguments_in_the_same_design_space_are_used(target, source_dir):
    # Fused tasks of one design space can have more arguments (a residual input): half the sources, the first
    # among them, carry a fourth argument. The copula conditions on the columns all sources have, keeps
    # every record, and proposes for the 3-argument target; a task lacking a column every source has gets
    # a warning and no proposals instead of an error.
    records = load_sources([source_dir])
    extra = {"a3_d0": 6.0, "a3_d1": 6.0}
    mixed = [
        replace(r, descriptor={**r.descriptor, **extra}) if i % 2 == 0 else r for i, r in enumerate(records)
    ]
    context = tune_context(make_workload("matmul", (64, 128, 64)), target)
    spaces, postprocs = context.generate_design_space(), list(context.space_generator.postprocs)
    sampler = TraceCopulaSampler().fit(mixed)
    assert sampler.weights_ == TraceCopulaSampler().fit(records).weights_  # no record dropped
    assert len(sampler.propose(context.mod, target, spaces, postprocs, 4)) == 4

    wider = TraceCopulaSampler().fit([replace(r, descriptor={**r.descriptor, **extra}) for r in records])
    with warnings_of("tvm_transfer.search_strategy.copula.sampler") as messages:
        assert wider.propose(context.mod, target, spaces, postprocs, 4) == []
    assert any("a3_d0" in m for m in messages)


def test_few_shot_measures_only_the_copula_samples(target, source_dir, tmp_path):
    sampler = TraceCopulaSampler(order="sample").fit(load_sources([source_dir]))
    proposals: list = []
    strategy = CopulaSearch(sampler, num_seeds=2, few_shot=True, proposal_log=proposals)
    measured = _tune(target, strategy, 6, tmp_path)
    assert measured == [p.decisions for p in proposals] and len(measured) == 2


def test_budget_command_and_errors(source_dir, capsys, tmp_path):
    assert main(["budget", "matmul", "--shape", "64,128,64", "--seed-from", str(source_dir),
                 "--max-draws", "256"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "few-shot budget" in out and "unique copula samples" in out
    with pytest.raises(FileNotFoundError, match="no MetaSchedule database"):
        load_sources([tmp_path])
    assert main(["tune", "matmul", "--shape", "8,8,8", "--few-shot", "--work-dir", str(tmp_path / "w")]) == 2
    assert "--few-shot: not used by this run; give --seed-from" in capsys.readouterr().err
    flags = ["tune", "matmul", "--shape", "8,8,8", "--pretrain-on-sources", "--work-dir", str(tmp_path / "w")]
    assert main(flags) == 2
    assert "--pretrain-on-sources needs --seed-from" in capsys.readouterr().err


def test_cli_few_shot_tune_with_a_pretrained_cost_model(source_dir, tmp_path, capsys):
    work_dir = tmp_path / "w"
    assert main(["tune", "matmul", "--shape", "64,128,64", "--seed-from", str(source_dir),
                 "--pretrain-on-sources", "--few-shot", "--trials", "2", "--work-dir", str(work_dir),
                 "--no-reference", "--quiet"]) == 0  # fmt: skip
    assert len(load_sources([work_dir])) == 2 and "matmul" in capsys.readouterr().out


def _pool_orders(target, source_dir, model) -> tuple[list, list]:
    """The decisions of the copula's first 8 candidates for matmul 64x128x64: in its order, and in
    ``model``'s (best predicted first)."""
    context = tune_context(make_workload("matmul", (64, 128, 64)), target)
    spaces, postprocs = context.generate_design_space(), list(context.space_generator.postprocs)
    sampler = TraceCopulaSampler().fit(load_sources([source_dir]))
    pool = sampler.propose(context.mod, target, spaces, postprocs, 8, seed=0)
    scores = model.predict(context, [ms.MeasureCandidate(p.schedule, None) for p in pool])
    return [p.decisions for p in pool], [
        pool[i].decisions for i in sorted(range(8), key=lambda i: -scores[i])
    ]


def test_rank_pool_measures_the_copula_candidates_in_the_cost_models_order(target, source_dir, tmp_path):
    model = pretrain_on_sources(XGBoostCostModel(num_rounds=20), [source_dir])
    copula_order, model_order = _pool_orders(target, source_dir, model)
    assert model_order != copula_order  # the model disagrees with the copula's order

    sampler = TraceCopulaSampler().fit(load_sources([source_dir]))
    strategy = CopulaSearch(sampler, num_seeds=2, few_shot=True, rank_pool=8)
    assert _tune(target, strategy, 8, tmp_path, cost_model=model) == model_order
    with pytest.raises(ValueError, match="rank_pool must be >= 0"):
        CopulaSearch(sampler, rank_pool=-1)


def test_a_rank_pool_larger_than_the_seeds_lets_the_cost_model_choose_them(target, source_dir, tmp_path):
    # Evolution mode: the model picks the 3 measured seeds out of a pool of 8 copula candidates; the other 5
    # are not measured up front (they only join the population), and evolution fills the budget.
    model = pretrain_on_sources(XGBoostCostModel(num_rounds=20), [source_dir])
    copula_order, model_order = _pool_orders(target, source_dir, model)
    assert model_order[:3] != copula_order[:3]  # the model's seeds are not the copula's first three

    sampler = TraceCopulaSampler().fit(load_sources([source_dir]))
    strategy = CopulaSearch(sampler, num_seeds=3, rank_pool=8, population_size=16, init_min_unmeasured=4)
    measured = _tune(target, strategy, 6, tmp_path, cost_model=model)
    assert measured[:3] == model_order[:3] and len(measured) == 6
    assert measured[3:] != model_order[3:6]  # the second batch is evolved, not the rest of the pool
    assert all(d not in measured[:3] for d in measured[3:])


@derived_object
class _FirstPopulations(PyCostModel):
    """Random scores; keeps the decisions of the first candidates it scores after each measured batch (and
    before the first): the population an evolution starts from, or the pool a search ranks."""

    def __init__(self) -> None:
        self.populations: list[set[str]] = []
        self._batch_done = True
        self._rng = np.random.default_rng(0)

    def load(self, path: str) -> None:
        pass

    def save(self, path: str) -> None:
        pass

    def update(self, context, candidates, results) -> None:
        self._batch_done = True

    def predict(self, context, candidates) -> np.ndarray:
        if self._batch_done:
            self.populations.append({repr(trace_decisions(c.sch.trace)) for c in candidates})
            self._batch_done = False
        return self._rng.random(len(candidates))


@pytest.mark.parametrize("keep_seeds", [True, False])
def test_seeds_join_every_evolution_or_only_the_first(target, source_dir, tmp_path, keep_seeds):
    # One seed measured first out of a pool of 8, then two evolved batches: the 2nd evolution starts from
    # the seeds never measured only when they are kept.
    sampler = TraceCopulaSampler().fit(load_sources([source_dir]))
    proposals: list = []
    strategy = CopulaSearch(
        sampler, num_seeds=1, rank_pool=8, proposal_log=proposals, keep_seeds=keep_seeds,
        population_size=16, init_min_unmeasured=4,
    )  # fmt: skip
    model = _FirstPopulations()
    measured = {repr(d) for d in _tune(target, strategy, 7, tmp_path, cost_model=model)}
    seeds = {repr(p.decisions) for p in proposals}
    never_measured = seeds - measured
    pool, first_evolution, second_evolution = model.populations
    assert pool == seeds and len(never_measured) >= 2
    assert never_measured <= first_evolution
    assert (never_measured <= second_evolution) if keep_seeds else not (never_measured & second_evolution)


def test_cli_tunes_from_a_saved_model_that_chooses_the_first_batch(target, source_dir, tmp_path, capsys):
    model_file = tmp_path / "xgb.model"
    pretrain_on_sources(XGBoostCostModel(num_rounds=20), [source_dir]).save(str(model_file))
    _, model_order = _pool_orders(target, source_dir, load_cost_model(model_file))

    work_dir = tmp_path / "w"
    common = ["tune", "matmul", "--shape", "64,128,64", "--seed-from", str(source_dir), "--few-shot",
              "--trials", "2", "--no-reference", "--quiet"]  # fmt: skip
    assert (
        main([*common, "--model-file", str(model_file), "--rank-pool", "8", "--work-dir", str(work_dir)]) == 0
    )
    measured = {repr(r.decisions) for r in load_sources([work_dir])}
    assert measured == {repr(d) for d in model_order[:2]}

    (tmp_path / "not_a_model").write_text("{}")
    assert (
        main([*common, "--model-file", str(tmp_path / "not_a_model"), "--work-dir", str(tmp_path / "x")]) == 2
    )
    assert re.search(r"--model-file: .*not_a_model", capsys.readouterr().err)
    with pytest.raises(SystemExit) as info:
        main([*common, "--rank-pool", "-1", "--work-dir", str(tmp_path / "y")])
    assert info.value.code == 2 and "--rank-pool: -1 is out of range: >= 0" in capsys.readouterr().err


def test_cli_tune_network_starts_each_task_from_the_source_runs_best(target, tmp_path, capsys):
    # Source: an earlier run of the mlp network's heaviest task, in a folder like `tenset-tools collect`'s.
    source = tmp_path / "collected" / "mlp_run"
    options = TuneOptions(trials=8, trials_per_iter=4, population_size=16, progress=False)
    run = RunConfig.make("mlp", source, target=target, options=options)
    tune_network(run, selection=TaskSelection(flops_share=0.7, transfer=False))
    best = min(load_sources([source]), key=lambda r: r.seconds)

    work_dir = tmp_path / "w"
    flags = ["tune-network", "mlp", "--flops-share", "0.7", "--no-schedule-transfer", "--quiet"]
    flags += ["--work-dir", str(work_dir), "--trials", "4", "--trials-per-iter", "4", "--population", "16"]
    assert main([*flags, "--seed-from", str(tmp_path / "collected")]) == 0
    first = next(iter_database_records(work_dir, LoadStats()))[1]
    assert trace_decisions(first.trace) == best.decisions  # the anchor is measured first

    (tmp_path / "empty").mkdir()
    assert main([*flags, "--seed-from", str(tmp_path / "empty")]) == 2
    assert re.search(r"--seed-from: .*empty: no MetaSchedule database", capsys.readouterr().err)
