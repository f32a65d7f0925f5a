import numpy as np
import pandas as pd
import pytest
from tenset_helpers import make_record

from tenset_tools.prune import compare_pruning, prune, pruning_features
from tenset_tools.schema import add_normalised_throughput, records_to_table


def _records(task, target, latencies, flops, **extra):
    return [make_record(task, target, latency, flops=flops, **extra) for latency in latencies]


def _good(n):
    return [1e-3 * (1 + 0.01 * i) for i in range(n)]


@pytest.fixture
def frame() -> pd.DataFrame:
    records = (
        _records("A", "x", _good(60) + [0.1] * 5 + [None] * 3, 1e9)
        + _records("A", "y", _good(10), 1e9)
        + _records("B", "x", _good(25), 5e8, network="n1")
        + _records("B", "x", _good(25), 5e8, network="n2")
        + _records("C", "x", _good(60), 1e7)
        + _records("D", "x", _good(60), float("nan"))
    )
    return add_normalised_throughput(records_to_table(records).to_pandas())


def test_prune_applies_every_rule_and_reports_it(frame):
    pruned, report = prune(frame, flops_coverage=0.9, min_records=48, min_norm_throughput=0.05)
    assert report.records_before == 248
    assert report.dropped_by_flops == 120  # C (1e7) and D (unknown FLOPs) carry 0.5% of the work
    assert report.dropped_invalid == 3
    assert report.dropped_low_performance == 5
    assert report.dropped_few_records == 10  # A on target y
    assert report.records_after == len(pruned) == 110
    assert (report.tasks_before, report.tasks_after) == (4, 2)
    assert report.flops_kept_fraction == pytest.approx(2e9 / 2.01e9)
    assert report.size_reduction == pytest.approx(1 - 110 / 248)
    assert report.as_dict()["size_reduction"] == report.size_reduction
    assert sorted(set(zip(pruned["task_id"], pruned["target_id"], strict=True))) == [("A", "x"), ("B", "x")]
    assert pruned["valid"].all() and pruned["norm_throughput"].max() == 1.0


def test_weights_decide_which_tasks_carry_the_flops(frame):
    # B's 5e8 FLOPs occur twice (two networks): it ties with A (49.75% each), so 40% keeps only one.
    _, report = prune(frame, flops_coverage=0.4, min_records=1, min_norm_throughput=0.0, drop_invalid=False)
    assert report.tasks_after == 1
    assert report.flops_kept_fraction == pytest.approx(1e9 / 2.01e9)
    pruned, report = prune(
        frame, flops_coverage=1.0, min_records=1, min_norm_throughput=0.0, drop_invalid=False
    )
    assert report.records_after == 248 - 60  # only D, whose FLOPs are unknown, is outside full coverage
    assert (~pruned["valid"]).sum() == 3


def _learnable(n_tasks, n, seed):
    """Records whose first step argument determines the latency, so a model can learn the ranking."""
    rng = np.random.default_rng(seed)
    records = []
    for t in range(n_tasks):
        for _ in range(n):
            knob = int(rng.integers(1, 64))
            seq = np.zeros((3, 5), dtype=np.float32)
            seq[0, 0], seq[1, 1] = knob, t
            latency = 1e-3 * (1 + abs(knob - 20) / 10) * (1 + t)
            records.append(make_record(f"t{t}", "x", latency, sequence_features=seq))
    return add_normalised_throughput(records_to_table(records).to_pandas())


def test_pruning_features_pads_sequences_and_appends_hardware():
    frame = _learnable(1, 2, seed=0)
    x = pruning_features(frame, max_steps=4)
    assert x.shape == (2, 4 * 5 + 2)
    assert x[0, 0] == frame["sequence_features"].iloc[0][0][0]
    assert x[:, -2:].tolist() == [[4.0, 64.0], [4.0, 64.0]]
    with_kernel = frame.assign(kernel_features=[np.array([1.0, 2.0])] * 2)
    assert pruning_features(with_kernel).tolist() == [[1.0, 2.0, 4.0, 64.0]] * 2


class LeastSquares:
    """A user-supplied sklearn-style estimator (the protocol compare_pruning accepts)."""

    def fit(self, X, y):
        self.coef, *_ = np.linalg.lstsq(np.c_[X, np.ones(len(X))], y, rcond=None)
        return self

    def predict(self, X):
        return np.c_[X, np.ones(len(X))] @ self.coef


def test_compare_pruning_trains_both_and_scores_on_the_same_test():
    train, test = _learnable(3, 120, seed=1), _learnable(3, 40, seed=2)
    pruned, _ = prune(train, flops_coverage=1.0, min_records=10, min_norm_throughput=0.5)
    result = compare_pruning(train, pruned, test, max_steps=3)
    assert result["train_records_full"] == 360 and result["train_records_pruned"] == len(pruned) < 360
    assert result["pairwise_accuracy_full"] > 0.9
    assert 0.5 < result["pairwise_accuracy_pruned"] <= 1.0
    linear = compare_pruning(train, pruned, test, estimator=LeastSquares(), max_steps=3)
    assert set(linear) == set(result)
    assert linear["pairwise_accuracy_full"] < result["pairwise_accuracy_full"]  # |knob - 20| is not linear
