"""Synthetic source/target problems with a known relation between their feature spaces."""

from __future__ import annotations

import numpy as np
import pandas as pd

SOURCE_COLUMNS = [f"f{i}" for i in range(8)]
#: Target column of each observed source feature, and its scale (target value = scale * source value).
TARGET_OF = {3: ("t3", 1.5), 0: ("f0", 2.0), 5: ("t5", 4.0), 1: ("t1", 0.5), 4: ("f4", 0.25), 2: ("t2", 3.0)}


def label(x: np.ndarray) -> np.ndarray:
    """A smooth nonlinear performance-like function of the eight source features."""
    return (
        np.sin(x[:, 0])
        + 0.5 * x[:, 1] * x[:, 2]
        + np.tanh(x[:, 3])
        - 0.3 * x[:, 4] ** 2
        + 0.4 * x[:, 5]
        + 0.2 * x[:, 6] * x[:, 7]
    )


def source_rows(n: int, rng: np.random.Generator) -> tuple[pd.DataFrame, np.ndarray]:
    x = rng.normal(size=(n, len(SOURCE_COLUMNS)))
    return pd.DataFrame(x, columns=SOURCE_COLUMNS), label(x) + 0.05 * rng.normal(size=n)


def permuted_target_rows(n: int, rng: np.random.Generator) -> tuple[pd.DataFrame, np.ndarray]:
    """Target rows of the same function whose columns are permuted, rescaled and mostly renamed: source
    features f6 and f7 are missing (constant 0 on the target), and two unrelated columns are extra."""
    x = rng.normal(size=(n, len(SOURCE_COLUMNS)))
    x[:, 6:] = 0.0
    columns = {name: scale * x[:, j] for j, (name, scale) in TARGET_OF.items()}
    columns["extra_noise"] = rng.normal(size=n)
    columns["extra_uniform"] = rng.uniform(size=n)
    return pd.DataFrame(columns), label(x) + 0.05 * rng.normal(size=n)
