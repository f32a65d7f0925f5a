"""Simulated annealing over a mixed-radix knob space (AutoTVM's proposal scheme) and its index arithmetic."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def space_indices(digits: np.ndarray, radices: np.ndarray) -> np.ndarray:
    """Mixed-radix digits (rows) -> space indices; the last knob varies fastest, as KnobSpace."""
    index = np.zeros(len(digits), dtype=np.int64)
    for column, radix in enumerate(radices):
        index = index * radix + digits[:, column]
    return index


def space_digits(indices: np.ndarray, radices: np.ndarray) -> np.ndarray:
    """Space indices -> mixed-radix digits (one row per index), the inverse of :func:`space_indices`."""
    digits = np.zeros((len(indices), len(radices)), dtype=np.int64)
    rest = np.asarray(indices, dtype=np.int64).copy()
    for column in range(len(radices) - 1, -1, -1):
        rest, digits[:, column] = np.divmod(rest, radices[column])
    return digits


def memoize(score: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """``score`` evaluated once per index (walkers revisit points; a model's prediction does not change
    within a round)."""
    known: dict[int, float] = {}

    def cached(points: np.ndarray) -> np.ndarray:
        new = np.unique([i for i in points.tolist() if i not in known]).astype(np.int64)
        if len(new):
            known.update(zip(new.tolist(), score(new).tolist(), strict=True))
        return np.array([known[i] for i in points.tolist()])

    return cached


def anneal(
    radices: np.ndarray,
    score: Callable[[np.ndarray], np.ndarray],
    n_best: int,
    exclude: set[int],
    rng: np.random.Generator,
    starts: list[int] | None = None,
    parallel: int = 128,
    steps: int = 80,
) -> list[int]:
    """Simulated annealing over a mixed-radix space (AutoTVM's proposal scheme): ``parallel`` walkers
    mutate one knob per step and accept by exp(delta / T), T falling linearly from 1 to 0; returns the
    ``n_best`` highest-scoring indices seen that are not in ``exclude``, best first."""
    size = int(np.prod(radices))
    points = rng.integers(0, size, size=parallel)
    if starts:
        points[: min(len(starts), parallel)] = starts[:parallel]
    current = score(points)
    seen: dict[int, float] = {}

    def remember(indices: np.ndarray, scores: np.ndarray) -> None:
        for i, s in zip(indices.tolist(), scores.tolist(), strict=True):
            if i not in exclude:
                seen[i] = s

    remember(points, current)
    mutable = np.flatnonzero(radices > 1)
    for step in range(steps):
        temperature = 1.0 - step / steps
        digits = space_digits(points, radices)
        column = rng.choice(mutable, size=parallel)
        # A different value of the chosen knob: add 1..radix-1 modulo the radix.
        shift = rng.integers(1, radices[column])
        digits[np.arange(parallel), column] = (digits[np.arange(parallel), column] + shift) % radices[column]
        proposal = space_indices(digits, radices)
        proposed = score(proposal)
        remember(proposal, proposed)
        accept = np.exp(np.minimum((proposed - current) / max(temperature, 1e-3), 0.0)) > rng.random(parallel)
        points = np.where(accept, proposal, points)
        current = np.where(accept, proposed, current)
    ranked = sorted(seen, key=lambda i: -seen[i])
    return ranked[:n_best]
