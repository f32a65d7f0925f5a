"""A Gaussian copula over (task descriptor, encoded configuration) rows, sampled conditionally on a new task.

This is the generative model of Randall et al. (ICS'23, arXiv 2401.04669): from each source task keep only
its best configurations (a quantile of the measured costs, 0.3 by default as in the paper's ICS'23
experiments), fit a Gaussian copula jointly over the task descriptor columns (shape dimensions, hardware
features) and the configuration columns, then condition on the target task's descriptor and sample
configurations. Sampled values are continuous; the encodings (:mod:`.encoding`, :mod:`.vta`) repair them
into valid configurations.

The copula itself is ``copulas.multivariate.GaussianMultivariate`` from the ``copulas`` package (DataCebo,
Business Source License 1.1; see ``docs/copula_search.md``).
"""

from __future__ import annotations

import logging
import warnings
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

log = logging.getLogger(__name__)

__all__ = ["DISTRIBUTIONS", "ConditionalCopula", "best_quantile"]

#: Marginal distributions by name -> ``copulas.univariate`` class path. The paper uses truncated Gaussians.
#: Orders of proposals: most often drawn first (the copula's modes), or first drawn first (the paper's).
ORDERS = ("frequency", "sample")


def check_order(order: str) -> None:
    """Raise ``ValueError`` unless ``order`` is one of :data:`ORDERS`."""
    if order not in ORDERS:
        raise ValueError(f"unknown order {order!r}; choose one of {', '.join(ORDERS)}")


def ranked(keys: Iterable[Hashable], order: str) -> list[tuple[Hashable, int]]:
    """The distinct ``keys`` of a run of draws with how often each was drawn, in proposal ``order``:
    ``"frequency"`` most drawn first (ties keep the first-drawn order), ``"sample"`` first drawn first."""
    counts = Counter(keys)  # insertion-ordered: first drawn first
    unique = list(counts)
    if order == "frequency":
        unique.sort(key=lambda key: -counts[key])
    return [(key, counts[key]) for key in unique]


DISTRIBUTIONS = {
    "truncated_gaussian": "copulas.univariate.TruncatedGaussian",
    "gaussian_kde": "copulas.univariate.GaussianKDE",
    "beta": "copulas.univariate.BetaUnivariate",
    "auto": "copulas.univariate.Univariate",
}


def best_quantile(
    frame: pd.DataFrame, quantile: float, cost: str = "cost", group: str = "task"
) -> pd.DataFrame:
    """Rows whose ``cost`` (seconds; lower is better; non-finite = failed) is within the best ``quantile`` of
    their ``group`` (``cost <= group quantile``); every group keeps at least its best row."""
    if not 0.0 < quantile <= 1.0:
        raise ValueError(f"quantile must be in (0, 1], got {quantile}")
    for column in (cost, group):
        if column not in frame:
            raise ValueError(f"source frame has no {column!r} column")
    finite = frame[np.isfinite(frame[cost].to_numpy(dtype=float))]
    kept = []
    for _, rows in finite.groupby(group, sort=False):
        threshold = rows[cost].quantile(quantile, interpolation="lower")
        kept.append(rows[rows[cost] <= threshold])
    if not kept:
        raise ValueError("no source row has a finite cost")
    return pd.concat(kept, ignore_index=True)


class ConditionalCopula:
    """Gaussian copula fitted on the best configurations of source tasks; sampled given a task descriptor.

    Parameters
    ----------
    quantile:
        Share of each source task's measured configurations kept (best first), in (0, 1].
    distribution:
        Marginal of every column, a key of :data:`DISTRIBUTIONS`.
    """

    def __init__(self, quantile: float = 0.3, distribution: str = "truncated_gaussian") -> None:
        if distribution not in DISTRIBUTIONS:
            raise ValueError(
                f"unknown distribution {distribution!r}; choose one of {', '.join(DISTRIBUTIONS)}"
            )
        self.quantile = quantile
        self.distribution = distribution

    def fit(
        self,
        frame: pd.DataFrame,
        descriptor_columns: Sequence[str],
        value_columns: Sequence[str],
        cost: str = "cost",
        group: str = "task",
    ) -> ConditionalCopula:
        """Fit on ``frame`` (one row per measured configuration: descriptor, values, ``cost``, ``group``)."""
        from copulas.multivariate import GaussianMultivariate

        missing = [c for c in [*descriptor_columns, *value_columns] if c not in frame]
        if missing:
            raise ValueError(f"source frame lacks columns {missing}")
        rows = best_quantile(frame, self.quantile, cost, group)
        self.descriptor_columns_ = list(descriptor_columns)
        self.value_columns_ = list(value_columns)
        self.n_rows_ = len(rows)
        self.n_tasks_ = rows[group].nunique()
        data = rows[[*descriptor_columns, *value_columns]].astype(float)
        # A constant column has no marginal to fit and a zero row in the correlation matrix: store its value.
        constant = [c for c in data if data[c].nunique() <= 1]
        self.constants_ = {c: float(data[c].iloc[0]) for c in constant}
        # Descriptor columns that duplicate another (e.g. H == W in every source) make the conditioning
        # covariance singular; condition on the first of each duplicate set only.
        modelled_descriptors: list[str] = []
        for column in descriptor_columns:
            if column in constant:
                continue
            if any(np.array_equal(data[column].to_numpy(), data[c].to_numpy()) for c in modelled_descriptors):
                continue
            modelled_descriptors.append(column)
        self.conditioned_columns_ = modelled_descriptors
        self.modelled_values_ = [c for c in value_columns if c not in constant]
        self.ranges_ = {c: (float(data[c].min()), float(data[c].max())) for c in data}
        columns = modelled_descriptors + self.modelled_values_
        self.model_ = None
        if self.modelled_values_:
            if len(rows) < 2:
                raise ValueError("need at least two source rows after quantile filtering to fit a copula")
            self.model_ = GaussianMultivariate(distribution=DISTRIBUTIONS[self.distribution])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # scipy fit warnings on short, discrete columns
                self.model_.fit(data[columns])
        return self

    def sample(self, descriptor: Mapping[str, float], n: int, seed: int = 0) -> pd.DataFrame:
        """``n`` rows of the value columns drawn from the copula conditioned on ``descriptor``.

        Descriptor values outside the sources' range are clipped to it (the copula's marginals end there, so
        an outside value would map to an infinite normal score); a descriptor column constant over the
        sources cannot be conditioned on and is ignored (logged when the target differs).
        """
        if not hasattr(self, "model_"):
            raise RuntimeError("ConditionalCopula.sample called before fit")
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        missing = [c for c in self.descriptor_columns_ if c not in descriptor]
        if missing:
            raise ValueError(f"target descriptor lacks {missing}")
        for column in self.descriptor_columns_:
            if column in self.constants_ and not np.isclose(descriptor[column], self.constants_[column]):
                log.info("sources all have %s = %g (target %g): not conditioned on", column,
                         self.constants_[column], descriptor[column])  # fmt: skip
        out = pd.DataFrame(index=range(n))
        if self.model_ is not None:
            conditions = {
                c: float(np.clip(descriptor[c], *self.ranges_[c])) for c in self.conditioned_columns_
            }
            self.model_.set_random_state(np.random.RandomState(seed))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                drawn = self.model_.sample(n, conditions=conditions or None)
            for c in self.modelled_values_:
                low, high = self.ranges_[c]
                # ppf at the tails can overshoot the observed support; keep samples inside it.
                out[c] = np.clip(drawn[c].to_numpy(dtype=float), low, high)
        for c in self.value_columns_:
            if c in self.constants_:
                out[c] = self.constants_[c]
        return out[self.value_columns_]
