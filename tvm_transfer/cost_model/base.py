"""The shared machinery of our learned MetaSchedule cost models.

A model sees each candidate as one feature row (pooled kernel features + the target's hardware vector),
learns the *normalised throughput* of each measured candidate (best latency of its workload / its latency,
so 1.0 is the best seen and failures are 0), and predicts a score where higher is better, as MetaSchedule
expects. Subclasses only supply the estimator: ``_fit``, ``_predict`` and the (de)serialisation of its state.

The constructor arguments are the hyper-parameters (scikit-learn convention, through
:class:`~tvm_transfer.common.params.HyperParameters`): :meth:`get_params` reads them from the constructor's
signature, :meth:`set_params` changes them, and a saved model stores them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.cost_model import PyCostModel
from tvm.s_tir.meta_schedule.utils import shash2hex

from tenset_tools.frame import feature_matrix, group_keys, normalised_throughput, throughput_labels
from tvm_transfer.common.archive import (
    CostModelFileError,
    arrays_bytes,
    checked_arrays,
    checked_params,
    read_archive,
    read_arrays,
    short_reason,
    write_archive,
)
from tvm_transfer.common.params import HyperParameters
from tvm_transfer.features import KernelFeatureExtractor, hardware_features
from tvm_transfer.runner import runner_seconds

#: Version of the saved-model archive layout; bump it when the layout or the feature set changes. Version 3
#: stores network weights as plain arrays where version 2 held a pickle.
FORMAT_VERSION = 3
_FORMAT_NAME = "tvm-transfer-cost-model"


class LearnedCostModel(PyCostModel, HyperParameters):
    """Base of our cost models: collects measurements, normalises them per workload, refits an estimator.

    Not a MetaSchedule object itself: concrete subclasses are decorated with ``@derived_object``.

    Outside a tuning run every model learns the same way: from a dataset frame (:meth:`fit_frame`,
    :meth:`predict_frame`; the rows come from :meth:`frame_features`, which a model with its own inputs
    overrides) or from feature matrices (:meth:`fit_features`, :meth:`update_features`,
    :meth:`predict_features`). ``fit_*`` replaces what the model held, ``update*`` adds to it.

    Parameters
    ----------
    seed:
        Seeds the estimator and the random scores returned before the first ``update``.
    use_hardware_features:
        Append the target's eight hardware parameters to every feature row, so that one model can learn
        from records of several targets.
    """

    def __init__(self, *, seed: int = 0, use_hardware_features: bool = True) -> None:
        super().__init__()
        self.seed = seed
        self.use_hardware_features = use_hardware_features
        self._extractor = KernelFeatureExtractor()
        self._rng = np.random.default_rng(seed)
        self._features: list[np.ndarray] = []
        self._costs: list[float] = []
        self._groups: list[str] = []
        self._fitted = False

    # ---- estimator hooks -------------------------------------------------------------------------------
    def _fit(self, features: np.ndarray, targets: np.ndarray, groups: np.ndarray) -> None:
        raise NotImplementedError

    def _predict(self, features: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _state_bytes(self) -> bytes:
        """The fitted estimator as plain data (arrays, a library's own format), never a pickle."""
        raise NotImplementedError

    def _load_state(self, blob: bytes) -> None:
        """Restore :meth:`_state_bytes`; raises :class:`CostModelFileError` for a blob it cannot use."""
        raise NotImplementedError

    # ---- features --------------------------------------------------------------------------------------
    def features(self, context: ms.TuneContext, candidates: Sequence[ms.MeasureCandidate]) -> np.ndarray:
        """The ``(n, d)`` float32 feature matrix this model learns from."""
        kernel = self._extractor.pooled(context, candidates)
        if not self.use_hardware_features:
            return kernel
        hardware = np.broadcast_to(hardware_features(context.target).astype(np.float32), (len(kernel), 8))
        return np.hstack([kernel, hardware])

    def shared_features_key(self) -> tuple | None:
        """Equal (not ``None``) for models that compute the same :meth:`features` and learn and predict
        through this class's :meth:`update` and :meth:`predict`: one feature matrix of a batch then serves
        them all (:meth:`predict_rows`, :meth:`update_rows`). ``None`` for a model with inputs of its own."""
        own = ("features", "predict", "update")
        if any(getattr(type(self), name) is not getattr(LearnedCostModel, name) for name in own):
            return None
        return (
            self.use_hardware_features,
            self._extractor.buffers_per_store,
            self._extractor.cache_line_bytes,
        )

    @property
    def num_samples(self) -> int:
        """Number of measurements the model has been trained on."""
        return len(self._costs)

    # ---- PyCostModel -----------------------------------------------------------------------------------
    def update(
        self,
        context: ms.TuneContext,
        candidates: list[ms.MeasureCandidate],
        results: list[ms.runner.RunnerResult],
    ) -> None:
        """Add measured candidates (of one workload) and refit on everything seen so far."""
        if not candidates:
            return
        self._learn(context, self.features(context, candidates), results)

    def update_rows(
        self, context: ms.TuneContext, features: np.ndarray, results: list[ms.runner.RunnerResult]
    ) -> None:
        """:meth:`update` given the candidates' rows of :meth:`features` instead of the candidates; only for
        a model that shares its features (:meth:`shared_features_key`)."""
        self._require_shared_features("update_rows")
        self._learn(context, features, results)

    def _learn(
        self, context: ms.TuneContext, features: np.ndarray, results: list[ms.runner.RunnerResult]
    ) -> None:
        if len(features):
            self._record(context, features, results)
            self.refit()

    def _record(
        self, context: ms.TuneContext, features: np.ndarray, results: list[ms.runner.RunnerResult]
    ) -> str:
        """Add the feature rows of measured candidates of one workload (cost: mean seconds, ``inf`` if
        failed); returns their group, the workload's structural hash."""
        group = shash2hex(context.mod)
        costs = [runner_seconds(r) for r in results]
        self._add(features, costs, [group] * len(features))
        return group

    def fit_features(
        self, features: np.ndarray, targets: Sequence[float], groups: Sequence
    ) -> LearnedCostModel:
        """Fit on rows given as a feature matrix, forgetting what the model held (scikit-learn ``fit``).

        ``features`` has the columns of :meth:`features` (pooled kernel features, then the 8 hardware
        features when ``use_hardware_features``); ``targets`` are normalised throughputs (1 = best of its
        group, 0 = failed) and ``groups`` the group of each row (e.g. its task and target). The rows are
        kept like measurements (as relative costs 1/target, renormalised per group), so :meth:`save`
        stores them and later :meth:`update` calls (tuning after pre-training) train on them too.
        """
        self._forget()
        return self.update_features(features, targets, groups)

    def update_features(
        self, features: np.ndarray, targets: Sequence[float], groups: Sequence
    ) -> LearnedCostModel:
        """Add rows given as a feature matrix (as :meth:`fit_features`) to those the model holds and refit
        on all of them."""
        targets = np.asarray(targets, dtype=np.float64)
        with np.errstate(divide="ignore"):
            costs = np.where(targets > 0, 1.0 / np.maximum(targets, 1e-300), np.inf)
        self._add(np.asarray(features, dtype=np.float32), list(costs), [str(g) for g in groups])
        self.refit()
        return self._public()

    def frame_features(self, frame: pd.DataFrame) -> np.ndarray:
        """The feature rows of a schema frame's records (the columns of :meth:`features`)."""
        return feature_matrix(frame, self.use_hardware_features)

    def fit_frame(self, frame: pd.DataFrame) -> LearnedCostModel:
        """Fit on a schema frame's records (labels: their normalised throughput), forgetting earlier data."""
        return self.fit_features(self.frame_features(frame), throughput_labels(frame), group_keys(frame))

    def predict_frame(self, frame: pd.DataFrame) -> np.ndarray:
        """Predicted normalised throughput of a schema frame's records."""
        return self.predict_features(self.frame_features(frame))

    def _forget(self) -> None:
        """Drop the rows held and the fitted state (the start of every ``fit``)."""
        self._features, self._costs, self._groups = [], [], []
        self._fitted = False

    def predict_features(self, features: np.ndarray) -> np.ndarray:
        """Predicted normalised throughput of feature rows (the columns of :meth:`features`)."""
        if not self._fitted:
            raise RuntimeError(
                f"{type(self).__name__} has not been fitted: call fit_features or update first"
            )
        return np.asarray(self._predict(np.asarray(features, dtype=np.float32)), dtype=np.float64)

    def _add(self, features: np.ndarray, costs: Sequence[float], groups: Sequence[str]) -> None:
        if not len(features) == len(costs) == len(groups):
            raise ValueError(f"{len(features)} feature rows, {len(costs)} targets, {len(groups)} groups")
        if self._features and features.shape[1] != self._features[0].shape[1]:
            raise ValueError(
                f"feature rows of width {features.shape[1]}, but the model holds rows of width "
                f"{self._features[0].shape[1]}"
            )
        self._features.append(features)
        self._costs.extend(float(c) for c in costs)
        self._groups.extend(groups)

    def refit(self) -> None:
        """Fit the estimator on all collected measurements (no-op without any successful one)."""
        costs = np.asarray(self._costs, dtype=np.float64)
        if not np.isfinite(costs).any():
            return
        groups = np.asarray(self._groups)
        self._fit(np.concatenate(self._features), normalised_throughput(costs, groups), groups)
        self._fitted = True

    def predict(self, context: ms.TuneContext, candidates: list[ms.MeasureCandidate]) -> np.ndarray:
        """Predicted normalised throughput (higher is better); uniform random scores before any update."""
        if not self._fitted:
            return self._rng.uniform(size=len(candidates))
        return self.predict_features(self.features(context, candidates))

    def predict_rows(self, features: np.ndarray) -> np.ndarray:
        """:meth:`predict` given the candidates' rows of :meth:`features` instead of the candidates; only for
        a model that shares its features (:meth:`shared_features_key`)."""
        self._require_shared_features("predict_rows")
        if not self._fitted:
            return self._rng.uniform(size=len(features))
        return self.predict_features(features)

    def _require_shared_features(self, method: str) -> None:
        if self.shared_features_key() is None:
            raise TypeError(
                f"{type(self).__name__} computes its own inputs in predict and update: {method} would skip "
                "them; call predict or update with the candidates"
            )

    # ---- persistence -----------------------------------------------------------------------------------
    def set_params(self, **params: Any) -> LearnedCostModel:
        """Change hyper-parameters (scikit-learn convention), e.g. ``fine_tune_mode`` of a loaded BiLSTM;
        those of :attr:`fixed_once_fitted` only while the model is not fitted."""
        super().set_params(**params)
        return self._public()

    def _is_fitted(self) -> bool:
        return self._fitted

    def _public(self) -> LearnedCostModel:
        # Under @derived_object, methods run on the inner Python object; hand back the MetaSchedule
        # object that wraps it, so that e.g. `model.fit_frame(frame)` can go straight into ms.tune_tir.
        outer = getattr(self, "_outer", None)
        wrapper = outer() if outer is not None else None
        return wrapper if wrapper is not None else self

    def save(self, path: str | Path) -> None:
        """Write the model, its hyper-parameters and its training data to one archive at ``path``."""
        meta = {"model": type(self).__name__, "params": self.get_params(), "fitted": self._fitted}
        features = np.concatenate(self._features) if self._features else np.zeros((0, 0), np.float32)
        data = {
            "features": features,
            "costs": np.asarray(self._costs),
            "groups": np.asarray(self._groups, str),
        }
        blobs = {"data.npz": arrays_bytes(data)}
        if self._fitted:
            blobs["model.bin"] = self._state_bytes()
        write_archive(path, _FORMAT_NAME, FORMAT_VERSION, meta, blobs)

    def load(self, path: str | Path) -> None:
        """Restore a model saved by :meth:`save` of the same class; raises :class:`CostModelFileError`."""
        meta, data, blob = _read_archive(Path(path), type(self).__name__)
        params = checked_params(meta.get("params", {}), self.get_params(), f"{path}: meta.json")
        for name, value in params.items():
            setattr(self, name, value)
        self._features = [data["features"]] if len(data["costs"]) else []
        self._costs = [float(c) for c in data["costs"]]
        self._groups = [str(g) for g in data["groups"]]
        self._fitted = blob is not None
        if blob is not None:
            try:
                self._load_state(blob)
            except CostModelFileError as err:
                raise CostModelFileError(f"{path}: {err}") from err
            except Exception as err:  # the library's own reader refused the blob (XGBoost, LightGBM, zip)
                reason = short_reason(err)
                raise CostModelFileError(
                    f"{path}: model.bin is not a saved {type(self).__name__} state ({reason}); the archive "
                    "is damaged or holds another model's payload"
                ) from err


def saved_model_class(path: str | Path) -> str:
    """Class name of the model saved at ``path`` (e.g. ``"XGBoostCostModel"``); raises
    :class:`CostModelFileError` for a file that is not a saved model of this format version."""
    meta, _, _ = _read_archive(Path(path), None)
    return str(meta.get("model"))


def _read_archive(path: Path, expected_model: str | None) -> tuple[dict, dict[str, np.ndarray], bytes | None]:
    meta, blobs = read_archive(path, _FORMAT_NAME, FORMAT_VERSION, expected_model)
    needed = ["data.npz", "model.bin"] if meta.get("fitted") else ["data.npz"]
    missing = [name for name in needed if name not in blobs]
    if missing:
        raise CostModelFileError(
            f"{path}: the archive lacks {', '.join(missing)}; expected a {_FORMAT_NAME} archive, "
            f"format version {FORMAT_VERSION}"
        )
    data = read_arrays(blobs["data.npz"], f"{path}: data.npz")
    data = checked_arrays(
        data, {"features": (None, None), "costs": (None,), "groups": (None,)}, "", f"{path}: data.npz"
    )
    return meta, data, blobs.get("model.bin")
