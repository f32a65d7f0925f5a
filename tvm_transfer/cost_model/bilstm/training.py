"""Training and inference of the BiLSTM network: mini-batch Adam with early stopping, RMSE or LambdaRank
loss, and bucketed prediction."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable

import numpy as np
import torch
from torch import nn

from tvm_transfer.cost_model.bilstm.inputs import ScaledInputs, bucket_length
from tvm_transfer.cost_model.bilstm.network import BiLSTMNet

__all__ = ["LOSSES", "lambdarank_loss", "predict_network", "train_network"]

LOSSES = ("rmse", "lambdarank")


def lambdarank_loss(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """LambdaRank loss of one group: pairwise logistic loss, each pair weighted by |delta NDCG| of
    swapping it (gains = normalised throughput, discounts by the current predicted ranks)."""
    n = len(scores)
    if n < 2:
        return scores.sum() * 0.0
    ranks = torch.empty(n)
    ranks[torch.argsort(scores.detach(), descending=True)] = torch.arange(1, n + 1, dtype=torch.float32)
    discount = 1.0 / torch.log2(1.0 + ranks)
    ideal = (torch.sort(labels, descending=True).values / torch.log2(torch.arange(2, n + 2).float())).sum()
    delta = (labels[:, None] - labels[None, :]).abs() * (discount[:, None] - discount[None, :]).abs()
    delta = delta / ideal.clamp(min=1e-9)
    better = (labels[:, None] > labels[None, :]).float()
    pair_loss = nn.functional.softplus(-(scores[:, None] - scores[None, :]))
    return (better * delta * pair_loss).sum() / better.sum().clamp(min=1.0)


def _loss(loss: str, scores: torch.Tensor, labels: torch.Tensor, groups: np.ndarray) -> torch.Tensor:
    if loss == "rmse":
        return torch.sqrt(nn.functional.mse_loss(scores, labels) + 1e-12)
    losses = [lambdarank_loss(scores[groups == g], labels[groups == g]) for g in np.unique(groups)]
    return torch.stack(losses).mean()


def _split(n: int, validation_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(train, validation)`` row indices; no validation rows when either side would have fewer than 8."""
    order = np.random.default_rng(seed).permutation(n)
    n_valid = round(validation_fraction * n)
    if n_valid < 8 or n - n_valid < 8:
        return order, np.zeros(0, dtype=np.int64)
    return order[n_valid:], order[:n_valid]


def _batches(
    index: np.ndarray, groups: np.ndarray, loss: str, batch_size: int, rng: np.random.Generator
) -> list[np.ndarray]:
    if loss == "rmse":
        index = rng.permutation(index)
        return [index[i : i + batch_size] for i in range(0, len(index), batch_size)]
    # lambdarank: a batch holds records of one group only (pairs are compared within a task)
    batches = []
    for group in np.unique(groups[index]):
        members = rng.permutation(index[groups[index] == group])
        batches += [members[i : i + batch_size] for i in range(0, len(members), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def train_network(
    net: BiLSTMNet,
    rows: np.ndarray,
    targets: np.ndarray,
    groups: np.ndarray,
    stats: dict[str, np.ndarray],
    parameters: Iterable[nn.Parameter],
    *,
    epochs: int,
    learning_rate: float,
    loss: str,
    batch_size: int,
    weight_decay: float,
    patience: int,
    validation_fraction: float,
    seed: int,
) -> dict[str, float]:
    """Train ``parameters`` of ``net`` on packed ``rows`` (scaled with ``stats``) to ``targets`` (normalised
    throughputs), stopping after ``patience`` epochs without a better validation loss (the best epoch's
    weights are kept). Returns ``{"epochs", "rows", "best_validation_loss"}`` of the fit."""
    inputs = ScaledInputs(rows, stats)
    labels = torch.from_numpy(targets.astype(np.float32))
    rng = np.random.default_rng(seed)
    train_index, valid_index = _split(len(rows), validation_fraction, seed)
    optimiser = torch.optim.Adam(parameters, lr=learning_rate, weight_decay=weight_decay)
    best_loss, best_state, stale, epochs_run = math.inf, copy.deepcopy(net.state_dict()), 0, 0
    for epoch in range(1, epochs + 1):
        epochs_run = epoch
        net.train()
        for batch in _batches(train_index, groups, loss, batch_size, rng):
            optimiser.zero_grad()
            batch_loss = _loss(loss, net(*inputs.batch(batch)), labels[batch], groups[batch])
            batch_loss.backward()
            optimiser.step()
        if not len(valid_index):
            continue
        net.eval()
        with torch.no_grad():
            valid = float(
                _loss(loss, net(*inputs.batch(valid_index)), labels[valid_index], groups[valid_index])
            )
        if valid < best_loss - 1e-6:
            best_loss, best_state, stale = valid, copy.deepcopy(net.state_dict()), 0
        else:
            stale += 1
            if stale >= patience:
                break
    if len(valid_index):
        net.load_state_dict(best_state)
    net.eval()
    return {"epochs": epochs_run, "rows": len(rows), "best_validation_loss": best_loss}


def predict_network(
    net: BiLSTMNet, rows: np.ndarray, stats: dict[str, np.ndarray], batch: int = 1024
) -> np.ndarray:
    """The network's scores of packed ``rows`` (scaled with ``stats``)."""
    inputs = ScaledInputs(rows, stats)
    # One length bucket per forward pass: little padding, and scores independent of the batch.
    buckets = np.array([bucket_length(int(n)) for n in inputs.lengths.numpy()])
    out = np.empty(len(rows), dtype=np.float64)
    with torch.no_grad():
        for bucket in np.unique(buckets):
            members = np.flatnonzero(buckets == bucket)
            for start in range(0, len(members), batch):
                index = members[start : start + batch]
                out[index] = net(*inputs.batch(index)).numpy()
    return out
