"""FLOPs-aware dataset pruning (after Verma et al., "Transfer Learning Across Heterogeneous Features For
Efficient Tensor Program Generation", ExHET 2023, arXiv 2304.05430), and its check with a baseline model.

The rules, applied in this order:

1. keep the tasks that carry most of the work: tasks sorted by ``flops x weight`` (weight = occurrences
   of the task in its networks, summed over networks), kept until ``flops_coverage`` of the total is
   covered (tasks with unknown FLOPs count 0 and go first);
2. drop invalid measurements;
3. drop low performers: records whose normalised throughput is below ``min_norm_throughput`` of their
   (task, target) best;
4. drop (task, target) groups left with fewer than ``min_records`` records (TenSet's ``make_dataset.py``
   uses 48).

The paper does not publish its thresholds; the defaults here are ours. The report's pairwise accuracy
compares a baseline model trained on the pruned vs the full training data, on the same test data.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np
import pandas as pd

from .frame import feature_matrix, group_keys, hardware_matrix
from .metrics import pairwise_accuracy
from .schema import add_normalised_throughput

__all__ = [
    "PruneReport",
    "Regressor",
    "XGBBaseline",
    "compare_pruning",
    "covering_tasks",
    "prune",
    "pruning_features",
]


@dataclass
class PruneReport:
    records_before: int
    records_after: int
    tasks_before: int
    tasks_after: int
    flops_kept_fraction: float
    dropped_by_flops: int
    dropped_invalid: int
    dropped_low_performance: int
    dropped_few_records: int

    @property
    def size_reduction(self) -> float:
        """Fraction of records removed (0.45 = the pruned set is 45% smaller)."""
        return 1.0 - self.records_after / self.records_before if self.records_before else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "size_reduction": self.size_reduction}


def _task_work(frame: pd.DataFrame) -> pd.Series:
    """FLOPs x total occurrences per task; a task in several networks sums its weights over them."""
    per_network = frame.groupby(["task_id", frame["network"].fillna("")], sort=False).agg(
        flops=("flops", "first"), weight=("weight", "first")
    )
    per_task = per_network.groupby(level=0).agg(flops=("flops", "first"), weight=("weight", "sum"))
    return per_task["flops"].fillna(0.0) * per_task["weight"]


def covering_tasks(work: Sequence[float], coverage: float) -> tuple[list[int], float]:
    """The heaviest tasks whose work covers ``coverage`` (a fraction in (0, 1]) of the total work.

    ``work`` holds each task's work (e.g. FLOPs x calls; unknown FLOPs as 0). Returns the positions in
    ``work`` of the shortest prefix of the ranking by work (heaviest first, ties in input order) whose
    cumulative share reaches ``coverage``, and the share of the total work they carry. Tasks without work
    are never kept unless no task has any, in which case all are kept (share 1.0).
    """
    work = np.asarray(work, dtype=np.float64)
    total = work.sum()
    if total <= 0:
        return list(range(len(work))), 1.0
    ranked = np.argsort(-work, kind="stable")
    cumulative = np.cumsum(work[ranked]) / total
    # Keep every task up to and including the one that crosses the coverage.
    n_keep = min(int(np.searchsorted(cumulative, coverage - 1e-12) + 1), len(work))
    kept = [int(i) for i in ranked[:n_keep] if work[i] > 0]
    return kept, float(cumulative[n_keep - 1])


def prune(
    frame: pd.DataFrame,
    flops_coverage: float = 0.9,
    min_records: int = 48,
    min_norm_throughput: float = 0.05,
    drop_invalid: bool = True,
) -> tuple[pd.DataFrame, PruneReport]:
    """Prune a schema frame; returns the pruned frame (normalisation recomputed) and a report."""
    if not 0.0 < flops_coverage <= 1.0:
        raise ValueError(f"flops_coverage must be in (0, 1], got {flops_coverage}")
    before, tasks_before = len(frame), frame["task_id"].nunique()
    work = _task_work(frame)
    kept, kept_fraction = covering_tasks(work.to_numpy(), flops_coverage)
    kept_tasks = set(work.index[kept])
    current = frame[frame["task_id"].isin(kept_tasks)]
    dropped_by_flops = before - len(current)

    dropped_invalid = 0
    if drop_invalid:
        dropped_invalid = int((~current["valid"]).sum())
        current = current[current["valid"]]

    current = add_normalised_throughput(current)
    low = current["valid"] & (current["norm_throughput"] < min_norm_throughput)
    dropped_low = int(low.sum())
    current = current[~low]

    keys = pd.Series(group_keys(current), index=current.index)
    few = keys.map(keys.value_counts()) < min_records
    dropped_few = int(few.sum())
    current = add_normalised_throughput(current[~few].reset_index(drop=True))
    report = PruneReport(
        records_before=before,
        records_after=len(current),
        tasks_before=tasks_before,
        tasks_after=current["task_id"].nunique(),
        flops_kept_fraction=kept_fraction,
        dropped_by_flops=dropped_by_flops,
        dropped_invalid=dropped_invalid,
        dropped_low_performance=dropped_low,
        dropped_few_records=dropped_few,
    )
    return current, report


def _sequence_block(sequences: pd.Series, max_steps: int, width: int) -> np.ndarray:
    block = np.zeros((len(sequences), max_steps, width), dtype=np.float32)
    for i, sequence in enumerate(sequences):
        if sequence is None or len(sequence) == 0:
            continue
        rows = np.stack(list(sequence[:max_steps]))[:, :width]
        block[i, : rows.shape[0], : rows.shape[1]] = rows
    return block.reshape(len(sequences), -1)


def pruning_features(frame: pd.DataFrame, max_steps: int = 40, width: int | None = None) -> np.ndarray:
    """Model inputs of the baseline: kernel features when every record has them, else the per-step
    sequence features padded/cropped to ``max_steps`` rows of ``width`` values and flattened; the
    hardware features are appended either way. ``width`` defaults to the widest step row of the frame.
    """
    if frame["kernel_features"].notna().all():
        return feature_matrix(frame)
    if width is None:
        width = max((len(s[0]) for s in frame["sequence_features"] if s is not None and len(s)), default=0)
    return np.hstack([_sequence_block(frame["sequence_features"], max_steps, width), hardware_matrix(frame)])


class Regressor(Protocol):
    def fit(self, X: np.ndarray, y: np.ndarray) -> Any: ...

    def predict(self, X: np.ndarray) -> np.ndarray: ...


class XGBBaseline:
    """Small gradient-boosted-trees regressor on xgboost's native API (its sklearn wrapper needs
    scikit-learn, which is not a dependency). TenSet's XGB settings (depth 6, eta 0.2), fewer rounds."""

    def __init__(self, rounds: int = 200, seed: int = 0, threads: int = 2):
        self.params = {
            "max_depth": 6,
            "eta": 0.2,
            "min_child_weight": 2,
            "objective": "reg:squarederror",
            "seed": seed,
            "nthread": threads,
        }
        self.rounds = rounds
        self.booster = None

    def fit(self, X: np.ndarray, y: np.ndarray) -> XGBBaseline:
        import xgboost

        self.booster = xgboost.train(self.params, xgboost.DMatrix(X, label=y), num_boost_round=self.rounds)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        import xgboost

        if self.booster is None:
            raise RuntimeError("XGBBaseline.predict called before fit")
        return self.booster.predict(xgboost.DMatrix(X))


def compare_pruning(
    full_train: pd.DataFrame,
    pruned_train: pd.DataFrame,
    test: pd.DataFrame,
    estimator: Regressor | None = None,
    max_steps: int = 40,
    seed: int = 0,
) -> dict[str, float]:
    """Pairwise accuracy on ``test`` (grouped by task and target) of a baseline trained on the full and
    on the pruned training data. ``estimator`` is any object with ``fit(X, y)``/``predict(X)`` (copied
    for each fit); default: :class:`XGBBaseline`. Labels are normalised throughputs.
    """
    template = estimator if estimator is not None else XGBBaseline(seed=seed)
    width = max(
        (len(s[0]) for s in full_train["sequence_features"] if s is not None and len(s)), default=None
    )
    test_x = pruning_features(test, max_steps, width)
    groups = group_keys(test)
    labels = test["norm_throughput"].to_numpy()
    result = {}
    for name, train in (("full", full_train), ("pruned", pruned_train)):
        model = copy.deepcopy(template)
        model.fit(pruning_features(train, max_steps, width), train["norm_throughput"].to_numpy())
        result[f"pairwise_accuracy_{name}"] = pairwise_accuracy(labels, model.predict(test_x), groups)
        result[f"train_records_{name}"] = float(len(train))
    return result
