"""The hypergeometric budget rule against hand-computed values."""

from __future__ import annotations

import math

import pytest

from tvm_transfer.search_strategy.copula.budget import (
    estimate_budget,
    hypergeometric_pmf,
    ideal_count,
    success_probability,
)


def test_pmf_matches_hand_computed_values_and_sums_to_one():
    # 2 ideal of 10, 3 draws: P(t=1) = C(2,1) C(8,2) / C(10,3) = 2*28/120
    assert hypergeometric_pmf(2, 10, 1, 3) == pytest.approx(56 / 120)
    assert hypergeometric_pmf(2, 10, 2, 3) == pytest.approx(8 / 120)
    assert sum(hypergeometric_pmf(4, 12, t, 5) for t in range(0, 5)) == pytest.approx(1.0)


def test_success_probability_is_one_minus_no_ideal():
    for k in range(1, 9):
        assert success_probability(2, 10, k) == pytest.approx(1 - math.comb(8, k) / math.comb(10, k))


def test_budget_is_smallest_k_reaching_the_bar():
    # |S| = 20, C = 10: I = floor(2) - floor(0.05 * 10) = 2. P(k) = 1 - C(8,k)/C(10,k): 0.2, 0.378, 0.533.
    estimate = estimate_budget(20, 10)
    assert (estimate.ideal, estimate.budget) == (2, 3)
    assert estimate.probability == pytest.approx(1 - 56 / 120)
    # A stricter bar needs more draws: P(5) = 1 - 56/252 = 0.778 < 0.8 <= P(6) = 1 - 28/210 = 0.867
    assert estimate_budget(20, 10, success_bar=0.8).budget == 6


def test_ideal_count_follows_the_paper_and_is_capped():
    # 0.1 * 1000 - 0.05 * (1000 - 400) = 100 - 30 = 70
    assert ideal_count(1000, 400) == 70
    # many bad configurations excluded: floor(10) - floor(0.05 * 990) = 10 - 49 < 1 -> 1
    assert ideal_count(100, 10) == 10 - 4 and ideal_count(100, 2) == 2  # capped at C
    assert ideal_count(10, 10) == 1


def test_more_unique_samples_never_lower_the_ideal_count():
    counts = [ideal_count(576, c) for c in range(1, 577)]
    assert counts == sorted(counts)


@pytest.mark.parametrize("args", [(0, 1), (10, 11), (10, 0)])
def test_bad_sizes_are_rejected(args):
    with pytest.raises(ValueError, match="unique_generated"):
        estimate_budget(*args)


def test_bad_success_bar_is_rejected():
    with pytest.raises(ValueError, match="success_bar"):
        estimate_budget(20, 10, success_bar=1.5)
