"""The one tile repair rule shared by the copula search and schedule transfer."""

import numpy as np

from tvm_transfer.search_strategy.replay import nearest_log2, repair_tile, repair_tile_log2


def test_repair_tile_always_tiles_the_new_extent():
    assert repair_tile([1, 8, 4, 4], 128) == [1, 8, 4, 4]
    for decision, extent in [([1, 8, 4, 4], 64), ([2, 3, 5, 16], 384), ([1, 64, 2, 1], 10), ([7, 1], 13)]:
        repaired = repair_tile(decision, extent)
        assert int(np.prod(repaired)) == extent
        assert all(a <= max(d, extent) for a, d in zip(repaired[1:], decision[1:], strict=True))


def test_repair_keeps_dividing_factors_and_takes_the_nearest_divisor_in_log2():
    # 4 and 2 divide what is left of 10 and 5; 64 is nearest to 5 of the divisors {1, 5} of the rest
    assert repair_tile([1, 64, 2, 1], 10) == [1, 5, 2, 1]
    # the innermost factor is capped: 32 does not fit under 16, 16 is the nearest allowed divisor of 64
    assert repair_tile([1, 2, 32], 64, max_innermost=16) == [2, 2, 16]
    # integer and log2 forms are one rule
    assert repair_tile([1, 8, 6], 96) == repair_tile_log2([3.0, np.log2(6)], 96) == [2, 8, 6]


def test_nearest_log2_snaps_to_an_option_ties_to_the_smaller():
    assert nearest_log2([1, 2, 4, 8], 2.4) == 4 and nearest_log2([1, 2, 4, 8], 30.0) == 8
    assert nearest_log2([1, 7, 14], -3.0) == 1 and nearest_log2([1, 7, 14], 3.1) == 7
    assert nearest_log2([2, 8], 2.0) == 2  # log2 4 is as far from 2 as from 8
