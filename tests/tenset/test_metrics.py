import math

import numpy as np
import pandas as pd
import pytest

from tenset_tools.metrics import (
    average_peak_score,
    best_latency_ratio,
    evaluate_predictions,
    network_topk_score,
    pairwise_accuracy,
    rmse,
    running_best,
    trials_to_reach,
)


def test_rmse_hand_computed():
    assert rmse([1.0, 0.0], [0.5, 0.5]) == 0.5
    assert rmse([0.2, 0.4, 1.0], [0.2, 0.1, 0.6]) == pytest.approx(math.sqrt((0.09 + 0.16) / 3))


def test_pairwise_accuracy_hand_computed():
    # Pairs (0,1) and (0,2) agree, (1,2) is inverted.
    assert pairwise_accuracy([1, 2, 3], [1, 3, 2]) == pytest.approx(2 / 3)
    # Second group (2 records) inverted: (3·2/3 + 2·0) / 5.
    labels, preds, groups = [1, 2, 3, 1, 0], [1, 3, 2, 0, 1], ["a", "a", "a", "b", "b"]
    assert pairwise_accuracy(labels, preds, groups) == pytest.approx(0.4)
    # TenSet's convention: tied labels agree with non-greater predictions; a single record scores 0.5.
    assert pairwise_accuracy([1, 1], [0, 1]) == 1.0
    assert pairwise_accuracy([1, 1], [1, 0]) == 0.0
    assert pairwise_accuracy([0.3], [0.1]) == 0.5


def test_pairwise_accuracy_blocks_match_brute_force():
    rng = np.random.default_rng(0)
    labels, preds = rng.random(2500), np.round(rng.random(2500), 2)  # more rows than one block; ties
    agree = (preds[:, None] > preds[None, :]) == (labels[:, None] > labels[None, :])
    brute = agree[np.triu_indices(2500, k=1)].mean()
    assert pairwise_accuracy(labels, preds) == pytest.approx(brute)
    assert pairwise_accuracy(labels, labels + 1) == 1.0


def test_average_peak_score_hand_computed():
    labels, preds = [0.2, 1.0, 0.5, 0.8], [0.9, 0.1, 0.8, 0.7]
    # Predicted order picks labels 0.2, 0.5, 0.8, 1.0.
    assert average_peak_score(labels, preds, 1) == pytest.approx(0.2)
    assert average_peak_score(labels, preds, 2) == pytest.approx(0.35)
    assert average_peak_score(labels, preds, 4) == pytest.approx(0.625)
    assert average_peak_score(labels, preds, 10) == pytest.approx(0.625)
    # Weighted by group size: (4·0.2 + 2·1.0) / 6; an all-invalid group is skipped.
    groups = ["a"] * 4 + ["b"] * 2 + ["c"] * 2
    both = average_peak_score([*labels, 0.5, 1.0, 0.0, 0.0], [*preds, 0.0, 1.0, 0.3, 0.1], 1, groups)
    assert both == pytest.approx((4 * 0.2 + 2 * 1.0) / 6)


def test_network_topk_score_hand_computed():
    latencies = [1.0, 2.0, 4.0, 3.0, math.nan]
    preds = [0.1, 0.9, 0.5, 0.8, 0.2]
    groups = ["A", "A", "A", "B", "B"]
    weights = [2, 2, 2, 1, 1]
    # Task A (w=2): best 1; top-1 picks 2, top-2 still 2, top-3 reaches 1. Task B (w=1): best 3 = top-1.
    assert network_topk_score(latencies, preds, groups, weights, 1) == pytest.approx(5 / 7)
    assert network_topk_score(latencies, preds, groups, weights, 2) == pytest.approx(5 / 7)
    assert network_topk_score(latencies, preds, groups, weights, 3) == pytest.approx(1.0)
    # The top-1 of B is now the invalid record: the network cannot run, the score is 0.
    assert network_topk_score(latencies, [0.1, 0.9, 0.5, 0.2, 0.8], groups, weights, 1) == 0.0


def test_evaluate_predictions_on_a_frame():
    frame = pd.DataFrame(
        {
            "task_id": ["a", "a", "a", "b", "b"],
            "target_id": ["x"] * 5,
            "norm_throughput": [1.0, 0.5, 0.25, 1.0, 0.5],
            "latency": [1.0, 2.0, 4.0, 3.0, 6.0],
            "weight": [1.0] * 5,
        }
    )
    perfect = evaluate_predictions(frame, frame["norm_throughput"], ks=(1,))
    assert perfect == {"rmse": 0.0, "pairwise_accuracy": 1.0, "peak@1": 1.0, "top-1": 1.0}
    inverted = evaluate_predictions(frame, -frame["norm_throughput"], ks=(1,))
    assert inverted["pairwise_accuracy"] == 0.0
    assert inverted["peak@1"] == pytest.approx((3 * 0.25 + 2 * 0.5) / 5)
    assert inverted["top-1"] == pytest.approx((1 + 3) / (4 + 6))


def test_tuning_curve_metrics():
    latencies = [5.0, math.nan, 3.0, 4.0, 2.0]
    assert running_best(latencies).tolist() == [5.0, 5.0, 3.0, 3.0, 2.0]
    assert best_latency_ratio(latencies, 3, best_known=2.0) == 1.5
    assert best_latency_ratio(latencies, 100, best_known=2.0) == 1.0
    assert best_latency_ratio([math.nan], 1, best_known=2.0) == math.inf
    assert trials_to_reach(latencies, best_known=2.0, quality=0.6) == 3
    assert trials_to_reach(latencies, best_known=2.0, quality=1.0) == 5
    assert trials_to_reach(latencies, best_known=2.0, quality=1.1) is None
