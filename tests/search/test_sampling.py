"""The proposal loop and budget estimate shared by the copula samplers, on a scripted target task."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tvm_transfer.search_strategy.copula.sampling import CopulaSampler


class _ScriptedTarget:
    """Candidates are integers keyed by themselves; draws cycle through ``drawn``, odd ones are invalid."""

    def __init__(self, drawn: list[int], anchors: Sequence[int] = (), centre: int = 100) -> None:
        self.drawn, self.anchor_list, self.centre_value = drawn, list(anchors), centre
        self.draw_calls: list[tuple[int, int]] = []

    def draw(self, n: int, seed: int) -> list:
        self.draw_calls.append((n, seed))
        return [(self.drawn[i % len(self.drawn)],) * 2 for i in range(n)]

    def centre(self):
        return self.centre_value, self.centre_value

    def anchors(self) -> list:
        return [(a, a) for a in self.anchor_list]

    def log_density(self, candidates):
        return [-abs(c - 40) for c in candidates]  # nearest to 40 likeliest

    def validate(self, candidate: int):
        return None if candidate % 2 else f"ready {candidate}"


def test_anchors_come_first_then_the_valid_draws_in_order_until_count():
    target = _ScriptedTarget(drawn=[10, 20, 20, 30, 31, 40, 40, 40], anchors=[20, 50, 20])
    proposals = CopulaSampler(0.1, "gaussian_kde", "frequency", draws=8)._propose(target, 4, seed=3)
    assert target.draw_calls == [(64, 3)]  # at least 64 draws
    # anchors (with how often each is anchored) first; then the draws by frequency, the odd one invalid
    assert proposals == [(20, "ready 20", 2), (50, "ready 50", 1), (40, "ready 40", 24), (10, "ready 10", 8)]


@pytest.mark.parametrize(("order", "expected"), [("sample", [10, 20, 30]), ("density", [100, 40, 30])])
def test_orders_and_the_centre(order, expected):
    target = _ScriptedTarget(drawn=[10, 20, 30, 40])
    proposals = CopulaSampler(0.1, "gaussian_kde", order, draws=1)._propose(target, 3, seed=0)
    assert [candidate for candidate, _, _ in proposals] == expected
    if order == "density":
        assert proposals[0][2] == 0  # the centre was never drawn


def test_budget_counts_the_distinct_draws():
    target = _ScriptedTarget(drawn=[1, 2, 3, 3])
    estimate = CopulaSampler(0.1, "gaussian_kde", "sample", draws=8)._budget(target, 50, 40, 7, 0.5)
    assert target.draw_calls == [(40, 7)]
    assert (estimate.space_size, estimate.unique_generated, estimate.success_bar) == (50, 3, 0.5)
    with pytest.raises(ValueError, match="order"):
        CopulaSampler(0.1, "gaussian_kde", "best", draws=8)
