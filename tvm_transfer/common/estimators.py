"""ML2Tuner's three models (Cha et al., arXiv 2411.10764), as scikit-learn-like XGBoost estimators.

- :class:`ValidityModel` (V): will this configuration run? A binary classifier whose decision threshold is
  chosen on out-of-fold predictions so that a target share of the *valid* configurations is kept (high
  recall: dropping a good configuration costs more than profiling a bad one now and then), plus a
  multi-class head naming the likely error kind.
- :class:`PerformanceModel` (P): a regressor (or ranker) of throughput from the visible features
  (workload, knobs, hardware).
- :class:`AdvancedModel` (A): the same on visible + hidden compilation features (instruction mix, DMA
  traffic, micro-op kernels, scratchpad use), which only compiling a configuration reveals.

The models see plain feature matrices; which columns they get is the tuner's business
(e.g. :mod:`tvm_transfer.vta.ml2tuner.ml2_tuner`). Targets of P and A are "higher is better" throughputs, e.g.
normalised throughput (best latency / latency, in (0, 1]).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np
import xgboost

from tvm_transfer.common.archive import (
    CostModelFileError,
    checked_params,
    read_archive,
    short_reason,
    write_archive,
)
from tvm_transfer.common.boosters import (
    booster_bytes,
    booster_from_bytes,
    check_objective,
    group_order,
    train_booster,
)
from tvm_transfer.common.params import HyperParameters

#: Version of the saved-model archive of this module; :meth:`load` refuses any other.
FORMAT_VERSION = 1
_FORMAT_NAME = "tvm-transfer-ml2tuner-model"


class NotFittedError(RuntimeError):
    """``predict`` was called before ``fit``."""


class FeatureShapeError(ValueError):
    """A feature matrix has the wrong shape, or non-finite values, for this model."""


def _as_weights(sample_weight: Any, n: int, who: str) -> np.ndarray | None:
    """None, or one finite non-negative weight per row (not all zero)."""
    if sample_weight is None:
        return None
    w = np.asarray(sample_weight, dtype=np.float32)
    if w.shape != (n,) or not np.isfinite(w).all() or (w < 0).any() or not w.any():
        raise FeatureShapeError(
            f"{who}: sample_weight must hold {n} finite, non-negative weights (not all 0), "
            f"got shape {w.shape}"
        )
    return w


def _as_matrix(features: Any, n_features: int | None, who: str) -> np.ndarray:
    matrix = np.asarray(features, dtype=np.float32)
    if matrix.ndim != 2:
        raise FeatureShapeError(f"{who}: features must be a 2-D matrix (rows x features), got {matrix.shape}")
    if n_features is not None and matrix.shape[1] != n_features:
        raise FeatureShapeError(
            f"{who}: fitted on {n_features} features per row, got {matrix.shape[1]}; "
            "pass the same feature columns at fit and predict time"
        )
    if not np.isfinite(matrix).all():
        raise FeatureShapeError(f"{who}: features contain NaN or inf")
    return matrix


class _XGBEstimator(HyperParameters):
    """Shared persistence of the three models; their hyper-parameters are their constructor arguments."""

    def __init__(self) -> None:
        self.n_features_: int | None = None

    @property
    def fitted(self) -> bool:
        return self.n_features_ is not None

    def _check_fitted(self) -> None:
        if not self.fitted:
            raise NotFittedError(f"{type(self).__name__} is not fitted; call fit first")

    def _state(self) -> tuple[dict, dict[str, bytes]]:
        raise NotImplementedError

    def _set_state(self, state: dict, blobs: dict[str, bytes]) -> None:
        raise NotImplementedError

    def save(self, path: str | Path | IO[bytes]) -> None:
        """Write hyper-parameters and the fitted state to one archive (format :data:`FORMAT_VERSION`)."""
        self._check_fitted()
        state, blobs = self._state()
        meta = {
            "model": type(self).__name__,
            "params": self.get_params(),
            "state": {"n_features": self.n_features_, **state},
        }
        write_archive(path, _FORMAT_NAME, FORMAT_VERSION, meta, blobs)

    @classmethod
    def load(cls, path: str | Path | IO[bytes]):
        """Restore a model saved by :meth:`save` of this class; raises :class:`CostModelFileError` for
        another format, version or class."""
        meta, blobs = read_archive(path, _FORMAT_NAME, FORMAT_VERSION, cls.__name__)
        where = f"{path}: meta.json"
        model = cls(**checked_params(meta.get("params", {}), cls().get_params(), where))
        try:
            state = dict(meta["state"])
            model.n_features_ = int(state.pop("n_features"))
            model._set_state(state, blobs)
        except CostModelFileError:
            raise
        except Exception as err:  # a missing key or blob, or the library's own reader refused a blob
            reason = short_reason(err)
            raise CostModelFileError(
                f"{path}: not a saved {cls.__name__} state ({type(err).__name__}: {reason})"
            ) from err
        return model


def _booster_blobs(booster: xgboost.Booster | None, name: str = "booster.ubj") -> dict[str, bytes]:
    return {} if booster is None else {name: booster_bytes(booster)}


def _booster_from(blobs: dict[str, bytes], name: str = "booster.ubj") -> xgboost.Booster | None:
    return booster_from_bytes(blobs[name]) if name in blobs else None


class ValidityModel(_XGBEstimator):
    """V: P(valid) from features, a recall-oriented threshold and the likely error kind.

    Parameters
    ----------
    target_recall:
        Share of valid configurations the threshold keeps, estimated on ``n_folds`` out-of-fold
        predictions of the training set (the threshold is the largest one that reaches it).
    n_folds:
        Folds for the out-of-fold threshold choice; with fewer than ``2 * n_folds`` samples per class the
        threshold falls back to ``fallback_threshold``.
    fallback_threshold:
        Threshold on P(valid) used when there are too few samples to estimate one.
    num_rounds, max_depth, learning_rate:
        XGBoost hyper-parameters of both heads.
    seed:
        Seeds the folds and XGBoost.
    """

    def __init__(
        self,
        *,
        target_recall: float = 0.98,
        n_folds: int = 3,
        fallback_threshold: float = 0.2,
        num_rounds: int = 60,
        max_depth: int = 4,
        learning_rate: float = 0.3,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self._keep_hyper_parameters(locals())
        self.threshold_: float = fallback_threshold
        self.constant_: float | None = None  # P(valid) when the training set held a single class
        self.kinds_: list[str] = []
        self._booster: xgboost.Booster | None = None
        self._kind_booster: xgboost.Booster | None = None

    def _check_params(self, params: dict[str, Any]) -> None:
        super()._check_params(params)
        if not 0.0 < params["target_recall"] <= 1.0:
            raise ValueError(f"target_recall must be in (0, 1], got {params['target_recall']}")
        if params["n_folds"] < 2:
            raise ValueError(f"n_folds must be at least 2, got {params['n_folds']}")

    def _train(
        self, x: np.ndarray, y: np.ndarray, objective: str, weight: np.ndarray | None = None, **extra: Any
    ) -> xgboost.Booster:
        params = {
            "objective": objective,
            "max_depth": self.max_depth,
            "eta": self.learning_rate,
            "seed": self.seed,
            **extra,
        }
        return train_booster(params, x, y, self.num_rounds, weight=weight, nthread=1)

    def fit(
        self,
        features: Any,
        valid: Sequence[bool],
        error_kinds: Sequence[str | None] | None = None,
        sample_weight: Sequence[float] | None = None,
    ) -> ValidityModel:
        """Fit on feature rows, their validity and (optionally) the error kind of each invalid row;
        ``sample_weight`` (one per row) weighs the rows in both heads (e.g. a run's own rows above rows
        transferred from other layers). The threshold is chosen on unweighted out-of-fold recall."""
        x = _as_matrix(features, None, "ValidityModel.fit")
        y = np.asarray(valid, dtype=bool)
        if len(y) != len(x) or len(x) == 0:
            raise FeatureShapeError(f"ValidityModel.fit: {len(x)} feature rows but {len(y)} labels")
        w = _as_weights(sample_weight, len(x), "ValidityModel.fit")
        self.n_features_ = x.shape[1]
        self._booster = self._kind_booster = None
        self.constant_ = None
        if y.all() or not y.any():
            self.constant_ = float(y.all())
            self.threshold_ = 0.5
        else:
            self._booster = self._train(x, y.astype(np.float32), "binary:logistic", w)
            self.threshold_ = self._choose_threshold(x, y, w)
        self.kinds_ = []
        if error_kinds is not None:
            if len(error_kinds) != len(x):
                raise FeatureShapeError("ValidityModel.fit: error_kinds must have one entry per row")
            invalid = ~y
            kinds = sorted({str(k) for k, bad in zip(error_kinds, invalid, strict=True) if bad and k})
            self.kinds_ = kinds
            if len(kinds) > 1:
                labels = np.array(
                    [kinds.index(str(k)) for k, bad in zip(error_kinds, invalid, strict=True) if bad and k]
                )
                picked = [i for i, (k, bad) in enumerate(zip(error_kinds, invalid, strict=True)) if bad and k]
                self._kind_booster = self._train(
                    x[picked],
                    labels,
                    "multi:softprob",
                    None if w is None else w[picked],
                    num_class=len(kinds),
                )
        return self

    def _choose_threshold(self, x: np.ndarray, y: np.ndarray, w: np.ndarray | None = None) -> float:
        """Largest threshold whose out-of-fold recall of valid rows reaches ``target_recall``."""
        if min(y.sum(), (~y).sum()) < 2 * self.n_folds:
            return self.fallback_threshold
        rng = np.random.default_rng(self.seed)
        folds = np.empty(len(y), dtype=int)
        for label in (True, False):  # stratified, so every fold holds both classes
            rows = rng.permutation(np.flatnonzero(y == label))
            folds[rows] = np.arange(len(rows)) % self.n_folds
        oof = np.empty(len(y))
        for fold in range(self.n_folds):
            train, test = folds != fold, folds == fold
            weight = None if w is None else w[train]
            booster = self._train(x[train], y[train].astype(np.float32), "binary:logistic", weight)
            oof[test] = booster.inplace_predict(x[test])
        scores = np.sort(oof[y])
        # Keep ceil(target_recall * n_valid) valid rows: the threshold is the score of the weakest kept.
        keep = int(np.ceil(self.target_recall * len(scores)))
        return float(min(scores[len(scores) - keep], 0.5))

    def predict_proba(self, features: Any) -> np.ndarray:
        """P(valid) of each row."""
        self._check_fitted()
        x = _as_matrix(features, self.n_features_, "ValidityModel.predict_proba")
        if self.constant_ is not None:
            return np.full(len(x), self.constant_)
        return self._booster.inplace_predict(x).astype(np.float64)

    def predict(self, features: Any) -> np.ndarray:
        """True where the row is predicted valid (P(valid) >= ``threshold_``)."""
        return self.predict_proba(features) >= self.threshold_

    def predict_error_kind(self, features: Any) -> list[str | None]:
        """None for rows predicted valid, else the most likely error kind ("invalid" if unknown)."""
        ok = self.predict(features)
        x = _as_matrix(features, self.n_features_, "ValidityModel.predict_error_kind")
        if self._kind_booster is not None:
            names = [self.kinds_[i] for i in self._kind_booster.inplace_predict(x).argmax(axis=1)]
        else:
            names = [self.kinds_[0] if self.kinds_ else "invalid"] * len(x)
        return [None if good else name for good, name in zip(ok, names, strict=True)]

    def _state(self) -> tuple[dict, dict[str, bytes]]:
        blobs = {**_booster_blobs(self._booster), **_booster_blobs(self._kind_booster, "kind.ubj")}
        return {"threshold": self.threshold_, "constant": self.constant_, "kinds": self.kinds_}, blobs

    def _set_state(self, state: dict, blobs: dict[str, bytes]) -> None:
        self.threshold_, self.constant_, self.kinds_ = state["threshold"], state["constant"], state["kinds"]
        self._booster = _booster_from(blobs)
        self._kind_booster = _booster_from(blobs, "kind.ubj")


class PerformanceModel(_XGBEstimator):
    """P: throughput (higher is better) from visible features.

    Parameters
    ----------
    objective:
        ``"reg:squarederror"`` (a regressor, whose predictions are comparable to the targets, as the RMSE
        needs) or ``"rank:pairwise"`` (AutoTVM's ranking loss; only the order of predictions means anything).
    num_rounds, max_depth, learning_rate, subsample:
        XGBoost hyper-parameters.
    seed:
        Seeds XGBoost.
    """

    def __init__(
        self,
        *,
        objective: str = "reg:squarederror",
        num_rounds: int = 150,
        max_depth: int = 6,
        learning_rate: float = 0.1,
        subsample: float = 1.0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self._keep_hyper_parameters(locals())
        self._booster: xgboost.Booster | None = None

    def _check_params(self, params: dict[str, Any]) -> None:
        super()._check_params(params)
        check_objective(params["objective"])

    def fit(
        self,
        features: Any,
        targets: Sequence[float],
        sample_weight: Sequence[float] | None = None,
        groups: Sequence[int] | None = None,
    ) -> PerformanceModel:
        """Fit on feature rows and their throughput targets (finite; invalid configurations as 0).

        ``groups`` (one integer per row; ranking objective only): pairs are only formed within a group,
        e.g. one group per layer, so targets need only be comparable within a layer. ``sample_weight``
        (one per row) weighs the rows; with ``groups`` it must be constant within each group (XGBoost
        weighs ranking groups, not rows)."""
        x = _as_matrix(features, None, f"{type(self).__name__}.fit")
        y = np.asarray(targets, dtype=np.float32)
        if y.shape != (len(x),) or len(x) == 0:
            raise FeatureShapeError(f"{type(self).__name__}.fit: {len(x)} feature rows, targets {y.shape}")
        if not np.isfinite(y).all():
            raise FeatureShapeError(f"{type(self).__name__}.fit: targets contain NaN or inf")
        w = _as_weights(sample_weight, len(x), f"{type(self).__name__}.fit")
        qid = None
        if groups is not None:
            if self.objective == "reg:squarederror":
                raise ValueError("groups need a ranking objective, e.g. objective='rank:pairwise'")
            qid = np.asarray(groups)
            if qid.shape != (len(x),) or not np.issubdtype(qid.dtype, np.integer):
                raise FeatureShapeError(f"{type(self).__name__}.fit: groups must be one integer per row")
            order, qid = group_order(qid)
            x, y = x[order], y[order]
            if w is not None:
                w = w[order]
                starts = np.flatnonzero(np.r_[True, qid[1:] != qid[:-1]])
                if (w != np.repeat(w[starts], np.diff(np.r_[starts, len(w)]))).any():
                    raise FeatureShapeError(
                        f"{type(self).__name__}.fit: sample_weight must be constant within each group"
                    )
                w = w[starts]
        elif w is not None and self.objective != "reg:squarederror":
            raise ValueError("sample_weight with a ranking objective needs groups (XGBoost weighs groups)")
        params = {
            "objective": self.objective,
            "max_depth": self.max_depth,
            "eta": self.learning_rate,
            "subsample": self.subsample,
            "seed": self.seed,
        }
        self._booster = train_booster(params, x, y, self.num_rounds, weight=w, qid=qid, nthread=1)
        self.n_features_ = x.shape[1]
        return self

    def predict(self, features: Any) -> np.ndarray:
        """Predicted throughput (or ranking score) of each row; higher is better."""
        self._check_fitted()
        x = _as_matrix(features, self.n_features_, f"{type(self).__name__}.predict")
        return self._booster.inplace_predict(x).astype(np.float64)

    def _state(self) -> tuple[dict, dict[str, bytes]]:
        return {}, _booster_blobs(self._booster)

    def _set_state(self, state: dict, blobs: dict[str, bytes]) -> None:
        self._booster = _booster_from(blobs)


class AdvancedModel(PerformanceModel):
    """A: :class:`PerformanceModel` fitted on visible + hidden compilation features (the caller appends the
    hidden columns; the estimator is the same, the information is not)."""
