"""The few-shot budget rule of Randall et al. (ICS'23, arXiv 2401.04669, "Transfer-Learning-Based Autotuning
Using Gaussian Copula", https://ar5iv.labs.arxiv.org/html/2401.04669; the rule as implemented by the authors'
GC_TLA ``gaussian_bias_check.py::generate_budget``).

The copula is asked for ``|S|`` conditional samples (``|S|`` = size of the target's search space); ``C`` of
them are unique. Among those, the number of "ideal" configurations is estimated as
``I = max(1, floor(p_ideal * |S|) - floor(p_bad * (|S| - C)))``: a fixed share of the space is ideal, minus a
share of the configurations the model never generates. The budget is the smallest ``k`` for which drawing
``k`` of the ``C`` unique samples without replacement includes at least one ideal one with probability
``>= success_bar``: ``sum_{t=1..k} hypergeom(I, C, t, k) = 1 - C(C - I, k) / C(C, k)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["BudgetEstimate", "estimate_budget", "hypergeometric_pmf", "ideal_count", "success_probability"]


def hypergeometric_pmf(ideal: int, population: int, successes: int, draws: int) -> float:
    """P(exactly ``successes`` ideal items in ``draws`` draws without replacement from ``population`` items of
    which ``ideal`` are ideal) = C(I, t) C(P - I, k - t) / C(P, k)."""
    if not 0 <= ideal <= population or not 0 <= draws <= population:
        raise ValueError(f"need 0 <= ideal ({ideal}) and draws ({draws}) <= population ({population})")
    return (
        math.comb(ideal, successes)
        * math.comb(population - ideal, draws - successes)
        / math.comb(population, draws)
    )


def success_probability(ideal: int, population: int, draws: int) -> float:
    """P(at least one ideal item among ``draws`` draws) = sum over t >= 1 of :func:`hypergeometric_pmf`."""
    return sum(hypergeometric_pmf(ideal, population, t, draws) for t in range(1, min(ideal, draws) + 1))


def ideal_count(
    space_size: int, unique_generated: int, ideal_proportion: float = 0.1, bad_exclude_rate: float = 0.05
) -> int:
    """The paper's estimate of the number of ideal configurations among the ``unique_generated`` ones."""
    if space_size < 1 or not 1 <= unique_generated <= space_size:
        raise ValueError(f"need 1 <= unique_generated ({unique_generated}) <= space_size ({space_size})")
    estimate = math.floor(ideal_proportion * space_size) - math.floor(
        bad_exclude_rate * (space_size - unique_generated)
    )
    # More ideal configurations than generated ones cannot be drawn: cap (the paper's code does not need
    # this for its spaces, MetaSchedule's huge spaces do).
    return min(max(1, estimate), unique_generated)


@dataclass(frozen=True)
class BudgetEstimate:
    """A few-shot budget: ``budget`` evaluations reach ``probability`` >= the success bar."""

    budget: int
    probability: float
    ideal: int
    unique_generated: int
    space_size: int
    success_bar: float


def estimate_budget(
    space_size: int,
    unique_generated: int,
    *,
    success_bar: float = 0.5,
    ideal_proportion: float = 0.1,
    bad_exclude_rate: float = 0.05,
) -> BudgetEstimate:
    """Smallest k with P(at least one ideal configuration in k draws) >= ``success_bar`` (paper defaults:
    bar 0.5, ideal proportion 0.1, bad-exclude rate 0.05)."""
    if not 0.0 < success_bar <= 1.0:
        raise ValueError(f"success_bar must be in (0, 1], got {success_bar}")
    ideal = ideal_count(space_size, unique_generated, ideal_proportion, bad_exclude_rate)
    for k in range(1, unique_generated + 1):
        # 1 - C(C - I, k) / C(C, k): the closed form of the sum, exact in integers.
        p = 1.0 - math.comb(unique_generated - ideal, k) / math.comb(unique_generated, k)
        if p >= success_bar:
            return BudgetEstimate(k, p, ideal, unique_generated, space_size, success_bar)
    raise AssertionError("unreachable: k = C always succeeds")  # pragma: no cover
