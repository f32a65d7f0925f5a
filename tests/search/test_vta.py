"""Copula few-shot tuning of vta_ext knob spaces (real vta_ext measurements)."""

from __future__ import annotations

import numpy as np
import pytest

from tenset_tools.metrics import best_latency_ratio
from tvm_transfer.vta.copula import (
    KnobEncoding,
    VtaCopulaSampler,
    copula_few_shot,
    measure_records,
    vta_descriptor,
)
from tvm_transfer.vta.sweep import candidates
from vta_ext.hw import HwConfig
from vta_ext.knobs import KnobSpace
from vta_ext.workloads import RESNET18

HW = HwConfig()


def test_knob_encoding_round_trips_and_snaps():
    space = KnobSpace(RESNET18["C11"], HW)
    encoding = KnobEncoding(space)
    for index in range(0, len(space), 7):
        knobs = space.point(index)
        assert encoding.decode(encoding.encode(knobs)) == knobs
    snapped = encoding.decode(np.array([0, 2.4, 9.0, 1.2, 30.0, 0.4, np.nan]))
    assert snapped["tile_h"] in space.options["tile_h"] and snapped["tile_w"] == max(space.options["tile_w"])
    assert snapped["tile_co"] == max(space.options["tile_co"]) and snapped["h_nthread"] == 1
    with pytest.raises(ValueError, match="expected 7"):
        encoding.decode([1.0])


@pytest.fixture(scope="module")
def sources():
    records = []
    for name in ("C8", "C9", "C10"):
        workload = RESNET18[name]
        records += measure_records(workload, HW, candidates(KnobSpace(workload, HW), "random", 48, 0))
    return records


def test_copula_few_shot_beats_random_on_a_held_out_layer(sources):
    target = RESNET18["C11"]
    sampler = VtaCopulaSampler().fit(sources)
    copula = copula_few_shot(target, HW, sampler, budget=8)
    assert len({tuple(k.values()) for k in copula.knobs}) == 8
    randoms = [
        [r.latency for r in measure_records(target, HW, candidates(KnobSpace(target, HW), "random", 8, seed))]
        for seed in range(1, 6)
    ]
    everything = np.array(copula.latencies + [x for r in randoms for x in r], dtype=float)
    best = np.nanmin(everything)
    first = 1 / best_latency_ratio(copula.latencies, 1, best)
    random_first = np.mean([1 / best_latency_ratio(r, 1, best) for r in randoms])
    assert first > random_first + 0.2
    best8 = 1 / best_latency_ratio(copula.latencies, 8, best)
    random_best8 = np.mean([1 / best_latency_ratio(r, 8, best) for r in randoms])
    assert best8 > random_best8


def test_budget_and_orders(sources):
    target = RESNET18["C11"]
    estimate = VtaCopulaSampler().fit(sources).budget(target, HW)
    assert estimate.space_size == len(KnobSpace(target, HW))
    assert 1 <= estimate.budget <= estimate.unique_generated <= estimate.space_size
    in_order = VtaCopulaSampler(order="sample").fit(sources).propose(target, HW, 5)
    assert len(in_order) == 5
    # the centred orders measure the decoded conditional centre first
    encoding = KnobEncoding(KnobSpace(target, HW))
    for order in ("centre", "density"):
        sampler = VtaCopulaSampler(order=order, validate=False).fit(sources)
        centre = encoding.decode(sampler.copula_.centre(vta_descriptor(target, HW)).to_numpy()[0])
        proposals = sampler.propose(target, HW, 4)
        assert proposals[0] == centre and centre not in proposals[1:] and len(proposals) == 4
    with pytest.raises(ValueError, match="order"):
        VtaCopulaSampler(order="best")
