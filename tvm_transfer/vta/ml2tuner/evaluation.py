"""Held-out evaluation of V, P and A on exhaustively measured vta_ext spaces.

A :class:`LayerData` holds every configuration of one layer on one hardware config (visible features,
hidden features where it compiled, validity, error kind, latency). Models are fitted on a random share of
the rows and scored on the rest: V by precision and recall of *valid* configurations, P and A by the RMSE
of normalised throughput (the layer's best latency / latency, TenSet's RMSE target).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tenset_tools.frame import normalised_throughput
from tenset_tools.metrics import rmse
from tvm_transfer.common.estimators import AdvancedModel, PerformanceModel, ValidityModel
from tvm_transfer.vta.ml2tuner.measurer import VtaMeasurer
from vta_ext.features import HIDDEN_FEATURE_NAMES


@dataclass(frozen=True)
class LayerData:
    """All configurations of one layer: ``latency`` in seconds (NaN if invalid); ``hidden`` rows are NaN
    where compilation failed."""

    name: str
    visible: np.ndarray
    hidden: np.ndarray
    valid: np.ndarray
    error_kind: list[str | None]
    latency: np.ndarray

    @classmethod
    def from_measurer(cls, measurer: VtaMeasurer, indices: Sequence[int] | None = None) -> LayerData:
        """Every configuration of the measurer's space (exhaustive), or only those at ``indices``."""
        if indices is None:
            results = measurer.exhaustive()
            indices = range(len(results))
        else:
            results = [measurer.profile(i) for i in indices]
        width = len(HIDDEN_FEATURE_NAMES)
        hidden = np.array([r.hidden_features or [np.nan] * width for r in results], dtype=np.float32)
        return cls(
            measurer.workload.name,
            measurer.visible(list(indices)),
            hidden,
            np.array([r.valid for r in results]),
            [r.error_kind for r in results],
            np.array([r.latency for r in results], dtype=np.float64),
        )

    @property
    def throughput(self) -> np.ndarray:
        """Best latency / latency of the valid rows (in (0, 1])."""
        latency = self.latency[self.valid]
        return normalised_throughput(latency, np.zeros(len(latency)))


def _split(n: int, train_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction}")
    perm = np.random.default_rng(seed).permutation(n)
    k = max(1, round(train_fraction * n))
    return perm[:k], perm[k:]


def rmse_ratio(layers: list[LayerData], train_fraction: float = 0.2, seed: int = 0) -> dict[str, float]:
    """Fit P (visible) and A (visible + hidden) on ``train_fraction`` of the valid configurations of all
    ``layers`` pooled, score both on the rest; returns ``rmse_p``, ``rmse_a`` and ``ratio`` (A / P)."""
    visible = np.vstack([layer.visible[layer.valid] for layer in layers])
    hidden = np.hstack([visible, np.vstack([layer.hidden[layer.valid] for layer in layers])])
    y = np.concatenate([layer.throughput for layer in layers])
    train, test = _split(len(y), train_fraction, seed)
    p = PerformanceModel(seed=seed).fit(visible[train], y[train])
    a = AdvancedModel(seed=seed).fit(hidden[train], y[train])
    rmse_p = rmse(y[test], p.predict(visible[test]))
    rmse_a = rmse(y[test], a.predict(hidden[test]))
    return {"rmse_p": rmse_p, "rmse_a": rmse_a, "ratio": rmse_a / rmse_p, "n_train": len(train)}


def validity_scores(
    layers: list[LayerData], train_fraction: float = 0.2, seed: int = 0, target_recall: float = 0.98
) -> dict[str, float]:
    """Fit V on ``train_fraction`` of all configurations (valid or not) of ``layers`` pooled; on the rest,
    ``recall`` / ``precision`` of the valid class, the share of invalid ones filtered out and the accuracy of
    the predicted error kind on the invalid ones it catches."""
    x = np.vstack([layer.visible for layer in layers])
    valid = np.concatenate([layer.valid for layer in layers])
    kinds = [k for layer in layers for k in layer.error_kind]
    train, test = _split(len(valid), train_fraction, seed)
    v = ValidityModel(target_recall=target_recall, seed=seed).fit(
        x[train], valid[train], [kinds[i] for i in train]
    )
    predicted = v.predict(x[test])
    truth = valid[test]
    caught = ~predicted & ~truth
    named = v.predict_error_kind(x[test])
    kind_hits = [named[j] == kinds[i] for j, i in enumerate(test) if caught[j]]
    return {
        "recall": float((predicted & truth).sum() / max(truth.sum(), 1)),
        "precision": float((predicted & truth).sum() / max(predicted.sum(), 1)),
        "invalid_filtered": float(caught.sum() / max((~truth).sum(), 1)),
        "kind_accuracy": float(np.mean(kind_hits)) if kind_hits else float("nan"),
        "threshold": v.threshold_,
        "n_train": len(train),
    }
