"""Task schedulers: the first round's batch size, the weighted-share priority, and a real network run
whose every batch after the first round went to the task the contract names."""

import math

import pytest

from tvm_transfer.task_scheduler import WeightedShareScheduler, first_round_batch, make_task_scheduler
from tvm_transfer.tuning.network import extract_network_tasks, tune_network
from tvm_transfer.tuning.session import TuneOptions


def test_first_round_takes_at_most_the_schedulers_share_of_the_budget():
    # 400 trials over 51 tasks: MetaSchedule's first round takes 7 x 51 = 357, the weighted share 3 x 51.
    assert first_round_batch("gradient", 16, 400, 51) == 7
    assert first_round_batch("weighted-share", 16, 400, 51) == 3
    assert first_round_batch("weighted-share", 16, 10_000, 51) == 16  # never above trials_per_iter
    assert first_round_batch("weighted-share", 16, 20, 51) == 1  # every task gets a trial if it can
    with pytest.raises(ValueError, match="gradient, weighted-share"):
        first_round_batch("round-robin", 16, 400, 51)


def test_a_given_first_round_share_overrides_the_schedulers():
    assert first_round_batch("weighted-share", 16, 400, 51, share=1.0) == 7  # the gradient's batches
    assert first_round_batch("gradient", 16, 400, 51, share=0.5) == 3
    for share in (0.0, 1.5, -0.5):
        with pytest.raises(ValueError, match=r"first-round share must be in \(0, 1\]"):
            first_round_batch("gradient", 16, 400, 51, share=share)


def test_an_unknown_scheduler_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="unknown task scheduler 'greedy'; choose one of gradient"):
        make_task_scheduler("greedy", [], [])
    scheduler, callbacks = make_task_scheduler("weighted-share", [1e-3], [4])
    assert len(callbacks) == 1 and scheduler.trials == [4]


def test_priority_is_weighted_latency_per_trial_and_unmeasured_tasks_come_first():
    scheduler = WeightedShareScheduler([2e-3, 1e-3, math.inf, math.inf], [4, 1, 3, 0])
    assert scheduler.priority(0, 3.0) == pytest.approx(3 * 2e-3 / 4)
    assert scheduler.priority(1, 1.0) == pytest.approx(1e-3)
    # Every trial failed: as slow as the slowest measured task, so it is retried but does not hog the run.
    assert scheduler.priority(2, 1.0) == pytest.approx(2e-3 / 3)
    assert scheduler.priority(3, 1.0) == math.inf
    scheduler.record(1, [0.5e-3, math.inf])
    assert scheduler.bests[1] == 0.5e-3 and scheduler.trials[1] == 3
    with pytest.raises(ValueError, match="2 best latencies for 1 trial counts"):
        WeightedShareScheduler([1.0, 2.0], [1])


@pytest.mark.slow  # ~35 s: a real run in batches of one; the scheduler is an option, not the default
def test_a_real_run_gives_every_batch_after_the_first_round_to_the_largest_share_per_trial(target, tmp_path):
    tasks = extract_network_tasks("bert_tiny_layer", target)
    weights = [float(t.weight) for t in tasks]
    budget = 2 * len(tasks)
    options = TuneOptions(trials=budget, trials_per_iter=8, population_size=16, progress=False)
    result = tune_network(
        "bert_tiny_layer", tmp_path, target=target, options=options, tasks=tasks, tasks_by_work=True,
        task_scheduler="weighted-share",
    )  # fmt: skip
    rounds = result.rounds
    assert sum(r["batch"] for r in rounds) >= budget
    # First round: one candidate per task (half the budget over the tasks rounds down to 1), each task once.
    first = [r["task"] for r in rounds[: len(tasks)]]
    assert sorted(first) == list(range(len(tasks))) and {r["batch"] for r in rounds[: len(tasks)]} == {1}
    later = rounds[len(tasks) :]
    assert later, "the budget left after the first round was not measured"
    trials = [1] * len(tasks)
    for before, row in zip(rounds[len(tasks) - 1 :], later, strict=False):
        slowest = max(b for b in before["best_ms"] if b is not None)  # what a failed-only task counts as
        share = [
            w * (b if b is not None else slowest) / n
            for w, b, n in zip(weights, before["best_ms"], trials, strict=True)
        ]
        # A task picked again later was alive at this pick; none of them may outrank the picked one
        # (a task whose search ended may, the scheduler skips it).
        alive = {r["task"] for r in rounds[rounds.index(row) :]}
        assert all(share[row["task"]] >= share[other] for other in alive), (row, share)
        trials[row["task"]] += row["batch"]
    # The budget left went to few tasks, the heaviest by share, not evenly.
    assert max(trials) >= 4
