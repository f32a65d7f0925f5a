"""The Grassmann distance between principal subspaces: ~0 for two samples of one distribution, growing
with the angle between two rotated subspaces; the source/target distance in the latent space."""

from __future__ import annotations

import numpy as np
import pytest
from hetero_synthetic import permuted_target_rows, source_rows

from tvm_transfer.hetero import (
    FeatureWidthError,
    ModelX,
    TooFewSamplesError,
    grassmann_distance,
    principal_angles,
    transfer_distance,
)


def planar(n: int, angle: float, rng: np.random.Generator) -> np.ndarray:
    """Rows near a 2-D plane of R^6 spanned by e0 and (cos a) e1 + (sin a) e2, small isotropic noise."""
    basis = np.zeros((2, 6))
    basis[0, 0] = 1.0
    basis[1, 1], basis[1, 2] = np.cos(angle), np.sin(angle)
    return rng.normal(size=(n, 2)) * [3.0, 2.0] @ basis + 0.05 * rng.normal(size=(n, 6))


def test_two_samples_of_one_distribution_are_close():
    rng = np.random.default_rng(0)
    assert grassmann_distance(planar(400, 0.0, rng), planar(400, 0.0, rng), k=2) < 0.05


def test_the_distance_grows_with_the_rotation_angle_and_equals_it():
    rng = np.random.default_rng(1)
    reference = planar(400, 0.0, rng)
    angles = [0.2, 0.5, 0.9, 1.3]
    distances = [grassmann_distance(reference, planar(400, a, rng), k=2) for a in angles]
    assert distances == sorted(distances)
    # One principal angle equals the rotation, the other is ~0: the geodesic distance is the angle.
    np.testing.assert_allclose(distances, angles, atol=0.05)
    assert principal_angles(reference, planar(400, 0.5, rng), k=2)[0] < 0.05


def test_distance_needs_one_space_and_enough_rows():
    rng = np.random.default_rng(2)
    with pytest.raises(FeatureWidthError, match="6 and 5 columns"):
        grassmann_distance(planar(50, 0.0, rng), rng.normal(size=(50, 5)), k=2)
    with pytest.raises(TooFewSamplesError, match="3 rows cannot span k=3"):
        grassmann_distance(planar(3, 0.0, rng), planar(50, 0.0, rng), k=3)


def test_transfer_distance_in_the_latent_space(source_model):
    rng = np.random.default_rng(3)
    source, _ = source_rows(400, rng)
    same, _ = source_rows(400, rng)
    target, labels = permuted_target_rows(400, rng)
    # The same distribution as the source: near 0; a target of other columns through the zero-shot map
    # (most inputs held at the source mean): far; after alignment on 60 rows: closer. Latent subspaces of
    # 400 rows vary from sample to sample, so the comparisons are relative.
    same_distance = transfer_distance(source_model, source, same, k=2)
    zero_shot = transfer_distance(source_model, source, target, k=2)
    adapted = ModelX(source_model, mode="align").fit(target[:60], labels[:60])
    aligned = transfer_distance(adapted, source, target, k=2)
    # Over 5 seeds: same 0.24-0.63, zero-shot 1.42-1.67, aligned 0.28-0.95 (k=2: at most pi/2*sqrt(2)).
    assert same_distance < 0.5 * zero_shot
    assert aligned < 0.7 * zero_shot
