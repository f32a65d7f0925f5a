"""Transfer difficulty as a distance between principal subspaces on the Grassmann manifold.

Each data set is summarised by the span of its ``k`` leading principal directions (a point on the
Grassmann manifold ``Gr(k, d)``); two spans are compared by their principal angles
``theta_1..theta_k`` (radians, in ``[0, pi/2]``), and the geodesic distance is ``sqrt(sum theta_i^2)``:
0 for the same span, ``sqrt(k) * pi / 2`` (about ``1.571 * sqrt(k)``) for orthogonal spans. The two data
sets must share a space (the same columns); a source and a target with different columns are compared in
the source model's latent space, after mapping the target rows into the source input space.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.linalg import subspace_angles

from tvm_transfer.hetero.baselines import ZeroShot
from tvm_transfer.hetero.errors import FeatureWidthError, TooFewSamplesError
from tvm_transfer.hetero.inputs import Standardiser, named_matrix
from tvm_transfer.hetero.modelx import ModelX
from tvm_transfer.hetero.source import SourceModel


def principal_basis(X: Any, k: int) -> np.ndarray:
    """``(d, k)`` orthonormal basis of the ``k`` leading principal directions of the rows of ``X``."""
    matrix, _ = named_matrix(X, "principal_basis")
    if not 1 <= k <= matrix.shape[1]:
        raise ValueError(f"principal_basis: k must be in [1, {matrix.shape[1]}] (the columns), got {k}")
    if matrix.shape[0] <= k:
        raise TooFewSamplesError(
            f"principal_basis: {matrix.shape[0]} rows cannot span k={k} directions; need > k"
        )
    centred = matrix - matrix.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    return vt[:k].T


def principal_angles(X_a: Any, X_b: Any, k: int = 5) -> np.ndarray:
    """The ``k`` principal angles (radians, ascending) between the ``k``-dimensional principal subspaces of
    two data sets with the same columns."""
    a, b = named_matrix(X_a, "principal_angles"), named_matrix(X_b, "principal_angles")
    if a[0].shape[1] != b[0].shape[1]:
        raise FeatureWidthError(
            f"principal_angles: the data sets have {a[0].shape[1]} and {b[0].shape[1]} columns; compare them "
            "in a common space (transfer_distance)"
        )
    return np.sort(subspace_angles(principal_basis(a[0], k), principal_basis(b[0], k)))


def grassmann_distance(X_a: Any, X_b: Any, k: int = 5) -> float:
    """Geodesic Grassmann distance ``sqrt(sum theta_i^2)`` (radians) between the ``k``-dimensional principal
    subspaces of two data sets with the same columns."""
    return float(np.sqrt(np.sum(principal_angles(X_a, X_b, k) ** 2)))


def common_space(
    model: SourceModel | ModelX | ZeroShot, X_source: Any, X_target: Any
) -> tuple[np.ndarray, np.ndarray]:
    """Source and target rows in the source model's latent space (last hidden layer), both standardised
    with the source rows' latent statistics. Target rows enter through ``model``'s alignment (a fitted
    :class:`ModelX`) or the zero-shot mapping (a :class:`SourceModel`, or a fitted :class:`ZeroShot`)."""
    if isinstance(model, ModelX):
        source = model.source_model
        target_input = model.align(X_target)
    else:
        zero_shot = model if isinstance(model, ZeroShot) else ZeroShot(model).fit(X_target)
        source = zero_shot.source_model
        target_input = zero_shot.mapped(X_target)
    latent_source = source.latent(X_source)
    latent_target = source.latent_standardised(target_input)
    scaler = Standardiser.fit(latent_source)
    return scaler.apply(latent_source), scaler.apply(latent_target)


def transfer_distance(
    model: SourceModel | ModelX | ZeroShot, X_source: Any, X_target: Any, k: int = 5
) -> float:
    """Grassmann distance (radians) between source rows and target rows in the source model's latent space
    (see :func:`common_space`): how far the target lies from what the source model was trained on."""
    source_latent, target_latent = common_space(model, X_source, X_target)
    return grassmann_distance(source_latent, target_latent, k)
