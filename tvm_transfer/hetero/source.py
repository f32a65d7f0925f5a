"""The source model ``M_S``: a PyTorch MLP regressor that later transfers are built on, then kept frozen."""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Self, TypeVar

import numpy as np
import torch
from torch import nn

from tvm_transfer.common.archive import weight_arrays, weights_like
from tvm_transfer.common.params import HyperParameters
from tvm_transfer.hetero.archive import digest, read_model, write_model
from tvm_transfer.hetero.errors import ModelFileMismatchError, NotFittedError
from tvm_transfer.hetero.inputs import Standardiser, columns_like, named_matrix, require_rows, target_vector

F = TypeVar("F", bound=Callable[..., Any])


def mlp(width: int, hidden_sizes: tuple[int, ...]) -> nn.Sequential:
    """ReLU layers of ``hidden_sizes`` then one linear output; the last module is the output head."""
    layers: list[nn.Module] = []
    previous = width
    for size in hidden_sizes:
        layers += [nn.Linear(previous, size), nn.ReLU()]
        previous = size
    return nn.Sequential(*layers, nn.Linear(previous, 1))


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run PyTorch on one intra-op thread inside the block, restoring the setting after.

    The networks here are tiny (tens of units, batches of at most a few thousand rows): thread start-up
    and synchronisation cost more than the arithmetic, by more than an order of magnitude when other
    processes load the cores."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def single_threaded(function: F) -> F:
    """``function`` run inside :func:`one_thread`."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with one_thread():
            return function(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def as_tensor(matrix: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(matrix, dtype=np.float32))


class SourceModel(HyperParameters):
    """MLP regressor of a performance label from named features (scikit-learn conventions).

    Inputs and the target are standardised with their training means and standard deviations; training
    is Adam on mini-batches with early stopping on a seeded validation split (the weights of the best
    validation epoch are kept).

    Parameters
    ----------
    hidden_sizes:
        Widths of the hidden ReLU layers; the last one is the latent space transfers measure distances in.
    epochs:
        Upper bound on passes over the training rows.
    batch_size:
        Rows per Adam step.
    learning_rate, weight_decay:
        Adam's step size and L2 penalty.
    validation_fraction:
        Share of the rows held out for early stopping (0: none, train all ``epochs``).
    patience:
        Epochs without a better validation loss before training stops.
    min_samples:
        Fewest rows ``fit`` accepts.
    seed:
        Seeds the initial weights, the validation split and the batch order.
    """

    def __init__(
        self,
        *,
        hidden_sizes: tuple[int, ...] = (64, 64),
        epochs: int = 300,
        batch_size: int = 64,
        learning_rate: float = 1e-3,
        weight_decay: float = 1e-4,
        validation_fraction: float = 0.15,
        patience: int = 25,
        min_samples: int = 16,
        seed: int = 0,
    ) -> None:
        self._keep_hyper_parameters(locals())
        self.hidden_sizes = tuple(int(h) for h in hidden_sizes)
        self.network_: nn.Sequential | None = None

    # -- fitting -----------------------------------------------------------------------------------
    @single_threaded
    def fit(self, X: Any, y: Any) -> Self:
        """Fit on features ``X`` (frame or matrix) and labels ``y``; replaces any earlier fit."""
        who = "SourceModel.fit"
        matrix, names = named_matrix(X, who)
        labels = target_vector(y, matrix.shape[0], who)
        require_rows(matrix.shape[0], self.min_samples, who)
        if not 0.0 <= self.validation_fraction < 1.0:
            raise ValueError(f"{who}: validation_fraction must be in [0, 1), got {self.validation_fraction}")
        self.feature_names_in_ = names
        self.n_features_in_ = len(names)
        self.x_scaler_ = Standardiser.fit(matrix)
        label_scaler = Standardiser.fit(labels[:, None])
        self.y_mean_, self.y_scale_ = float(label_scaler.mean[0]), float(label_scaler.scale[0])
        x = self.x_scaler_.apply(matrix)
        t = (labels - self.y_mean_) / self.y_scale_
        rng = np.random.default_rng(self.seed)
        order = rng.permutation(len(x))
        n_valid = round(self.validation_fraction * len(x))
        valid, train = order[:n_valid], order[n_valid:]
        torch.manual_seed(self.seed)
        network = mlp(self.n_features_in_, self.hidden_sizes)
        self.network_ = network
        self.n_epochs_ = train_regressor(
            network,
            x[train],
            t[train],
            x[valid] if n_valid else None,
            t[valid] if n_valid else None,
            epochs=self.epochs,
            batch_size=self.batch_size,
            learning_rate=self.learning_rate,
            weight_decay=self.weight_decay,
            patience=self.patience,
            rng=rng,
        )
        for parameter in network.parameters():
            parameter.requires_grad_(False)
        return self

    def _check_fitted(self) -> nn.Sequential:
        if self.network_ is None:
            raise NotFittedError("SourceModel is not fitted; call fit first")
        return self.network_

    def _is_fitted(self) -> bool:
        return self.network_ is not None

    # -- use ---------------------------------------------------------------------------------------
    def predict(self, X: Any) -> np.ndarray:
        """Predicted labels (the training label's units) of rows with the fitted columns."""
        return self.predict_standardised(self.standardise(X))

    def standardise(self, X: Any) -> np.ndarray:
        """``X`` in the fitted column order, standardised with the training statistics."""
        self._check_fitted()
        return self.x_scaler_.apply(columns_like(X, self.feature_names_in_, "SourceModel"))

    @single_threaded
    def predict_standardised(self, x: np.ndarray) -> np.ndarray:
        """Predictions for already standardised rows ``x``."""
        network = self._check_fitted()
        with torch.no_grad():
            out = network(as_tensor(x)).numpy()[:, 0].astype(np.float64)
        return out * self.y_scale_ + self.y_mean_

    @single_threaded
    def latent_standardised(self, x: np.ndarray) -> np.ndarray:
        """Activations of the last hidden layer (the input of the output head) for standardised rows."""
        network = self._check_fitted()
        with torch.no_grad():
            return network[:-1](as_tensor(x)).numpy().astype(np.float64)

    def latent(self, X: Any) -> np.ndarray:
        """Activations of the last hidden layer for rows with the fitted columns."""
        return self.latent_standardised(self.standardise(X))

    def frozen_network(self) -> nn.Sequential:
        """A copy of the network with every parameter frozen (gradients still flow through it)."""
        network = copy.deepcopy(self._check_fitted())
        for parameter in network.parameters():
            parameter.requires_grad_(False)
        return network

    # -- persistence -------------------------------------------------------------------------------
    def parts(self, prefix: str = "") -> tuple[dict, dict[str, np.ndarray]]:
        """``(meta, arrays)`` that :meth:`from_parts` restores; arrays are named with ``prefix``."""
        network = self._check_fitted()
        arrays = {
            **weight_arrays(network.state_dict(), prefix + "net."),
            prefix + "x_mean": self.x_scaler_.mean,
            prefix + "x_scale": self.x_scaler_.scale,
        }
        meta = {
            "params": {**self.get_params(), "hidden_sizes": list(self.hidden_sizes)},
            "feature_names": self.feature_names_in_,
            "y_mean": self.y_mean_,
            "y_scale": self.y_scale_,
            "n_epochs": self.n_epochs_,
        }
        return meta, arrays

    def fingerprint(self) -> str:
        """SHA-256 of the fitted weights, statistics and columns: which source model an adaptation used."""
        meta, arrays = self.parts()
        h = digest(repr((meta["feature_names"], meta["y_mean"], meta["y_scale"])).encode())
        for name in sorted(arrays):
            h = digest((h + name).encode() + np.ascontiguousarray(arrays[name], np.float64).tobytes())
        return h

    @classmethod
    def from_parts(
        cls, meta: dict, arrays: dict[str, np.ndarray], where: str, prefix: str = ""
    ) -> SourceModel:
        params = dict(meta["params"])
        params["hidden_sizes"] = tuple(params["hidden_sizes"])
        model = cls(**params)
        model.feature_names_in_ = list(meta["feature_names"])
        model.n_features_in_ = len(model.feature_names_in_)
        model.y_mean_, model.y_scale_ = float(meta["y_mean"]), float(meta["y_scale"])
        model.n_epochs_ = int(meta["n_epochs"])
        network = mlp(model.n_features_in_, model.hidden_sizes)
        weights = weights_like(arrays, network.state_dict(), prefix + "net.", where)
        network.load_state_dict({key: torch.from_numpy(value) for key, value in weights.items()})
        for parameter in network.parameters():
            parameter.requires_grad_(False)
        model.network_ = network
        width = (model.n_features_in_,)
        stats = {}
        for key in ("x_mean", "x_scale"):
            value = arrays.get(prefix + key)
            if value is None or value.shape != width:
                raise ModelFileMismatchError(f"{where}: the array {prefix + key!r} is missing or not {width}")
            stats[key] = value.astype(np.float64)
        model.x_scaler_ = Standardiser(stats["x_mean"], stats["x_scale"])
        return model

    def save(self, path: str | Path | IO[bytes]) -> None:
        """Write the fitted model to one archive (:mod:`tvm_transfer.hetero.archive`)."""
        meta, arrays = self.parts()
        write_model(path, "SourceModel", meta, arrays)

    @classmethod
    def load(cls, path: str | Path | IO[bytes]) -> SourceModel:
        """A model saved by :meth:`save`; raises ``ModelFileMismatchError`` for another model's file."""
        meta, arrays, _ = read_model(path, "SourceModel")
        return cls.from_parts(meta, arrays, str(path))


def train_regressor(
    network: nn.Module,
    x: np.ndarray,
    t: np.ndarray,
    x_valid: np.ndarray | None,
    t_valid: np.ndarray | None,
    *,
    epochs: int,
    batch_size: int,
    learning_rate: float,
    weight_decay: float,
    patience: int,
    rng: np.random.Generator,
) -> int:
    """Adam on mean squared error of ``network(x)`` vs ``t`` (standardised), mini-batches in a seeded order,
    early stopping on the validation rows when given (the best epoch's weights are restored). Returns the
    epochs run."""
    params = [p for p in network.parameters() if p.requires_grad]
    optimiser = torch.optim.Adam(params, lr=learning_rate, weight_decay=weight_decay)
    xs, ts = as_tensor(x), as_tensor(t)
    has_valid = x_valid is not None and len(x_valid) > 0
    xv, tv = (as_tensor(x_valid), as_tensor(t_valid)) if has_valid else (None, None)
    best, best_state, since_best, ran = np.inf, None, 0, 0
    for epoch in range(1, epochs + 1):
        ran = epoch
        network.train()
        order = torch.from_numpy(rng.permutation(len(xs)))
        for start in range(0, len(xs), batch_size):
            index = order[start : start + batch_size]
            optimiser.zero_grad()
            loss = torch.mean((network(xs[index])[:, 0] - ts[index]) ** 2)
            loss.backward()
            optimiser.step()
        if not has_valid:
            continue
        network.eval()
        with torch.no_grad():
            valid_loss = float(torch.mean((network(xv)[:, 0] - tv) ** 2))
        if valid_loss < best - 1e-6:
            best, best_state, since_best = valid_loss, copy.deepcopy(network.state_dict()), 0
        else:
            since_best += 1
            if since_best >= patience:
                break
    if best_state is not None:
        network.load_state_dict(best_state)
    return ran
