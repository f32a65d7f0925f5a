"""Gradient-boosted-tree cost models: XGBoost and LightGBM on the shared features."""

from __future__ import annotations

from typing import Any, ClassVar

import lightgbm
import numpy as np
import xgboost
from tvm.ir.utils import derived_object

from tvm_transfer.common.archive import CostModelFileError
from tvm_transfer.common.boosters import (
    booster_bytes,
    booster_from_bytes,
    check_objective,
    group_balanced_weights,
    group_order,
    train_booster,
)
from tvm_transfer.cost_model.base import LearnedCostModel


@derived_object
class XGBoostCostModel(LearnedCostModel):
    """XGBoost on normalised throughput (unlike TVM's ``XGBModel`` it learns from the first batch).

    Parameters
    ----------
    objective:
        ``"reg:squarederror"``: regression of the normalised throughput; ``"rank:pairwise"``: a ranking
        loss over pairs of candidates of the same workload (and target), so the model learns only the order
        within a workload, which is all a search asks of it; its scores are not throughputs.
    num_rounds, max_depth, learning_rate, min_child_weight, subsample:
        The booster's hyper-parameters (XGBoost's names).
    balance_groups:
        Weigh every group (e.g. task and target) the same in the regression, however many of its
        candidates were measured, instead of every row the same (a corpus measures its heaviest tasks most).
        Only for ``"reg:squarederror"``: a ranking loss is computed within groups already.
    prior_rounds:
        Leading boosting rounds of the booster that are a fixed prior the model learns a correction of
        (set by :meth:`fine_tuned`; 0: none).
    """

    fixed_once_fitted: ClassVar[tuple[str, ...]] = ("prior_rounds",)

    def __init__(
        self,
        *,
        objective: str = "reg:squarederror",
        num_rounds: int = 200,
        max_depth: int = 8,
        learning_rate: float = 0.1,
        min_child_weight: float = 1.0,
        subsample: float = 0.9,
        balance_groups: bool = False,
        seed: int = 0,
        use_hardware_features: bool = True,
        prior_rounds: int = 0,
    ) -> None:
        super().__init__(seed=seed, use_hardware_features=use_hardware_features)
        self._keep_hyper_parameters(locals())
        self._booster: xgboost.Booster | None = None
        self._prior: xgboost.Booster | None = None

    def _check_params(self, params: dict[str, Any]) -> None:
        """Refuse an unknown ``objective``, or group weights on a ranking objective."""
        super()._check_params(params)
        check_objective(params["objective"])
        if params["balance_groups"] and params["objective"] != "reg:squarederror":
            raise ValueError(
                f"balance_groups weighs the rows of a regression; {params['objective']!r} ranks within "
                "groups already"
            )

    def fine_tuned(self, num_rounds: int = 20) -> XGBoostCostModel:
        """A new model that predicts as this fitted one until it learns, then learns what it is given as a
        correction of this one: each refit boosts ``num_rounds`` trees on top of this model's booster, from
        the new model's own rows only (a task's measurements), so a few measurements move it a little and
        this model is left as it is. Saved and loaded, it keeps the prior (``prior_rounds``)."""
        if self._booster is None:
            raise RuntimeError("fine_tuned needs a fitted XGBoostCostModel: fit it or load a saved one first")
        prior_rounds = self._booster.num_boosted_rounds()
        tuned = XGBoostCostModel(
            **{**self.get_params(), "num_rounds": num_rounds, "prior_rounds": prior_rounds}
        )
        tuned._prior = tuned._booster = self._booster
        tuned._fitted = True
        return tuned

    def _fit(self, features: np.ndarray, targets: np.ndarray, groups: np.ndarray) -> None:
        params = {
            "objective": self.objective,
            "max_depth": self.max_depth,
            "eta": self.learning_rate,
            "min_child_weight": self.min_child_weight,
            "subsample": self.subsample,
            "seed": self.seed,
        }
        if self._prior is not None:  # else XGBoost's sampling on top of a booster depends on its past
            params["seed_per_iteration"] = True
        qid = None
        weight = group_balanced_weights(groups) if self.balance_groups else None
        if self.objective != "reg:squarederror":
            order, qid = group_order(groups)
            features, targets = features[order], targets[order]
        self._booster = train_booster(
            params, features, targets, self.num_rounds, weight=weight, qid=qid, start_from=self._prior
        )

    def _predict(self, features: np.ndarray) -> np.ndarray:
        return self._booster.predict(xgboost.DMatrix(features))

    def _state_bytes(self) -> bytes:
        return booster_bytes(self._booster)

    def _load_state(self, blob: bytes) -> None:
        self._booster = booster_from_bytes(blob)
        if self.prior_rounds > self._booster.num_boosted_rounds():
            raise CostModelFileError(
                f"model.bin holds {self._booster.num_boosted_rounds()} boosting rounds, fewer than its "
                f"prior's {self.prior_rounds}"
            )
        self._prior = self._booster[: self.prior_rounds] if self.prior_rounds else None


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
