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
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

log = logging.getLogger(__name__)

__all__ = [
    "DISTRIBUTIONS",
    "ORDERS",
    "ConditionalCopula",
    "best_quantile",
    "check_order",
    "ranked",
    "source_row",
]

#: Orders of proposals (the one place that defines them):
#:
#: * ``"frequency"``: the distinct repaired draws, most often drawn first (the copula's modes after repair);
#: * ``"sample"``: first drawn first (the paper's order);
#: * ``"centre"``: the repaired *conditional centre* first (:meth:`ConditionalCopula.centre`: every value
#:   column at its conditional median), then the draws in frequency order;
#: * ``"density"``: the conditional centre first, then the distinct draws by decreasing conditional copula
#:   density of their repaired values (:meth:`ConditionalCopula.log_density`).
ORDERS = ("frequency", "sample", "centre", "density")
#: Orders whose first proposal is the conditional centre (callers must pass ``centre`` to :func:`ranked`).
CENTRED_ORDERS = ("centre", "density")


def check_order(order: str) -> None:
    """Raise ``ValueError`` unless ``order`` is one of :data:`ORDERS`."""
    if order not in ORDERS:
        raise ValueError(f"unknown order {order!r}; choose one of {', '.join(ORDERS)}")


def ranked(
    keys: Iterable[Hashable],
    order: str,
    centre: Hashable | None = None,
    density: Callable[[Sequence[Hashable]], Sequence[float]] | None = None,
) -> list[tuple[Hashable, int]]:
    """The distinct ``keys`` of a run of draws with how often each was drawn, in proposal ``order``.

    ``"frequency"``: most drawn first (ties keep the first-drawn order); ``"sample"``: first drawn first;
    ``"centre"``: ``centre`` (the repaired conditional centre) first, then by frequency; ``"density"``:
    ``centre`` first, then by decreasing ``density(keys)`` (one score per distinct key, higher = likelier;
    ties by frequency, then first drawn). The centre counts 0 draws unless it was also drawn.
    """
    check_order(order)
    counts = Counter(keys)  # insertion-ordered: first drawn first
    unique = list(counts)
    if order in CENTRED_ORDERS and centre is None:
        raise ValueError(f"order {order!r} needs the conditional centre's key")
    if order == "density":
        if density is None:
            raise ValueError("order 'density' needs a density function")
        scores = dict(zip(unique, density(unique), strict=True)) if unique else {}
        unique.sort(key=lambda key: (-scores[key], -counts[key]))
    elif order != "sample":
        unique.sort(key=lambda key: -counts[key])
    if order in CENTRED_ORDERS:
        unique = [centre, *(key for key in unique if key != centre)]
    return [(key, counts.get(key, 0)) for key in unique]


#: Marginal distributions by name -> ``copulas.univariate`` class path. The paper uses truncated Gaussians.
DISTRIBUTIONS = {
    "truncated_gaussian": "copulas.univariate.TruncatedGaussian",
    "gaussian_kde": "copulas.univariate.GaussianKDE",
    "beta": "copulas.univariate.BetaUnivariate",
    "auto": "copulas.univariate.Univariate",
}


def source_row(
    values: Mapping[str, float], descriptor: Mapping[str, float], cost: float, task: str
) -> dict[str, float | str]:
    """One row of the source frame :meth:`ConditionalCopula.fit` takes: a measured configuration's encoded
    ``values``, its task's ``descriptor``, its ``cost`` (seconds; non-finite = failed) and its ``task``."""
    return {**values, **descriptor, "cost": cost, "task": task}


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


def _r2(x: np.ndarray, y: np.ndarray) -> float:
    """Share of ``y``'s variance explained by a least-squares fit on ``x`` plus an intercept (1 if ``y`` is
    constant)."""
    total = float(np.sum((y - y.mean()) ** 2))
    if total <= 0.0:
        return 1.0
    design = np.column_stack([x, np.ones(len(y))])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    return 1.0 - float(np.sum((y - design @ coef) ** 2)) / total


class ConditionalCopula:
    """Gaussian copula fitted on the best configurations of source tasks; sampled given a task descriptor.

    Parameters
    ----------
    quantile:
        Share of each source task's measured configurations kept (best first), in (0, 1].
    distribution:
        Marginal of every column, a key of :data:`DISTRIBUTIONS`.
    max_r2:
        A descriptor column is conditioned on only if, over the source tasks (one row per task), a linear
        fit on the descriptor columns kept before it explains less than this share of its variance (R^2).
        1.0 (default) drops only exact duplicates and constants; lower values also drop near-collinear
        descriptors (e.g. output height given input height and stride), which with few source tasks make
        the conditioning correlation matrix nearly singular and the conditional distribution unstable.
    """

    def __init__(
        self, quantile: float = 0.3, distribution: str = "truncated_gaussian", max_r2: float = 1.0
    ) -> None:
        if distribution not in DISTRIBUTIONS:
            raise ValueError(
                f"unknown distribution {distribution!r}; choose one of {', '.join(DISTRIBUTIONS)}"
            )
        if not 0.0 < max_r2 <= 1.0:
            raise ValueError(f"max_r2 must be in (0, 1], got {max_r2}")
        self.quantile = quantile
        self.distribution = distribution
        self.max_r2 = max_r2

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
        self.kept_rows_ = rows.reset_index(drop=True)
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
            if self.max_r2 < 1.0 and modelled_descriptors:
                tasks = rows.groupby(group, sort=False)[[*modelled_descriptors, column]].first().astype(float)
                if _r2(tasks[modelled_descriptors].to_numpy(), tasks[column].to_numpy()) >= self.max_r2:
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
        """``n`` rows of the value columns drawn from the copula conditioned on ``descriptor``: normal scores
        from the conditional Gaussian, mapped back through the fitted marginals.

        Descriptor values outside the sources' range are clipped to it (the copula's marginals end there, so
        an outside value would map to an infinite normal score); a descriptor column constant over the
        sources cannot be conditioned on and is ignored (logged when the target differs).
        """
        self._check_descriptor(descriptor)
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        for column in self.descriptor_columns_:
            if column in self.constants_ and not np.isclose(descriptor[column], self.constants_[column]):
                log.info("sources all have %s = %g (target %g): not conditioned on", column,
                         self.constants_[column], descriptor[column])  # fmt: skip
        scores = None
        if self.model_ is not None:
            mean, covariance = self._conditional_normal(descriptor)
            rng = np.random.default_rng(seed)
            scores = rng.multivariate_normal(mean, covariance, size=n, method="eigh", check_valid="ignore")
        return self._values_of_scores(scores, n)

    # --- the conditional distribution in normal-score space -------------------------------------------
    def _check_descriptor(self, descriptor: Mapping[str, float]) -> None:
        if not hasattr(self, "model_"):
            raise RuntimeError("ConditionalCopula used before fit")
        missing = [c for c in self.descriptor_columns_ if c not in descriptor]
        if missing:
            raise ValueError(f"target descriptor lacks {missing}")

    def _conditions(self, descriptor: Mapping[str, float]) -> dict[str, float]:
        return {c: float(np.clip(descriptor[c], *self.ranges_[c])) for c in self.conditioned_columns_}

    def _conditional_normal(self, descriptor: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray]:
        """Mean and covariance of the modelled value columns' normal scores given ``descriptor`` (the
        Schur complement of the copula's correlation matrix, the distribution :meth:`sample` draws from)."""
        model = self.model_
        correlation = model.correlation.loc[self.modelled_values_, self.modelled_values_].to_numpy()
        if not self.conditioned_columns_:
            return np.zeros(len(self.modelled_values_)), correlation
        conditions = self._conditions(descriptor)
        given = list(conditions)
        from copulas.utils import EPSILON

        # The conditions' scores as copulas computes them when it samples.
        scores = self._normal_scores(pd.DataFrame([conditions]), given, EPSILON)[0]
        s12 = model.correlation.loc[self.modelled_values_, given].to_numpy()
        s22 = model.correlation.loc[given, given].to_numpy()
        gain = s12 @ np.linalg.pinv(s22)
        return gain @ scores, correlation - gain @ s12.T

    def _marginals(self) -> dict:
        """The fitted copula's marginal distribution of each modelled column, by column name."""
        return dict(zip(self.model_.columns, self.model_.univariates, strict=True))

    def _values_of_scores(self, scores: np.ndarray | None, rows: int) -> pd.DataFrame:
        """``rows`` rows of the value columns: the modelled ones the values of normal ``scores`` (rows x
        modelled value columns; ``None`` when no column is modelled) through the fitted marginals, the
        constant ones their constant.

        Each quantile is kept within the marginal's cdf over the sources' range: values stay in that
        range, and a kernel density's inverse cdf, a root search bracketed a few bandwidths beyond it, is
        never asked for a quantile outside its bracket."""
        from scipy import stats

        out = pd.DataFrame(index=range(rows))
        if scores is not None:
            univariates = self._marginals()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for c, column_scores in zip(self.modelled_values_, scores.T, strict=True):
                    low, high = self.ranges_[c]
                    u_low, u_high = univariates[c].cdf(np.array([low, high]))
                    quantiles = np.clip(stats.norm.cdf(column_scores), u_low, u_high)
                    values = np.asarray(univariates[c].percent_point(quantiles), dtype=float)
                    out[c] = np.clip(values, low, high)
        for c in self.value_columns_:
            if c in self.constants_:
                out[c] = self.constants_[c]
        return out[self.value_columns_]

    def _normal_scores(self, frame: pd.DataFrame, columns: Sequence[str], eps: float) -> np.ndarray:
        """Normal scores (rows x ``columns``) of ``frame`` through the fitted marginals, each cdf clipped to
        [eps, 1 - eps] before the standard normal's ppf."""
        from scipy import stats

        univariates = self._marginals()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return np.column_stack(
                [
                    stats.norm.ppf(np.clip(univariates[c].cdf(frame[c].to_numpy(dtype=float)), eps, 1 - eps))
                    for c in columns
                ]
            )

    def centre(self, descriptor: Mapping[str, float]) -> pd.DataFrame:
        """The conditional centre: one row of the value columns, each at its conditional median given
        ``descriptor`` (the conditional mean of the normal scores mapped back through the marginals).

        It is the most central configuration of the conditional distribution, a deterministic best guess;
        :meth:`sample` draws around it. Constant columns keep their value.
        """
        self._check_descriptor(descriptor)
        scores = None if self.model_ is None else self._conditional_normal(descriptor)[0][np.newaxis, :]
        return self._values_of_scores(scores, 1)

    def log_density(self, descriptor: Mapping[str, float], values: pd.DataFrame) -> np.ndarray:
        """Log density of ``values`` (rows of the value columns) under the conditional Gaussian of their
        normal scores given ``descriptor``, up to a constant: ``-0.5 * Mahalanobis distance**2`` to the
        conditional mean. Higher = more typical of the best source configurations of similar tasks.

        The marginals' Jacobian is left out on purpose: values are repaired, discrete configurations, where
        a marginal density (e.g. a KDE's spike at one tile factor) says little; the ranking is by how central
        the configuration is in the copula's dependence structure.
        """
        self._check_descriptor(descriptor)
        missing = [c for c in self.value_columns_ if c not in values]
        if missing:
            raise ValueError(f"values lack columns {missing}")
        if self.model_ is None or len(values) == 0:
            return np.zeros(len(values))
        mean, covariance = self._conditional_normal(descriptor)
        # A looser clip than copulas' own: repaired values at the sources' range ends keep finite scores.
        scores = self._normal_scores(values, self.modelled_values_, 1e-6)
        residual = scores - mean
        precision = np.linalg.pinv(covariance)
        return -0.5 * np.einsum("ij,jk,ik->i", residual, precision, residual)
