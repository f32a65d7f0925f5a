"""XGBoost training and serialisation shared by the XGBoost cost model and ML2Tuner's estimators."""

from __future__ import annotations

from typing import Any

import numpy as np
import xgboost

#: The XGBoost objectives our boosters learn with: regression of the target, or AutoTVM's pairwise ranking
#: loss (pairs formed within a group only; only the order of the predictions means anything).
OBJECTIVES = ("reg:squarederror", "rank:pairwise")


def check_objective(objective: str) -> str:
    """``objective`` itself; raises ``ValueError`` naming :data:`OBJECTIVES` for any other."""
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; choose from {OBJECTIVES}")
    return objective


def group_order(groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The row order that makes every group's rows contiguous (stable, as XGBoost's ranking objectives
    need them), and the query id (0, 1, ...) of every row in that order; ``groups``: any sortable labels."""
    groups = np.asarray(groups)
    order = np.argsort(groups, kind="stable")
    return order, np.unique(groups[order], return_inverse=True)[1].astype(np.uint32)


def group_balanced_weights(groups: np.ndarray) -> np.ndarray:
    """Row weights under which every group weighs the same in total and the rows' mean weight is 1, so a
    group measured 200 times counts as much as one measured 5 times; ``groups``: any sortable labels."""
    _, inverse, counts = np.unique(np.asarray(groups), return_inverse=True, return_counts=True)
    return (len(inverse) / (len(counts) * counts))[inverse]


def train_booster(
    params: dict[str, Any],
    features: np.ndarray,
    labels: np.ndarray,
    num_rounds: int,
    *,
    weight: np.ndarray | None = None,
    qid: np.ndarray | None = None,
    nthread: int | None = None,
    start_from: xgboost.Booster | None = None,
) -> xgboost.Booster:
    """Train ``num_rounds`` trees with the "hist" method and XGBoost's messages off.

    ``params`` holds the objective and hyper-parameters (XGBoost's names); ``nthread`` (None: XGBoost's
    default) limits the threads of the data matrix and of training, e.g. to 1 for models refitted many times
    inside a tuning loop. ``start_from`` boosts the new trees on top of a trained booster's predictions (a
    new booster holding both; ``start_from`` is left as it is)."""
    options = {**params, "tree_method": "hist", "verbosity": 0}
    matrix_options = {}
    if nthread is not None:
        options["nthread"] = nthread
        matrix_options["nthread"] = nthread
    data = xgboost.DMatrix(features, label=labels, weight=weight, qid=qid, **matrix_options)
    return xgboost.train(options, data, num_boost_round=num_rounds, xgb_model=start_from)


def booster_bytes(booster: xgboost.Booster) -> bytes:
    """The booster in XGBoost's binary JSON (UBJSON) format, as :func:`booster_from_bytes` reads it."""
    return bytes(booster.save_raw(raw_format="ubj"))


def booster_from_bytes(blob: bytes) -> xgboost.Booster:
    """A booster saved by :func:`booster_bytes`."""
    return xgboost.Booster(model_file=bytearray(blob))
