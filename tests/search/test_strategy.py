"""The copula-seeded search strategy in real MetaSchedule runs, and the CLI hooks."""

from __future__ import annotations

import math

import pytest
from ms_helpers import sample_candidates, tune_context
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from tvm_transfer.cli import main
from tvm_transfer.measure import PersistentBuilder, local_runner
from tvm_transfer.search import CopulaSearch, TraceCopulaSampler, load_sources, trace_decisions
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


def _tune(target, strategy, trials, work_dir):
    recorder = _Recorder()
    builder = PersistentBuilder()
    try:
        ms.tune_tir(
            mod=make_workload("matmul", (64, 128, 64)).ir_module(),
            target=target,
            work_dir=str(work_dir),
            max_trials_global=trials,
            num_trials_per_iter=3,
            strategy=strategy,
            builder=builder,
            runner=local_runner(num_threads=2),
            cost_model="random",
            measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), recorder],
        )
    finally:
        builder.shutdown()
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
    def distance(decisions):
        return abs(math.log2(decisions[1][-1]) - 4)

    sources = [distance(trace_decisions(r.trace)) for r in records]
    assert sum(distance(p.decisions) for p in proposals) / 3 < sum(sources) / len(sources)


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
    with pytest.raises(SystemExit, match="--few-shot needs --seed-from"):
        main(["tune", "matmul", "--shape", "8,8,8", "--few-shot", "--work-dir", str(tmp_path / "w")])
