"""Cost-model and tuning metrics, one implementation (TenSet's definitions, Zheng et al. NeurIPS'21).

Labels are normalised throughputs (task best latency / latency, in [0, 1]; higher is better) and
predictions are scores where higher means faster. Per-task metrics are computed within each group (a
(task, target) pair) and averaged with weights = group sizes, as TenSet's ``evaluate_model`` does.
Sources: TenSet ``python/tvm/auto_scheduler/cost_model/metric.py``, ``scripts/train_model.py``,
``scripts/eval_model_on_dataset.py`` (see ``docs/tenset_tools.md``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from .frame import group_keys

__all__ = [
    "average_peak_score",
    "best_latency_ratio",
    "evaluate_predictions",
    "network_topk_score",
    "pairwise_accuracy",
    "rmse",
    "running_best",
    "trials_to_reach",
]

# Pairwise comparisons are evaluated in row blocks so a 10 000-record task needs O(block·n) memory.
_PAIR_BLOCK = 1024


def rmse(labels: Sequence[float], preds: Sequence[float]) -> float:
    """Root-mean-square error. TenSet's size-weighted per-task aggregate equals the RMSE over all rows."""
    labels, preds = np.asarray(labels, dtype=np.float64), np.asarray(preds, dtype=np.float64)
    return float(np.sqrt(np.mean((labels - preds) ** 2)))


def _group_indices(n: int, groups: Sequence | None) -> list[np.ndarray]:
    if groups is None:
        return [np.arange(n)]
    codes, _ = pd.factorize(pd.Series(groups), sort=False)
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    return np.split(order, bounds)


def _weighted_mean(per_group: Callable[[np.ndarray], float | None], n: int, groups: Sequence | None) -> float:
    total, weight = 0.0, 0
    for index in _group_indices(n, groups):
        value = per_group(index)
        if value is not None:
            total += value * len(index)
            weight += len(index)
    return total / weight if weight else float("nan")


def _pairwise_one(labels: np.ndarray, preds: np.ndarray) -> float:
    n = len(labels)
    if n <= 1:
        return 0.5
    agree = 0
    for start in range(0, n - 1, _PAIR_BLOCK):
        rows = slice(start, min(start + _PAIR_BLOCK, n - 1))
        pred_greater = preds[rows, None] > preds[None, :]
        label_greater = labels[rows, None] > labels[None, :]
        # Only pairs i < j: column index above the row index.
        upper = np.arange(n)[None, :] > np.arange(rows.start, rows.stop)[:, None]
        agree += int(np.count_nonzero((pred_greater == label_greater) & upper))
    return agree / (n * (n - 1) / 2)


def pairwise_accuracy(
    labels: Sequence[float], preds: Sequence[float], groups: Sequence | None = None
) -> float:
    """Fraction of pairs i<j whose order agrees: ``(pred_i > pred_j) == (label_i > label_j)``.

    Per group (a group of one scores 0.5, as in TenSet), averaged with group-size weights.
    """
    labels, preds = np.asarray(labels, dtype=np.float64), np.asarray(preds, dtype=np.float64)
    return _weighted_mean(lambda i: _pairwise_one(labels[i], preds[i]), len(labels), groups)


def _peak_one(labels: np.ndarray, preds: np.ndarray, k: int) -> float | None:
    best = labels.max()
    if best <= 0:
        return None
    chosen = labels[np.argsort(-preds, kind="stable")[:k]]
    return float(np.mean(np.maximum.accumulate(chosen) / best))


def average_peak_score(
    labels: Sequence[float], preds: Sequence[float], k: int, groups: Sequence | None = None
) -> float:
    """Average peak score@k: over the k best-predicted records, in predicted order, the mean of the
    running best label divided by the group's best label (peak@1 = label of the top prediction / best).

    Averaged over groups with group-size weights; groups without a positive label are skipped.
    """
    labels, preds = np.asarray(labels, dtype=np.float64), np.asarray(preds, dtype=np.float64)
    return _weighted_mean(lambda i: _peak_one(labels[i], preds[i], k), len(labels), groups)


def network_topk_score(
    latencies: Sequence[float],
    preds: Sequence[float],
    groups: Sequence,
    weights: Sequence[float],
    k: int,
) -> float:
    """Network-level top-k score: ``sum_m w_m·L*_m / sum_m w_m·min_{i<=k} L_m,i``.

    ``latencies`` are measured seconds (NaN/inf for invalid records), ``groups`` the task (and target) of
    each record and ``weights`` its task's occurrences in the network. L*_m is the best measured latency
    of task m; the minimum runs over its k best-predicted records. A task without a valid record is
    skipped; a task whose k chosen records are all invalid makes the score 0 (an unusable schedule).
    """
    latencies = np.asarray(latencies, dtype=np.float64)
    latencies = np.where(np.isfinite(latencies) & (latencies > 0), latencies, np.inf)
    preds, weights = np.asarray(preds, dtype=np.float64), np.asarray(weights, dtype=np.float64)
    best_sum = chosen_sum = 0.0
    for index in _group_indices(len(latencies), groups):
        best = latencies[index].min()
        if not np.isfinite(best):
            continue
        chosen = latencies[index][np.argsort(-preds[index], kind="stable")[:k]].min()
        weight = weights[index[0]]
        best_sum += weight * best
        chosen_sum += weight * chosen
    if chosen_sum == 0.0:
        return float("nan")
    return best_sum / chosen_sum


def evaluate_predictions(frame: pd.DataFrame, preds: Sequence[float], ks: Sequence[int] = (1, 5)) -> dict:
    """All per-record metrics of predictions on a schema frame (with ``norm_throughput`` filled).

    Groups are (task_id, target_id). Returns ``{"rmse", "pairwise_accuracy", "peak@k"..., "top-k"...}``,
    where ``top-k`` is the network-level score pooled over all tasks of the frame, weighted by ``weight``.
    """
    labels = frame["norm_throughput"].to_numpy(dtype=np.float64)
    preds = np.asarray(preds, dtype=np.float64)
    groups = group_keys(frame)
    result = {"rmse": rmse(labels, preds), "pairwise_accuracy": pairwise_accuracy(labels, preds, groups)}
    for k in ks:
        result[f"peak@{k}"] = average_peak_score(labels, preds, k, groups)
    latencies = frame["latency"].to_numpy(dtype=np.float64)
    weights = frame["weight"].to_numpy(dtype=np.float64)
    for k in ks:
        result[f"top-{k}"] = network_topk_score(latencies, preds, groups, weights, k)
    return result


def running_best(latencies: Sequence[float]) -> np.ndarray:
    """Best latency (seconds) after each trial, in trial order; invalid trials (NaN, inf, <= 0) are inf."""
    latencies = np.asarray(latencies, dtype=np.float64)
    usable = np.where(np.isfinite(latencies) & (latencies > 0), latencies, np.inf)
    return np.minimum.accumulate(usable)


def best_latency_ratio(latencies: Sequence[float], n_trials: int, best_known: float) -> float:
    """Best latency found in the first ``n_trials`` divided by the best known latency (1.0 = reached it;
    inf when no valid trial yet)."""
    curve = running_best(latencies)
    if n_trials < 1 or not len(curve):
        return float("inf")
    return float(curve[min(n_trials, len(curve)) - 1] / best_known)


def trials_to_reach(latencies: Sequence[float], best_known: float, quality: float) -> int | None:
    """Number of trials until ``best_known / best_so_far >= quality`` (e.g. 0.9 = within 90% of the best
    known throughput); ``None`` if never reached."""
    curve = running_best(latencies)
    reached = np.flatnonzero(best_known / curve >= quality)
    return int(reached[0]) + 1 if len(reached) else None
