"""ModelX: adapt a frozen source model to a target whose features differ in names and count.

Two parts are fitted on a few labelled target rows (Dey, Islam et al., HPDC 2025):

1. the **alignment network** ``M_A`` maps standardised target features to the source model's standardised
   input space and is trained with the prediction loss *through* the frozen source model ``M_S``. It is a
   linear map (plus, optionally, a small ReLU branch) started at the zero-shot mapping (same-named columns
   passed through in their units, the others at the source mean) and pulled back towards it by an L1
   penalty on the weights (L2 on the biases), so that with few rows it departs from the zero-shot use
   only as far as the data asks;
2. the **residual model** ``M_R`` learns what the aligned source model still gets wrong, from the target
   features and the aligned prediction. With ``mode="both"`` its training residuals are out-of-fold
   (alignment refitted without each fold): residuals of rows the alignment was fitted on would be
   optimistically small. In that mode the alignment is trained together with a constant output shift (the
   simplest residual), so that a systematic offset of the target does not bend the input map.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import IO, Any, ClassVar, Self

import numpy as np
import torch
from torch import nn

from tvm_transfer.common.params import HyperParameters
from tvm_transfer.hetero.archive import read_model, write_model
from tvm_transfer.hetero.errors import ModelFileMismatchError, NotFittedError
from tvm_transfer.hetero.inputs import (
    ColumnMatch,
    Standardiser,
    columns_like,
    named_matrix,
    require_rows,
    target_vector,
)
from tvm_transfer.hetero.residual import RESIDUAL_KINDS, ResidualModel
from tvm_transfer.hetero.source import SourceModel, as_tensor, single_threaded

MODES = ("align", "residual", "both")
#: Standard deviation of the noise added to the starting map of the alignment's restarts after the first.
RESTART_NOISE = 0.5


class Aligner(nn.Module):
    """``x -> W x + b (+ branch(x))`` from standardised target to standardised source features, with an
    L2 pull towards the starting map ``(W0, b0)``; the branch starts at zero."""

    def __init__(self, w0: np.ndarray, b0: np.ndarray, hidden: int, shift: bool = False) -> None:
        super().__init__()
        # A constant added to the source model's (standardised) output, trained with the map when
        # ``shift``: a systematic offset of the target is then absorbed here instead of bending the map.
        self.shift = nn.Parameter(torch.zeros(1), requires_grad=shift)
        n_source, n_target = w0.shape
        self.linear = nn.Linear(n_target, n_source)
        with torch.no_grad():
            self.linear.weight.copy_(as_tensor(w0))
            self.linear.bias.copy_(as_tensor(b0))
        self.register_buffer("w0", as_tensor(w0))
        self.register_buffer("b0", as_tensor(b0))
        self.branch: nn.Sequential | None = None
        if hidden > 0:
            self.branch = nn.Sequential(nn.Linear(n_target, hidden), nn.ReLU(), nn.Linear(hidden, n_source))
            with torch.no_grad():
                self.branch[2].weight.zero_()
                self.branch[2].bias.zero_()

    def predict(self, network: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """Standardised predictions of the source ``network`` on aligned rows, plus the output shift."""
        return network(self(x))[:, 0] + self.shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.linear(x)
        return out if self.branch is None else out + self.branch(x)

    def penalty(self, l1: bool = False) -> torch.Tensor:
        change = self.linear.weight - self.w0
        total = torch.sum(torch.abs(change) if l1 else change**2) + torch.sum(
            (self.linear.bias - self.b0) ** 2
        )
        if self.branch is not None:
            total = total + sum(torch.sum(p**2) for p in self.branch.parameters())
        return total


def zero_shot_map(
    source: SourceModel, match: ColumnMatch, target_scaler: Standardiser
) -> tuple[np.ndarray, np.ndarray]:
    """``(W0, b0)`` such that ``W0 @ z + b0`` is, for standardised target rows ``z``, the standardised source
    row of the zero-shot mapping (matched columns carried over in raw units, the rest at the source mean)."""
    n_source, n_target = len(match.source_of), len(target_scaler.mean)
    w0, b0 = np.zeros((n_source, n_target)), np.zeros(n_source)
    for j, i in enumerate(match.source_of):
        if i >= 0:
            w0[j, i] = target_scaler.scale[i] / source.x_scaler_.scale[j]
            b0[j] = (target_scaler.mean[i] - source.x_scaler_.mean[j]) / source.x_scaler_.scale[j]
    return w0, b0


class ModelX(HyperParameters):
    """A frozen :class:`SourceModel` adapted to target features of any width (scikit-learn conventions).

    Parameters
    ----------
    source_model:
        A fitted :class:`SourceModel`; it is never modified.
    mode:
        ``"align"`` (``M_A`` only), ``"residual"`` (zero-shot mapping + ``M_R``) or ``"both"``.
    align_hidden:
        Width of the alignment network's ReLU branch (0: the linear map alone).
    epochs, learning_rate:
        Full-batch Adam steps and step size of the alignment.
    align_penalty:
        Weight of the distance of the alignment's parameters from the zero-shot map, relative to the mean
        squared prediction error on standardised labels.
    align_l1:
        Measure the weights' distance by absolute values (L1: a sparse change, each source feature fed by
        few target columns, as when columns are renamed, reordered or rescaled) rather than squares (L2).
        On the synthetic permutation-plus-scaling tests L1 reached 2-6x lower error with 40 rows.
    align_restarts:
        Trainings of the alignment, the first from the zero-shot map, the others from it plus noise; the
        one of lowest training objective (error plus penalty) is kept.
    residual:
        Kind of ``M_R``: one of :data:`~tvm_transfer.hetero.residual.RESIDUAL_KINDS`.
    residual_alpha, residual_rounds:
        Ridge penalty (``residual="ridge"``) and number of trees (``"xgboost"``).
    residual_folds:
        Folds of the out-of-fold residuals of ``mode="both"``; with fewer than ``2 * residual_folds`` rows
        the in-sample residuals are used.
    min_samples:
        Fewest target rows ``fit`` accepts.
    seed:
        Seeds the alignment branch's initial weights, the folds and ``M_R``.
    """

    choices: ClassVar[dict[str, tuple]] = {"mode": MODES, "residual": RESIDUAL_KINDS}

    def __init__(
        self,
        source_model: SourceModel,
        *,
        mode: str = "both",
        align_hidden: int = 0,
        epochs: int = 1000,
        learning_rate: float = 0.1,
        align_penalty: float = 1e-2,
        align_l1: bool = True,
        align_restarts: int = 4,
        residual: str = "ridge",
        residual_alpha: float = 10.0,
        residual_rounds: int = 60,
        residual_folds: int = 3,
        min_samples: int = 4,
        seed: int = 0,
    ) -> None:
        self._keep_hyper_parameters(locals())
        self.aligner_: Aligner | None = None

    def _is_fitted(self) -> bool:
        return self.aligner_ is not None

    # -- fitting -----------------------------------------------------------------------------------
    @single_threaded
    def fit(self, X: Any, y: Any) -> Self:
        """Fit ``M_A`` and/or ``M_R`` on target rows ``X`` (frame or matrix, any width) and labels ``y``."""
        who = "ModelX.fit"
        source = self.source_model
        source._check_fitted()
        started = time.perf_counter()
        matrix, names = named_matrix(X, who)
        labels = target_vector(y, matrix.shape[0], who)
        require_rows(matrix.shape[0], self.min_samples, who)
        self.feature_names_in_ = names
        self.n_features_in_ = len(names)
        self.match_ = ColumnMatch.by_name(source.feature_names_in_, names)
        self.x_scaler_ = Standardiser.fit(matrix)
        z = self.x_scaler_.apply(matrix)
        w0, b0 = zero_shot_map(source, self.match_, self.x_scaler_)
        network = source.frozen_network()
        align = self.mode in ("align", "both")
        self.aligner_ = self._fit_aligner(network, w0, b0, z, labels, train=align)
        self.residual_ = None
        if self.mode in ("residual", "both"):
            base = self._base(network, self.aligner_, z)
            if self.mode == "both" and len(z) >= 2 * self.residual_folds:
                base = self._out_of_fold(network, w0, b0, z, labels)
            inputs = self._residual_inputs(z, base)
            self.residual_ = ResidualModel(
                self.residual, self.residual_alpha, self.residual_rounds, self.seed
            ).fit(inputs, labels - base)
        self.fit_seconds_ = time.perf_counter() - started
        return self

    def _fit_aligner(
        self,
        network: nn.Module,
        w0: np.ndarray,
        b0: np.ndarray,
        z: np.ndarray,
        labels: np.ndarray,
        train: bool,
    ) -> Aligner:
        shift = train and self.mode == "both"
        if not train:
            return Aligner(w0, b0, 0, shift)
        source = self.source_model
        x = as_tensor(z)
        t = as_tensor((labels - source.y_mean_) / source.y_scale_)
        best, best_objective = None, np.inf
        for restart in range(max(1, self.align_restarts)):
            torch.manual_seed(self.seed + restart)
            aligner = Aligner(w0, b0, self.align_hidden, shift)
            if restart:
                # Other starts: the zero-shot map plus noise, since a permutation of renamed columns has
                # local minima that gradient steps from one start may not leave.
                with torch.no_grad():
                    aligner.linear.weight.add_(torch.randn_like(aligner.linear.weight) * RESTART_NOISE)
            objective = self._train_aligner(aligner, network, x, t)
            if objective < best_objective:
                best, best_objective = aligner, objective
        return best

    def _train_aligner(self, aligner: Aligner, network: nn.Module, x: torch.Tensor, t: torch.Tensor) -> float:
        """Full-batch Adam on prediction error plus penalty; returns the final value of that objective."""

        def objective() -> torch.Tensor:
            error = torch.mean((aligner.predict(network, x) - t) ** 2)
            return error + self.align_penalty * aligner.penalty(self.align_l1)

        optimiser = torch.optim.Adam(
            [p for p in aligner.parameters() if p.requires_grad], lr=self.learning_rate
        )
        for _ in range(self.epochs):
            optimiser.zero_grad()
            loss = objective()
            loss.backward()
            optimiser.step()
        with torch.no_grad():
            return float(objective())

    def _base(self, network: nn.Module, aligner: Aligner, z: np.ndarray) -> np.ndarray:
        source = self.source_model
        with torch.no_grad():
            out = aligner.predict(network, as_tensor(z)).numpy().astype(np.float64)
        return out * source.y_scale_ + source.y_mean_

    def _out_of_fold(
        self, network: nn.Module, w0: np.ndarray, b0: np.ndarray, z: np.ndarray, labels: np.ndarray
    ) -> np.ndarray:
        folds = np.random.default_rng(self.seed).permutation(len(z)) % self.residual_folds
        base = np.empty(len(z))
        for fold in range(self.residual_folds):
            held = folds == fold
            aligner = self._fit_aligner(network, w0, b0, z[~held], labels[~held], train=True)
            base[held] = self._base(network, aligner, z[held])
        return base

    def _residual_inputs(self, z: np.ndarray, base: np.ndarray) -> np.ndarray:
        source = self.source_model
        return np.hstack([z, ((base - source.y_mean_) / source.y_scale_)[:, None]])

    # -- use ---------------------------------------------------------------------------------------
    def _check_fitted(self) -> Aligner:
        if self.aligner_ is None:
            raise NotFittedError("ModelX is not fitted; call fit first")
        return self.aligner_

    @single_threaded
    def align(self, X: Any) -> np.ndarray:
        """Target rows mapped by ``M_A`` into the source model's standardised input space."""
        aligner = self._check_fitted()
        z = self.x_scaler_.apply(columns_like(X, self.feature_names_in_, "ModelX"))
        with torch.no_grad():
            return aligner(as_tensor(z)).numpy().astype(np.float64)

    @single_threaded
    def predict(self, X: Any) -> np.ndarray:
        """Predicted labels (the source label's units) of target rows with the fitted columns."""
        aligner = self._check_fitted()
        z = self.x_scaler_.apply(columns_like(X, self.feature_names_in_, "ModelX"))
        base = self._base(self.source_model.network_, aligner, z)
        if self.residual_ is None:
            return base
        return base + self.residual_.predict(self._residual_inputs(z, base))

    def column_report(self) -> dict[str, list[str]]:
        """Target columns that matched a source column by name, unmatched target columns, and source
        columns no target column matched (names, as in the frames)."""
        self._check_fitted()
        source_names = self.source_model.feature_names_in_
        matched = [self.feature_names_in_[i] for i in self.match_.source_of if i >= 0]
        return {
            "matched": matched,
            "target_only": [n for n in self.feature_names_in_ if n not in set(matched)],
            "source_only": [n for n, i in zip(source_names, self.match_.source_of, strict=True) if i < 0],
        }

    # -- persistence -------------------------------------------------------------------------------
    def save(self, path: str | Path | IO[bytes]) -> None:
        """Write the adapted model, its source model included, to one archive."""
        aligner = self._check_fitted()
        source_meta, arrays = self.source_model.parts("source.")
        arrays.update({"aligner." + k: v.detach().numpy() for k, v in aligner.state_dict().items()})
        arrays.update({"x_mean": self.x_scaler_.mean, "x_scale": self.x_scaler_.scale})
        blobs = {}
        if self.residual_ is not None:
            arrays.update(self.residual_.arrays("residual."))
            blobs = self.residual_.blobs("residual.ubj")
        params = {k: v for k, v in self.get_params().items() if k != "source_model"}
        meta = {
            "params": params,
            "feature_names": self.feature_names_in_,
            "has_residual": self.residual_ is not None,
            "fit_seconds": self.fit_seconds_,
            "source": source_meta,
            "source_fingerprint": self.source_model.fingerprint(),
        }
        write_model(path, "ModelX", meta, arrays, blobs)

    @classmethod
    def load(cls, path: str | Path | IO[bytes], source_model: SourceModel | None = None) -> ModelX:
        """An adapted model saved by :meth:`save`. With ``source_model``, the file must have been adapted
        from that very model (same weights and columns), else :class:`ModelFileMismatchError`."""
        where = str(path)
        meta, arrays, blobs = read_model(path, "ModelX")
        source = SourceModel.from_parts(meta["source"], arrays, where, "source.")
        if source_model is not None and source_model.fingerprint() != meta["source_fingerprint"]:
            raise ModelFileMismatchError(
                f"{where}: was adapted from another source model (fingerprint "
                f"{meta['source_fingerprint'][:12]}, given {source_model.fingerprint()[:12]})"
            )
        model = cls(source, **meta["params"])
        model.feature_names_in_ = list(meta["feature_names"])
        model.n_features_in_ = len(model.feature_names_in_)
        model.match_ = ColumnMatch.by_name(source.feature_names_in_, model.feature_names_in_)
        width = (model.n_features_in_,)
        try:
            model.x_scaler_ = Standardiser(arrays["x_mean"], arrays["x_scale"])
            n_source = source.n_features_in_
            hidden = model.align_hidden if model.mode != "residual" else 0
            aligner = Aligner(
                np.zeros((n_source, width[0])), np.zeros(n_source), hidden, model.mode == "both"
            )
            state = {
                k[len("aligner.") :]: torch.from_numpy(v)
                for k, v in arrays.items()
                if k.startswith("aligner.")
            }
            aligner.load_state_dict(state)
            model.residual_ = None
            if meta["has_residual"]:
                model.residual_ = ResidualModel.restore(
                    model.residual, arrays, blobs, "residual.", "residual.ubj"
                )
        except (KeyError, RuntimeError) as err:
            raise ModelFileMismatchError(
                f"{where}: arrays do not fit a ModelX of its metadata ({err})"
            ) from err
        if model.x_scaler_.mean.shape != width:
            raise ModelFileMismatchError(
                f"{where}: x_mean has shape {model.x_scaler_.mean.shape}, expected {width}"
            )
        model.aligner_ = aligner
        model.fit_seconds_ = float(meta["fit_seconds"])
        return model
