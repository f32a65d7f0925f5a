"""Residual models ``M_R``: small regressors of what a base prediction still gets wrong.

They are fitted on a handful of target rows, so they are kept simple and strongly regularised:

- ``"mean"``: one constant offset (the mean residual);
- ``"ridge"``: a ridge regression with intercept on the standardised features;
- ``"xgboost"``: shallow boosted trees (depth 2, shrinkage 0.1) whose base score is the mean residual.
"""

from __future__ import annotations

import numpy as np

from tvm_transfer.common.boosters import booster_bytes, booster_from_bytes, train_booster

RESIDUAL_KINDS = ("mean", "ridge", "xgboost")


class ResidualModel:
    """One fitted residual model of a kind in :data:`RESIDUAL_KINDS` (inputs already standardised)."""

    def __init__(self, kind: str, alpha: float = 10.0, rounds: int = 60, seed: int = 0) -> None:
        if kind not in RESIDUAL_KINDS:
            raise ValueError(f"unknown residual {kind!r}; choose one of {', '.join(RESIDUAL_KINDS)}")
        self.kind, self.alpha, self.rounds, self.seed = kind, alpha, rounds, seed
        self.offset = 0.0
        self.coef: np.ndarray | None = None
        self.booster = None

    def fit(self, x: np.ndarray, residual: np.ndarray) -> ResidualModel:
        self.offset = float(residual.mean())
        if self.kind == "ridge":
            centred = x - x.mean(axis=0)
            gram = centred.T @ centred + self.alpha * np.eye(x.shape[1])
            self.coef = np.linalg.solve(gram, centred.T @ (residual - self.offset))
            self.offset -= float(x.mean(axis=0) @ self.coef)
        elif self.kind == "xgboost":
            params = {
                "objective": "reg:squarederror",
                "max_depth": 2,
                "eta": 0.1,
                "lambda": 1.0,
                "min_child_weight": 1.0,
                "base_score": self.offset,
                "seed": self.seed,
            }
            self.booster = train_booster(params, x.astype(np.float32), residual, self.rounds, nthread=1)
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        if self.kind == "ridge":
            return x @ self.coef + self.offset
        if self.kind == "xgboost":
            import xgboost

            matrix = xgboost.DMatrix(x.astype(np.float32), nthread=1)
            return self.booster.predict(matrix).astype(np.float64)
        return np.full(len(x), self.offset)

    def arrays(self, prefix: str) -> dict[str, np.ndarray]:
        found = {prefix + "offset": np.array([self.offset])}
        if self.coef is not None:
            found[prefix + "coef"] = self.coef
        return found

    def blobs(self, name: str) -> dict[str, bytes]:
        return {name: booster_bytes(self.booster)} if self.booster is not None else {}

    @classmethod
    def restore(
        cls, kind: str, arrays: dict[str, np.ndarray], blobs: dict[str, bytes], prefix: str, name: str
    ) -> ResidualModel:
        model = cls(kind)
        model.offset = float(arrays[prefix + "offset"][0])
        model.coef = arrays.get(prefix + "coef")
        if kind == "xgboost":
            model.booster = booster_from_bytes(blobs[name])
        return model
