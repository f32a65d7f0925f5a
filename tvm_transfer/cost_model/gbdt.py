"""Gradient-boosted-tree cost models: XGBoost and LightGBM on the shared features."""

from __future__ import annotations

import lightgbm
import numpy as np
import xgboost
from tvm.ir.utils import derived_object

from tvm_transfer.common.boosters import booster_bytes, booster_from_bytes, train_booster
from tvm_transfer.cost_model.base import LearnedCostModel


@derived_object
class XGBoostCostModel(LearnedCostModel):
    """XGBoost regression of normalised throughput (unlike TVM's ``XGBModel`` it learns from the first batch).

    Parameters
    ----------
    num_rounds, max_depth, learning_rate, min_child_weight, subsample:
        The booster's hyper-parameters (XGBoost's names).
    """

    def __init__(
        self,
        *,
        num_rounds: int = 200,
        max_depth: int = 8,
        learning_rate: float = 0.1,
        min_child_weight: float = 1.0,
        subsample: float = 0.9,
        seed: int = 0,
        use_hardware_features: bool = True,
    ) -> None:
        super().__init__(seed=seed, use_hardware_features=use_hardware_features)
        self.num_rounds = num_rounds
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.min_child_weight = min_child_weight
        self.subsample = subsample
        self._booster: xgboost.Booster | None = None

    def _fit(self, features: np.ndarray, targets: np.ndarray, groups: np.ndarray) -> None:
        params = {
            "objective": "reg:squarederror",
            "max_depth": self.max_depth,
            "eta": self.learning_rate,
            "min_child_weight": self.min_child_weight,
            "subsample": self.subsample,
            "seed": self.seed,
        }
        self._booster = train_booster(params, features, targets, self.num_rounds)

    def _predict(self, features: np.ndarray) -> np.ndarray:
        return self._booster.predict(xgboost.DMatrix(features))

    def _state_bytes(self) -> bytes:
        return booster_bytes(self._booster)

    def _load_state(self, blob: bytes) -> None:
        self._booster = booster_from_bytes(blob)


@derived_object
class LightGBMCostModel(LearnedCostModel):
    """LightGBM regression of normalised throughput.

    ``min_data_in_leaf`` defaults to 2 rather than LightGBM's 20: a tuning run starts from a few dozen
    measurements, and with 20 the first trees would have a single leaf.
    """

    def __init__(
        self,
        *,
        num_rounds: int = 200,
        num_leaves: int = 31,
        learning_rate: float = 0.1,
        min_data_in_leaf: int = 2,
        feature_fraction: float = 0.9,
        seed: int = 0,
        use_hardware_features: bool = True,
    ) -> None:
        super().__init__(seed=seed, use_hardware_features=use_hardware_features)
        self.num_rounds = num_rounds
        self.num_leaves = num_leaves
        self.learning_rate = learning_rate
        self.min_data_in_leaf = min_data_in_leaf
        self.feature_fraction = feature_fraction
        self._booster: lightgbm.Booster | None = None

    def _fit(self, features: np.ndarray, targets: np.ndarray, groups: np.ndarray) -> None:
        params = {
            "objective": "regression",
            "num_leaves": self.num_leaves,
            "learning_rate": self.learning_rate,
            "min_data_in_leaf": self.min_data_in_leaf,
            "min_data_in_bin": 1,
            "feature_fraction": self.feature_fraction,
            "seed": self.seed,
            "deterministic": True,
            "force_row_wise": True,
            "verbosity": -1,
        }
        train = lightgbm.Dataset(features, label=targets, params={"verbosity": -1})
        self._booster = lightgbm.train(params, train, num_boost_round=self.num_rounds)

    def _predict(self, features: np.ndarray) -> np.ndarray:
        return self._booster.predict(features)

    def _state_bytes(self) -> bytes:
        return self._booster.model_to_string().encode()

    def _load_state(self, blob: bytes) -> None:
        self._booster = lightgbm.Booster(model_str=blob.decode())
