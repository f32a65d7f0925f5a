"""Scores of a transfer on held-out target records: error and the ranking metrics of ``tenset_tools``."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tenset_tools.frame import group_keys
from tenset_tools.metrics import average_peak_score, pairwise_accuracy


def scores(records: pd.DataFrame, labels: np.ndarray, predictions: np.ndarray) -> dict[str, float]:
    """``mse`` (of the normalised throughput, squared units of it), ``pairwise_accuracy`` and ``peak@1``,
    ``peak@5`` within each (task, target) group of ``records`` (TenSet's definitions)."""
    labels, predictions = np.asarray(labels, np.float64), np.asarray(predictions, np.float64)
    groups = group_keys(records)
    return {
        "mse": float(np.mean((labels - predictions) ** 2)),
        "pairwise_accuracy": pairwise_accuracy(labels, predictions, groups),
        "peak@1": average_peak_score(labels, predictions, 1, groups),
        "peak@5": average_peak_score(labels, predictions, 5, groups),
    }


def sample_rows(n_rows: int, fraction: float, seed: int, minimum: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """``(chosen, rest)`` row indices: a seeded ``fraction`` of ``n_rows`` (at least ``minimum``) and the
    others."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must be in (0, 1), got {fraction}")
    count = min(n_rows - 1, max(minimum, round(fraction * n_rows)))
    order = np.random.default_rng(seed).permutation(n_rows)
    return np.sort(order[:count]), np.sort(order[count:])
