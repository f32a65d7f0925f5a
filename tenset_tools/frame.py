"""The one adapter from a dataset frame to model inputs: group keys, normalised throughput, feature matrix.

Every consumer of schema frames (the cost models of ``tvm_transfer``, the dataset commands, pruning, the
metrics) takes these three from here, so that a group, a label and a feature row mean the same everywhere.
A *group* is one (task, target) pair: normalised throughputs are relative to the best record of their group,
and ranking metrics compare records within a group.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = [
    "feature_matrix",
    "group_keys",
    "hardware_matrix",
    "kernel_matrix",
    "normalised_throughput",
    "record_costs",
    "throughput_labels",
]


def group_keys(frame: pd.DataFrame) -> np.ndarray:
    """The group of every record, ``"<task_id>/<target_id>"`` (strings)."""
    return (frame["task_id"] + "/" + frame["target_id"]).to_numpy()


def normalised_throughput(costs: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Per group, best usable cost / cost, in (0, 1]; 0 for unusable costs (non-finite or not positive,
    e.g. ``inf`` for a failed measurement). ``costs`` are latencies in any one unit (e.g. seconds)."""
    costs = np.asarray(costs, dtype=np.float64)
    usable = np.isfinite(costs) & (costs > 0)
    _, group_index = np.unique(np.asarray(groups), return_inverse=True)
    best = np.full(group_index.max(initial=-1) + 1, np.inf)
    np.minimum.at(best, group_index[usable], costs[usable])
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(usable, best[group_index] / costs, 0.0)


def record_costs(frame: pd.DataFrame) -> np.ndarray:
    """The latency of every record in seconds; ``inf`` for invalid records."""
    latency = frame["latency"].to_numpy(dtype=np.float64)
    return np.where(frame["valid"].to_numpy(dtype=bool), latency, np.inf)


def throughput_labels(frame: pd.DataFrame) -> np.ndarray:
    """The normalised throughput of every record: the ``norm_throughput`` column when it is filled,
    else computed from ``latency`` and ``valid`` per group."""
    labels = frame["norm_throughput"].to_numpy(dtype=np.float64)
    if np.isnan(labels).any():
        return normalised_throughput(record_costs(frame), group_keys(frame))
    return labels


def kernel_matrix(frame: pd.DataFrame) -> np.ndarray:
    """``(n, 328)`` float32 pooled per-store kernel features; raises ``ValueError`` when records lack them."""
    missing = frame["kernel_features"].isna()
    if missing.any():
        raise ValueError(
            f"{int(missing.sum())} of {len(frame)} records have no kernel_features (Ansor/TenSet "
            "conversions have none: their per-store features need the removed auto_scheduler); train on a "
            "MetaSchedule dataset (tenset-tools collect, or convert of a MetaSchedule work dir)"
        )
    return np.stack(frame["kernel_features"].to_numpy()).astype(np.float32)


def hardware_matrix(frame: pd.DataFrame) -> np.ndarray:
    """``(n, 8)`` float32 hardware features of every record's target."""
    return np.stack(frame["hw_features"].to_numpy()).astype(np.float32)


def feature_matrix(frame: pd.DataFrame, use_hardware_features: bool = True) -> np.ndarray:
    """The feature rows a cost model learns from: kernel features, then the hardware features when
    ``use_hardware_features`` (the columns of ``LearnedCostModel.features`` while tuning)."""
    kernel = kernel_matrix(frame)
    if not use_hardware_features:
        return kernel
    return np.hstack([kernel, hardware_matrix(frame)])
