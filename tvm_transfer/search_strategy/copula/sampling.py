"""The sampling loop every copula sampler shares: draw, repair, order, validate until enough; the budget.

A sampler (:class:`.sampler.TraceCopulaSampler` for MetaSchedule traces,
:class:`tvm_transfer.vta.copula.VtaCopulaSampler` for vta_ext knobs) fits copulas on the best quantile of
its source records and, for a target task, builds a :class:`TargetDraws`: the one object that knows how
copula rows become candidates of that task (repair or decoding), which candidates the sources suggest
before any draw (anchors), how likely a candidate is, and whether it is valid. :class:`CopulaSampler` runs
the rest, identically for both.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from typing import Any, Protocol

import pandas as pd

from tvm_transfer.search_strategy.copula.budget import BudgetEstimate, estimate_budget
from tvm_transfer.search_strategy.copula.copula import CENTRED_ORDERS, ConditionalCopula, check_order, ranked

__all__ = ["CopulaSampler", "Draw", "TargetDraws"]

#: A candidate of the target task with its key (equal keys = the same candidate after repair).
Draw = tuple[Hashable, Any]


class TargetDraws(Protocol):
    """What a sampler supplies about one target task to :class:`CopulaSampler`'s loop."""

    def draw(self, n: int, seed: int) -> list[Draw]:
        """``n`` conditional copula draws, each repaired into a candidate of the task, in draw order."""

    def centre(self) -> Draw:
        """The repaired conditional centre (:meth:`.copula.ConditionalCopula.centre`)."""

    def anchors(self) -> list[Draw]:
        """Candidates to propose before any draw, in order (may repeat; none when the sampler has none)."""

    def log_density(self, candidates: Sequence[Any]) -> Sequence[float]:
        """Conditional copula log density of each candidate (higher = likelier)."""

    def validate(self, candidate: Any) -> Any | None:
        """The candidate made ready to measure (e.g. its schedule), or ``None`` when it is invalid."""


class CopulaSampler:
    """Hyper-parameters and the proposal loop shared by the copula samplers.

    Parameters
    ----------
    quantile:
        Share of each source task's measured records kept (best first) to fit the copula on, in (0, 1].
    distribution:
        Marginal distribution of the copula columns (see :data:`.copula.DISTRIBUTIONS`).
    order:
        One of :data:`.copula.ORDERS`: ``"density"``: the repaired conditional centre first, then the
        distinct draws by conditional copula density; ``"centre"``: the centre first, then by frequency;
        ``"frequency"``: the repaired candidates the copula generates most often first (its modes, ties in
        draw order); ``"sample"``: first generated first (the paper's order).
    draws:
        Copula rows drawn per proposal call, as a multiple of the number of candidates asked for (at
        least 64 in all).
    """

    def __init__(self, quantile: float, distribution: str, order: str, draws: int) -> None:
        check_order(order)
        self.quantile, self.distribution, self.order, self.draws = quantile, distribution, order, draws

    def _fit_copula(
        self,
        frame: pd.DataFrame,
        descriptor_columns: Sequence[str],
        value_columns: Sequence[str],
        max_r2: float = 1.0,
    ) -> ConditionalCopula:
        """A copula with this sampler's quantile and marginals fitted on ``frame`` (see
        :meth:`.copula.ConditionalCopula.fit`); raises ``ValueError`` when it cannot be fitted."""
        copula = ConditionalCopula(self.quantile, self.distribution, max_r2)
        return copula.fit(frame, descriptor_columns, value_columns)

    def _propose(self, target: TargetDraws, count: int, seed: int) -> list[tuple[Any, Any, int]]:
        """Up to ``count`` distinct valid candidates, best guess first, as (candidate, validated, times
        drawn): the anchors, then the distinct draws in :attr:`order`."""
        drawn = target.draw(max(count * self.draws, 64), seed)
        anchors = target.anchors()
        candidates: dict[Hashable, Any] = {}
        for key, candidate in anchors + drawn:
            candidates.setdefault(key, candidate)
        centre = None
        if self.order in CENTRED_ORDERS:
            centre, candidate = target.centre()
            candidates.setdefault(centre, candidate)

        def density(keys: Sequence[Hashable]) -> Sequence[float]:
            return target.log_density([candidates[key] for key in keys])

        anchor_counts = Counter(key for key, _ in anchors)  # insertion-ordered: anchor order
        in_order = ranked((key for key, _ in drawn), self.order, centre, density)
        sequence = list(anchor_counts.items()) + [(key, n) for key, n in in_order if key not in anchor_counts]
        proposals: list[tuple[Any, Any, int]] = []
        for key, times in sequence:
            if len(proposals) >= count:
                break
            validated = target.validate(candidates[key])
            if validated is not None:
                proposals.append((candidates[key], validated, times))
        return proposals

    def _budget(
        self, target: TargetDraws, space_size: int, n_draws: int, seed: int, success_bar: float
    ) -> BudgetEstimate:
        """The paper's budget rule: ``C`` = distinct candidates among ``n_draws`` draws of a space of
        ``space_size`` candidates (:func:`.budget.estimate_budget`)."""
        unique = {key for key, _ in target.draw(n_draws, seed)}
        return estimate_budget(space_size, len(unique), success_bar=success_bar)
