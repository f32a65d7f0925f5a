"""Cost models trained, fine-tuned and evaluated on dataset frames (the Python API behind ``tenset-tools
train`` and ``eval``). Every model goes through the same frame entry points of
:class:`~tvm_transfer.cost_model.base.LearnedCostModel` (``fit_frame``, ``predict_frame``), the BiLSTM too.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from tenset_tools.frame import group_keys
from tenset_tools.metrics import evaluate_predictions
from tenset_tools.schema import add_normalised_throughput
from tvm_transfer.cost_model import LearnedCostModel, load_cost_model, make_cost_model

__all__ = ["evaluate_model", "few_records", "fine_tune_model", "train_model"]


def train_model(frame: pd.DataFrame, model: str = "xgboost", seed: int = 0, **params) -> LearnedCostModel:
    """Fit cost model ``model`` (a name of :data:`~tvm_transfer.cost_model.COST_MODELS` that trains on
    frames) on a frame with ``norm_throughput`` filled; ``params`` are further constructor arguments.

    The BiLSTM is pretrained on the frame (``BiLSTMCostModel.pretrain``), so the result can be fine-tuned
    later."""
    cost_model = make_cost_model(model, seed=seed, **params)
    if not hasattr(cost_model, "fit_frame"):
        raise ValueError(f"cannot train {model!r} on a dataset: it is not one of our learned cost models")
    return cost_model.fit_frame(frame)


def evaluate_model(
    cost_model: LearnedCostModel, frame: pd.DataFrame, ks: tuple[int, ...] = (1, 5)
) -> dict[str, float]:
    """TenSet's metrics (:func:`tenset_tools.metrics.evaluate_predictions`) of a fitted model on a frame."""
    return evaluate_predictions(frame, cost_model.predict_frame(frame), ks)


def fine_tune_model(
    pretrained: str | Path,
    frame: pd.DataFrame,
    mode: str = "full",
    tasks: Sequence[str] | None = None,
    **params,
) -> LearnedCostModel:
    """Load a pretrained BiLSTM file and fine-tune it on ``frame`` (``BiLSTMCostModel.fine_tune``)."""
    cost_model = load_cost_model(pretrained)
    if not getattr(cost_model, "pretrained", False):
        raise ValueError(
            f"{pretrained} holds a {type(cost_model).__name__} without a pretrained base; only BiLSTM models "
            "saved by `tenset-tools train --model bilstm` can be fine-tuned"
        )
    cost_model.set_params(**params)
    return cost_model.fine_tune(frame, mode=mode, tasks=tasks)


def few_records(frame: pd.DataFrame, per_group: int, seed: int) -> pd.DataFrame:
    """At most ``per_group`` seeded random records of every (task, target) group, renormalised."""
    shuffled = frame.sample(frac=1.0, random_state=seed)
    few = shuffled.groupby(group_keys(shuffled), sort=False).head(per_group)
    return add_normalised_throughput(few.sort_index().reset_index(drop=True))
