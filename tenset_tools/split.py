"""Train/test splits of a schema frame: ``within_task``, ``by_task``, ``by_target`` (TenSet's three schemes).

All are seeded and reproducible (same frame, ratio and seed give the same split), and each side gets its
``norm_throughput`` recomputed from its own records, as TenSet does. Differences from TenSet's code, on
purpose: ``within_task`` draws a seeded random subset instead of taking the last records in file order;
``by_target`` shuffles the targets with the seed (TenSet iterates them reversed) and keeps the best
latencies, hence defined normalised throughputs (TenSet's ``random_split_by_target`` drops them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd

from .schema import add_normalised_throughput

__all__ = ["SPLIT_SCHEMES", "Split", "by_target", "by_task", "split", "within_task"]


class Split(NamedTuple):
    train: pd.DataFrame
    test: pd.DataFrame


def _finish(frame: pd.DataFrame, train_mask: np.ndarray) -> Split:
    train = add_normalised_throughput(frame[train_mask].reset_index(drop=True))
    test = add_normalised_throughput(frame[~train_mask].reset_index(drop=True))
    return Split(train, test)


def _check_ratio(train_ratio: float) -> None:
    if not 0.0 < train_ratio < 1.0:
        raise ValueError(f"train_ratio must be in (0, 1), got {train_ratio}")


def within_task(frame: pd.DataFrame, train_ratio: float = 0.9, seed: int = 0) -> Split:
    """Split the records of every (task, target) group: ``floor(train_ratio·n)`` (at least 1) go to train."""
    _check_ratio(train_ratio)
    keys = pd.Series(np.random.default_rng(seed).random(len(frame)), index=frame.index)
    groups = [frame["task_id"], frame["target_id"]]
    rank = keys.groupby(groups, sort=False).rank(method="first").to_numpy() - 1
    size = keys.groupby(groups, sort=False).transform("size").to_numpy()
    n_train = np.maximum(1, np.floor(train_ratio * size))
    return _finish(frame, rank < n_train)


def _fill_train(units: pd.Series, train_ratio: float, seed: int) -> set:
    """Shuffle the units (tasks or targets) and give whole units to train while the running record count
    stays within ``train_ratio`` of the total; the first unit always trains, the last always tests."""
    counts = units.value_counts().sort_index()
    if len(counts) < 2:
        raise ValueError(f"need at least 2 distinct {units.name} values to split, got {len(counts)}")
    order = counts.index[np.random.default_rng(seed).permutation(len(counts))]
    budget = train_ratio * counts.sum()
    train, running = set(), 0
    for position, unit in enumerate(order):
        running += counts[unit]
        if position == 0 or (running <= budget and position < len(order) - 1):
            train.add(unit)
    return train


def by_task(frame: pd.DataFrame, train_ratio: float = 0.9, seed: int = 0) -> Split:
    """Whole tasks (all their targets) go to train or test; train gets about ``train_ratio`` of records."""
    _check_ratio(train_ratio)
    train_tasks = _fill_train(frame["task_id"], train_ratio, seed)
    return _finish(frame, frame["task_id"].isin(train_tasks).to_numpy())


def by_target(
    frame: pd.DataFrame,
    train_ratio: float = 0.9,
    seed: int = 0,
    test_targets: Sequence[str] | None = None,
) -> Split:
    """Whole targets go to train or test: the given ``test_targets``, else a seeded draw by ``train_ratio``.

    Normalisation groups are (task, target) pairs, which stay whole, so every record keeps the best
    latency of its task on its target.
    """
    if test_targets is None:
        _check_ratio(train_ratio)
        train_targets = _fill_train(frame["target_id"], train_ratio, seed)
        return _finish(frame, frame["target_id"].isin(train_targets).to_numpy())
    unknown = set(test_targets) - set(frame["target_id"])
    if unknown:
        raise ValueError(
            f"test target(s) {sorted(unknown)} not in the data ({sorted(set(frame['target_id']))})"
        )
    return _finish(frame, ~frame["target_id"].isin(test_targets).to_numpy())


SPLIT_SCHEMES = {"within_task": within_task, "by_task": by_task, "by_target": by_target}


def split(frame: pd.DataFrame, scheme: str, train_ratio: float = 0.9, seed: int = 0, **options) -> Split:
    """Dispatch to a scheme of :data:`SPLIT_SCHEMES` by name (the CLI's ``--split-scheme``)."""
    if scheme not in SPLIT_SCHEMES:
        raise ValueError(f"unknown split scheme {scheme!r}; choose from {sorted(SPLIT_SCHEMES)}")
    return SPLIT_SCHEMES[scheme](frame, train_ratio=train_ratio, seed=seed, **options)
