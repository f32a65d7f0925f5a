"""Feature matrices with names: what every estimator of :mod:`tvm_transfer.hetero` takes as ``X``.

A pandas frame keeps its column names; a NumPy matrix gets positional names ``x0, x1, ...``. Names are what
the zero-shot mapping matches between a source and a target feature space, and what reports print.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tvm_transfer.hetero.errors import FeatureWidthError, TooFewSamplesError

#: Columns whose spread is below this (relative to their magnitude) are treated as constant (scale 1).
_CONSTANT_TOLERANCE = 1e-8


def named_matrix(X: Any, who: str) -> tuple[np.ndarray, list[str]]:
    """``X`` (a frame or a 2-D array) as a float64 matrix and its column names; raises ``ValueError`` for
    non-numeric or non-finite values, naming the columns."""
    if isinstance(X, pd.DataFrame):
        names = [str(c) for c in X.columns]
        try:
            matrix = X.to_numpy(dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{who}: X has non-numeric columns ({err})") from err
    else:
        matrix = np.asarray(X, dtype=np.float64)
        if matrix.ndim != 2:
            raise FeatureWidthError(f"{who}: X must be 2-D (rows x features), got shape {matrix.shape}")
        names = [f"x{i}" for i in range(matrix.shape[1])]
    if len(set(names)) != len(names):
        duplicated = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"{who}: X has duplicated column names {duplicated}")
    bad = ~np.isfinite(matrix).all(axis=0)
    if bad.any():
        raise ValueError(f"{who}: X has NaN or inf in columns {[names[i] for i in np.flatnonzero(bad)]}")
    return matrix, names


def target_vector(y: Any, n_rows: int, who: str) -> np.ndarray:
    """``y`` as a finite float64 vector of ``n_rows`` values."""
    vector = np.asarray(y, dtype=np.float64).reshape(-1)
    if vector.shape != (n_rows,):
        raise FeatureWidthError(f"{who}: y has {vector.size} values for {n_rows} rows of X")
    if not np.isfinite(vector).all():
        raise ValueError(f"{who}: y has NaN or inf values")
    return vector


def columns_like(X: Any, names: Sequence[str], who: str) -> np.ndarray:
    """The matrix of ``X`` with the columns ``names`` a model was fitted on, in that order.

    A frame is matched by name (extra or missing columns raise :class:`FeatureWidthError` naming them); a
    plain matrix must have exactly ``len(names)`` columns."""
    matrix, given = named_matrix(X, who)
    if not isinstance(X, pd.DataFrame):
        if matrix.shape[1] != len(names):
            raise FeatureWidthError(
                f"{who}: X has {matrix.shape[1]} columns, the model was fitted on {len(names)}; pass the "
                "same feature columns (a DataFrame is matched by column name)"
            )
        return matrix
    position = {name: i for i, name in enumerate(given)}
    missing = [n for n in names if n not in position]
    extra = [n for n in given if n not in set(names)]
    if missing or extra:
        raise FeatureWidthError(
            f"{who}: X has {len(given)} columns, the model was fitted on {len(names)}; "
            f"missing {missing[:8]}{'...' if len(missing) > 8 else ''}, "
            f"unexpected {extra[:8]}{'...' if len(extra) > 8 else ''}"
        )
    return matrix[:, [position[n] for n in names]]


def require_rows(n_rows: int, minimum: int, who: str, option: str = "min_samples") -> None:
    """Raise :class:`TooFewSamplesError` when ``n_rows`` < ``minimum``."""
    if n_rows < minimum:
        raise TooFewSamplesError(
            f"{who}: {n_rows} samples, at least {minimum} needed ({option}={minimum}); "
            "give more target rows (e.g. a larger --fraction)"
        )


@dataclass(frozen=True)
class Standardiser:
    """Column means and scales (standard deviations; 1 for constant columns), in the data's units."""

    mean: np.ndarray
    scale: np.ndarray

    @classmethod
    def fit(cls, matrix: np.ndarray) -> Standardiser:
        mean = matrix.mean(axis=0)
        std = matrix.std(axis=0)
        constant = std <= _CONSTANT_TOLERANCE * np.maximum(1.0, np.abs(mean))
        return cls(mean, np.where(constant, 1.0, std))

    def apply(self, matrix: np.ndarray) -> np.ndarray:
        return (matrix - self.mean) / self.scale

    def invert(self, matrix: np.ndarray) -> np.ndarray:
        return matrix * self.scale + self.mean


@dataclass(frozen=True)
class ColumnMatch:
    """Which target column feeds each source column (by equal name), ``-1`` where none does.

    This defines the zero-shot use of a source model on a target of other columns: matched columns are
    passed as they are (same name, same units assumed), unmatched source columns are set to the source
    training mean, extra target columns are ignored."""

    source_of: np.ndarray  # (n_source_columns,) int: target column index or -1

    @classmethod
    def by_name(cls, source_names: Sequence[str], target_names: Sequence[str]) -> ColumnMatch:
        position = {name: i for i, name in enumerate(target_names)}
        return cls(np.array([position.get(name, -1) for name in source_names], dtype=np.int64))

    @property
    def n_matched(self) -> int:
        return int((self.source_of >= 0).sum())

    def map(self, target: np.ndarray, source_mean: np.ndarray) -> np.ndarray:
        """Target rows (raw units) as source rows (raw units)."""
        mapped = np.tile(source_mean, (target.shape[0], 1))
        matched = self.source_of >= 0
        mapped[:, matched] = target[:, self.source_of[matched]]
        return mapped
