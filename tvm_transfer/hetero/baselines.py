"""The baselines ModelX is compared with, as estimators of its shape (``fit(X, y)``, ``predict(X)``).

When the target's columns differ from the source model's, every baseline that uses the source model
starts from the same **zero-shot mapping** (:class:`~tvm_transfer.hetero.inputs.ColumnMatch`): a source
column takes the target column of the same name (raw units), a source column without one is held at its
source training mean, and target columns the source never saw are ignored. Without any shared name the
zero-shot model therefore predicts one constant (the source model at its mean input).

- :class:`ZeroShot`: the source model on mapped rows, nothing learned from the target;
- :class:`LinearProbe`: the source model's last hidden layer on mapped rows, a new ridge output head;
- :class:`FineTune`: a trainable input layer (started at the zero-shot map) in front of a copy of the
  source network, all weights trained on the target rows (weight decay towards nothing, early epochs only);
- :class:`TargetOnly`: a model of the target rows alone, XGBoost or an MLP. The "oracle" of the
  comparisons is this model fitted on ~100x more target rows.
"""

from __future__ import annotations

from typing import Any, ClassVar, Self

import numpy as np
import torch

from tvm_transfer.common.boosters import train_booster
from tvm_transfer.common.params import HyperParameters
from tvm_transfer.hetero.errors import NotFittedError
from tvm_transfer.hetero.inputs import (
    ColumnMatch,
    Standardiser,
    columns_like,
    named_matrix,
    require_rows,
    target_vector,
)
from tvm_transfer.hetero.modelx import Aligner, zero_shot_map
from tvm_transfer.hetero.source import SourceModel, as_tensor, single_threaded


class _Estimator(HyperParameters):
    """Shared input handling: the fitted columns, and the check that ``fit`` ran."""

    feature_names_in_: list[str] | None = None

    def _is_fitted(self) -> bool:
        return self.feature_names_in_ is not None

    def _start_fit(self, X: Any, y: Any, minimum: int) -> tuple[np.ndarray, np.ndarray]:
        who = f"{type(self).__name__}.fit"
        matrix, names = named_matrix(X, who)
        labels = target_vector(y, matrix.shape[0], who) if y is not None else None
        require_rows(matrix.shape[0], minimum, who)
        self.feature_names_in_ = names
        self.n_features_in_ = len(names)
        return matrix, labels

    def _rows(self, X: Any) -> np.ndarray:
        if self.feature_names_in_ is None:
            raise NotFittedError(f"{type(self).__name__} is not fitted; call fit first")
        return columns_like(X, self.feature_names_in_, type(self).__name__)


class ZeroShot(_Estimator):
    """The frozen source model on zero-shot-mapped target rows; ``fit`` only records the columns."""

    def __init__(self, source_model: SourceModel) -> None:
        self.source_model = source_model

    def fit(self, X: Any, y: Any = None) -> Self:
        self._start_fit(X, y, 1)
        self.match_ = ColumnMatch.by_name(self.source_model.feature_names_in_, self.feature_names_in_)
        return self

    def mapped(self, X: Any) -> np.ndarray:
        """Target rows as standardised source rows (the zero-shot mapping)."""
        source = self.source_model
        return source.x_scaler_.apply(self.match_.map(self._rows(X), source.x_scaler_.mean))

    def predict(self, X: Any) -> np.ndarray:
        return self.source_model.predict_standardised(self.mapped(X))


class LinearProbe(_Estimator):
    """A ridge output head on the source model's last hidden layer of zero-shot-mapped rows.

    Parameters
    ----------
    source_model:
        A fitted :class:`SourceModel` (not modified).
    alpha:
        Ridge penalty on standardised latent activations.
    min_samples:
        Fewest target rows ``fit`` accepts.
    """

    def __init__(self, source_model: SourceModel, *, alpha: float = 1.0, min_samples: int = 4) -> None:
        self.source_model, self.alpha, self.min_samples = source_model, alpha, min_samples

    def _latent(self, X: Any) -> np.ndarray:
        return self.latent_scaler_.apply(self.source_model.latent_standardised(self.zero_shot_.mapped(X)))

    def fit(self, X: Any, y: Any) -> Self:
        _, labels = self._start_fit(X, y, self.min_samples)
        self.zero_shot_ = ZeroShot(self.source_model).fit(X)
        latent = self.source_model.latent_standardised(self.zero_shot_.mapped(X))
        self.latent_scaler_ = Standardiser.fit(latent)
        h = self.latent_scaler_.apply(latent)
        self.intercept_ = float(labels.mean())
        gram = h.T @ h + self.alpha * np.eye(h.shape[1])
        self.coef_ = np.linalg.solve(gram, h.T @ (labels - self.intercept_))
        return self

    def predict(self, X: Any) -> np.ndarray:
        self._rows(X)
        return self._latent(X) @ self.coef_ + self.intercept_


class FineTune(_Estimator):
    """The whole source network (a copy) plus a trainable input map, trained on the target rows.

    Parameters
    ----------
    source_model:
        A fitted :class:`SourceModel` (copied, not modified).
    epochs, learning_rate, weight_decay:
        Full-batch Adam steps, step size and L2 penalty (few steps and a small step size: with a handful
        of rows, fine-tuning overfits quickly).
    min_samples:
        Fewest target rows ``fit`` accepts.
    seed:
        Seeds the training (full batch: only the initial state matters).
    """

    def __init__(
        self,
        source_model: SourceModel,
        *,
        epochs: int = 100,
        learning_rate: float = 1e-3,
        weight_decay: float = 1e-3,
        min_samples: int = 4,
        seed: int = 0,
    ) -> None:
        self.source_model = source_model
        self.epochs, self.learning_rate, self.weight_decay = epochs, learning_rate, weight_decay
        self.min_samples, self.seed = min_samples, seed

    @single_threaded
    def fit(self, X: Any, y: Any) -> Self:
        matrix, labels = self._start_fit(X, y, self.min_samples)
        source = self.source_model
        self.x_scaler_ = Standardiser.fit(matrix)
        match = ColumnMatch.by_name(source.feature_names_in_, self.feature_names_in_)
        torch.manual_seed(self.seed)
        aligner = Aligner(*zero_shot_map(source, match, self.x_scaler_), hidden=0)
        network = source.frozen_network()
        for parameter in network.parameters():
            parameter.requires_grad_(True)
        model = torch.nn.Sequential(aligner, network)
        optimiser = torch.optim.Adam(
            model.parameters(), lr=self.learning_rate, weight_decay=self.weight_decay
        )
        x = as_tensor(self.x_scaler_.apply(matrix))
        t = as_tensor((labels - source.y_mean_) / source.y_scale_)
        for _ in range(self.epochs):
            optimiser.zero_grad()
            loss = torch.mean((model(x)[:, 0] - t) ** 2)
            loss.backward()
            optimiser.step()
        self.network_ = model.eval()
        return self

    @single_threaded
    def predict(self, X: Any) -> np.ndarray:
        z = self.x_scaler_.apply(self._rows(X))
        with torch.no_grad():
            out = self.network_(as_tensor(z))[:, 0].numpy().astype(np.float64)
        return out * self.source_model.y_scale_ + self.source_model.y_mean_


class TargetOnly(_Estimator):
    """A model of the target rows alone (no source model).

    Parameters
    ----------
    kind:
        ``"xgboost"`` (shallow boosted trees: depth 3, shrinkage 0.1, ``rounds`` trees) or ``"mlp"``
        (a :class:`SourceModel` with its defaults, early stopping on 15% of the rows).
    rounds:
        Trees of the XGBoost model.
    min_samples:
        Fewest target rows ``fit`` accepts.
    seed:
        Seeds either model.
    """

    choices: ClassVar[dict[str, tuple]] = {"kind": ("xgboost", "mlp")}

    def __init__(
        self, *, kind: str = "xgboost", rounds: int = 100, min_samples: int = 4, seed: int = 0
    ) -> None:
        self._keep_hyper_parameters(locals())

    def fit(self, X: Any, y: Any) -> Self:
        matrix, labels = self._start_fit(X, y, self.min_samples)
        if self.kind == "mlp":
            self.model_ = SourceModel(min_samples=self.min_samples, seed=self.seed).fit(matrix, labels)
            return self
        params = {
            "objective": "reg:squarederror",
            "max_depth": 3,
            "eta": 0.1,
            "min_child_weight": 1.0,
            "base_score": float(labels.mean()),
            "seed": self.seed,
        }
        self.model_ = train_booster(params, matrix.astype(np.float32), labels, self.rounds, nthread=1)
        return self

    def predict(self, X: Any) -> np.ndarray:
        matrix = self._rows(X)
        if self.kind == "mlp":
            return self.model_.predict(matrix)
        import xgboost

        return self.model_.predict(xgboost.DMatrix(matrix.astype(np.float32), nthread=1)).astype(np.float64)
