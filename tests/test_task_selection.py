"""FLOPs-aware task selection and schedule transfer, on real networks' tasks and real tuning runs."""

from dataclasses import replace

import numpy as np
import pytest
import tvm
from tvm.s_tir import meta_schedule as ms

from tenset_tools.flops import estimate_flops
from tvm_transfer.cli import main
from tvm_transfer.search_strategy.replay import block_signature, replay_trace
from tvm_transfer.tuning.compile import compile_network
from tvm_transfer.tuning.network import tune_network
from tvm_transfer.tuning.plan import TuningPlan
from tvm_transfer.tuning.run import NetworkRun, RunConfig, extract_network_tasks
from tvm_transfer.tuning.schedule_transfer import transfer_schedules
from tvm_transfer.tuning.session import TuneOptions
from tvm_transfer.tuning.task_selection import (
    TaskSelection,
    allocate_trials,
    heaviest_first,
    plan_budget,
    select_tasks,
    task_work,
)
from tvm_transfer.tuning.workdir import open_database

BERT_MATMULS = {"fused_matmul3_add31", "fused_matmul4_add11", "fused_matmul_add1", "fused_matmul2_add11"}


@pytest.fixture(scope="module")
def bert_tasks(target):
    return extract_network_tasks("bert_tiny_layer", target)


def by_name(tasks, name):
    return next(t for t in tasks if getattr(t, "task_name", getattr(t, "name", None)) == name)


def test_work_and_shares_of_real_tasks(bert_tasks):
    works = task_work(bert_tasks)
    assert [w.name for w in works] == [t.task_name for t in bert_tasks]
    assert sum(w.share for w in works) == pytest.approx(1.0)
    norm = by_name(works, "layer_norm1")  # occurs twice per layer: its weight counts
    assert norm.weight == 2 and norm.work == pytest.approx(2 * norm.flops)
    assert by_name(works, "reshape1").work == 0.0


def test_flops_are_estimated_once_with_nan_for_unknown_and_no_work_for_them(bert_tasks, monkeypatch):
    matmul = by_name(bert_tasks, "fused_matmul2_add11")  # 64x128 @ 128x128 + bias
    assert estimate_flops(matmul.dispatched[0]) == pytest.approx(2 * 64 * 128 * 128 + 64 * 128)
    assert estimate_flops(by_name(bert_tasks, "reshape1").dispatched[0]) == 0.0

    def give_up(mod):
        raise RuntimeError("cannot estimate")

    monkeypatch.setattr(tvm.s_tir.analysis, "estimate_tir_flops", give_up)
    assert np.isnan(estimate_flops(matmul.dispatched[0]))
    unknown = task_work([matmul])[0]
    assert np.isnan(unknown.flops) and unknown.work == 0.0
    assert select_tasks([unknown], TaskSelection()) == [unknown]  # a network without known work: all


def test_flops_share_selects_the_smallest_covering_prefix(bert_tasks):
    works = task_work(bert_tasks)
    chosen = select_tasks(works, TaskSelection(flops_share=0.9))
    # The four linear layers carry ~91% of the work; three of them only ~84%.
    assert {w.name for w in chosen} == BERT_MATMULS
    shares = [w.share for w in chosen]
    assert shares == sorted(shares, reverse=True)
    assert sum(shares) >= 0.9 > sum(shares[:-1])
    three = select_tasks(works, TaskSelection(flops_share=0.8))
    assert [w.name for w in three] == [w.name for w in chosen[:3]]
    assert len(select_tasks(works, TaskSelection(flops_share=1.0, top_tasks=2))) == 2
    # Tasks without FLOPs (reshapes, slices) are never worth a trial.
    assert all(w.work > 0 for w in select_tasks(works, TaskSelection(flops_share=1.0)))


def test_budgets_are_proportional_with_a_floor():
    # Exact proportional split when every share is above the floor.
    assert allocate_trials([3.0, 1.0], 64, 8) == [48, 16]
    # A light task gets the floor; the rest is shared again in proportion.
    budgets = allocate_trials([100.0, 50.0, 1.0], 64, 8)
    assert budgets[2] == 8 and sum(budgets) == 64
    assert budgets[0] == pytest.approx(2 * budgets[1], abs=1)
    assert sum(allocate_trials([5.0, 3.0, 2.0], 33, 4)) == 33  # rounding keeps the total
    with pytest.raises(ValueError, match="cannot give 3 tasks 8 trials"):
        allocate_trials([1.0, 1.0, 1.0], 16, 8)


def test_budget_plan_on_a_real_network(bert_tasks):
    works = task_work(bert_tasks)
    chosen, budgets = plan_budget(works, TaskSelection(flops_share=0.9), total=128, batch=16)
    assert sum(budgets) == 128 and min(budgets) >= 16
    heavy = {w.name: b for w, b in zip(chosen, budgets, strict=True)}
    assert heavy["fused_matmul3_add31"] > heavy["fused_matmul_add1"] >= heavy["fused_matmul2_add11"]
    # A budget of two batches keeps only the two heaviest tasks (the others are left to transfer).
    chosen, budgets = plan_budget(works, TaskSelection(flops_share=0.9), total=32, batch=16)
    assert [w.name for w in chosen] == ["fused_matmul3_add31", "fused_matmul4_add11"] and budgets == [16, 16]


def test_bad_selection_is_rejected(capsys):
    with pytest.raises(ValueError, match="flops_share"):
        TaskSelection(flops_share=0.0)
    with pytest.raises(ValueError, match="top_tasks"):
        TaskSelection(top_tasks=0)
    assert main(["tune-network", "mlp", "--flops-share", "1.5"]) == 2
    assert "flops_share must be in" in capsys.readouterr().err


@pytest.fixture(scope="module")
def tuned_matmul(bert_tasks, target, small_options, tmp_path_factory):
    """A real 8-trial tune of BERT-tiny's QKV projection (64x128 @ 128x384 + bias)."""
    work_dir = tmp_path_factory.mktemp("tuned_matmul")
    source = by_name(bert_tasks, "fused_matmul_add1")
    options = replace(small_options, trials=8, population_size=16)
    config = RunConfig.make("bert_tiny_layer", work_dir, target=target, options=options)
    tune_network(NetworkRun(config, tasks=[source]))
    return source, work_dir


def test_a_tuned_trace_replays_on_another_shape_and_computes_the_reference(bert_tasks, target, tuned_matmul):
    source, work_dir = tuned_matmul
    database = open_database(work_dir)
    record = database.get_top_k(database.commit_workload(source.dispatched[0]), 1)[0]
    destination = by_name(bert_tasks, "fused_matmul2_add11")  # 64x128 @ 128x128: other extents
    mod = destination.dispatched[0]
    assert block_signature(mod) == block_signature(source.dispatched[0])
    context = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply", num_threads=1)
    sch, _ = replay_trace(record.trace, mod, context)
    assert any(inst.kind.name == "SamplePerfectTile" for inst in sch.trace.insts)
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype("float32") for s in [(64, 128), (128, 128), (128,)])
    out = tvm.runtime.tensor(np.zeros((64, 128), "float32"))
    tvm.compile(sch.mod, target=target)["main"](*map(tvm.runtime.tensor, (x, w, b)), out)
    np.testing.assert_allclose(out.numpy(), x @ w + b, rtol=1e-4, atol=1e-4)
    # A trace of another structure does not replay.
    norm = by_name(bert_tasks, "layer_norm1").dispatched[0]
    norm_context = ms.TuneContext(mod=norm, target=target, space_generator="post-order-apply", num_threads=1)
    with pytest.raises(ValueError, match="does not replay"):
        replay_trace(record.trace, norm, norm_context)


def test_transfer_commits_a_faster_valid_record(bert_tasks, target, tuned_matmul):
    source, work_dir = tuned_matmul
    database = open_database(work_dir)
    destination, norm = by_name(bert_tasks, "fused_matmul2_add11"), by_name(bert_tasks, "layer_norm1")
    moved, kept = transfer_schedules([destination, norm], [source], database, target, candidates=2)
    assert (moved.status, moved.source, moved.label) == (
        "transferred",
        "fused_matmul_add1",
        "transferred-from-fused_matmul_add1",
    ), moved
    assert moved.valid >= 1 and moved.seconds < moved.default_seconds
    assert (kept.status, kept.candidates) == ("default", 0) and "block structure" in kept.reason
    # The committed record is what compilation will find for the task.
    reloaded = open_database(work_dir)
    assert reloaded.query_schedule(destination.dispatched[0], target, destination.task_name) is not None
    assert reloaded.query_schedule(norm.dispatched[0], target, norm.task_name) is None


def test_heaviest_first_orders_by_work_and_keeps_ties_in_extraction_order(bert_tasks):
    works = task_work(bert_tasks)
    order = heaviest_first(works)
    assert sorted(order) == list(range(len(works)))
    ranked = [works[i].work for i in order]
    assert ranked == sorted(ranked, reverse=True)
    idle = [i for i in order if works[i].work == 0.0]
    assert len(idle) > 1 and idle == sorted(idle)
    assert {works[i].name for i in order[: len(BERT_MATMULS)]} == BERT_MATMULS


def test_small_budget_reaches_the_heaviest_tasks_first(bert_tasks, target, tmp_path):
    # One trial per batch for four of the block's tasks: in extraction order the first four are not the
    # four matmuls that carry most of its work.
    assert {t.task_name for t in bert_tasks[: len(BERT_MATMULS)]} != BERT_MATMULS
    options = TuneOptions(trials=len(BERT_MATMULS), trials_per_iter=1, population_size=16, progress=False)
    config = RunConfig.make(
        "bert_tiny_layer", tmp_path, target=target, options=options, plan=TuningPlan(tasks_by_work=True)
    )
    result = tune_network(NetworkRun(config, tasks=bert_tasks))
    assert {name for name, *_, trials in result.tasks if trials} == BERT_MATMULS


@pytest.mark.slow  # ~40 s on the shared 2-core machine
def test_network_tuned_with_selection_and_transfer_matches_pytorch(target, small_options, tmp_path):
    # mlp: the first layer carries ~75% of the FLOPs; the second (same structure) gets its schedule.
    options = replace(small_options, trials=8, population_size=16)
    run = NetworkRun(RunConfig.make("mlp", tmp_path, target=target, options=options))
    result = tune_network(run, selection=TaskSelection(flops_share=0.7))
    status = dict(zip([t[0] for t in result.tasks], result.status, strict=True))
    assert status == {
        "fused_matmul2_add21": "default",  # no ReLU: another block structure
        "fused_matmul1_add1_relu11": "transferred-from-fused_matmul_add_relu1",
        "fused_matmul_add_relu1": "tuned",
    }
    assert result.new_trials == 8 and result.selection["budgets"] == {"fused_matmul_add_relu1": 8}
    assert "transferred-from-fused_matmul_add_relu1" in result.table()
    compiled = compile_network(RunConfig.make("mlp", tmp_path, target=target), runtimes=(), rounds=1)
    assert compiled.max_abs_error < 1e-4 and compiled.tvm.seconds > 0


def test_cli_selection_flags():
    from tvm_transfer.cli import _selection, build_parser

    def parse(*flags):
        return _selection(build_parser().parse_args(["tune-network", "bert_tiny_layer", *flags]))

    assert parse() is None  # no flag: every task under the gradient scheduler, as before
    assert parse("--flops-share", "0.8") == TaskSelection(flops_share=0.8)
    assert parse("--top-tasks", "2", "--no-schedule-transfer") == TaskSelection(
        flops_share=0.9, top_tasks=2, transfer=False
    )
