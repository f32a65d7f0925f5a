"""Encoding, repair and replay on a real MetaSchedule design space (matmul and conv2d)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import tvm
import tvm_ffi
from ms_helpers import sample_candidates, tune_context
from tvm import te, topi
from tvm.s_tir import meta_schedule as ms

from tenset_tools.metaschedule import RECORD_FILE
from tvm_transfer.search_strategy.base import measure_candidate
from tvm_transfer.search_strategy.copula.encoding import (
    SpaceEncoding,
    decision_vector,
    json_decisions,
    json_signature,
    trace_decisions,
    trace_signature,
)
from tvm_transfer.workloads import make_workload


def _spaces(kind, shape, target):
    return _module_spaces(make_workload(kind, shape).ir_module(), target)


def _module_spaces(mod, target):
    ctx = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply",
                         search_strategy="evolutionary", task_name="t", num_threads=2)  # fmt: skip
    spaces = ctx.generate_design_space()
    return mod, [SpaceEncoding(mod, s, ctx.space_generator.postprocs) for s in spaces], spaces


@pytest.fixture(scope="module")
def matmul_spaces(target):
    return _spaces("matmul", (64, 96, 128), target)


def test_sites_and_columns_of_a_matmul_space(matmul_spaces):
    _, encodings, _ = matmul_spaces
    encoding = encodings[0]
    kinds = [s.kind for s in encoding.sites]
    assert kinds == ["SamplePerfectTile"] * 3 + ["SampleCategorical"]
    assert [s.extent for s in encoding.sites[:3]] == [64, 96, 128]  # M, N, K loops
    assert encoding.columns[:3] == ["s0_tile1", "s0_tile2", "s0_tile3"]
    assert len(encoding.columns) == 3 + 3 + 1 + 1


def test_decode_of_encode_replays_to_the_same_schedule(matmul_spaces):
    _, encodings, spaces = matmul_spaces
    for encoding, space in zip(encodings, spaces, strict=True):
        decisions = encoding.decisions_of(space.trace)
        repaired = encoding.repair(encoding.encode(decisions))
        assert repaired == decisions
        original, again = encoding.replay(decisions), encoding.replay(repaired)
        assert original is not None
        assert tvm_ffi.structural_equal(original.mod, again.mod)
        # the post-processed schedule's trace still carries the same decisions
        assert trace_decisions(again.trace) == decisions


def test_repair_makes_tile_products_match_extents(matmul_spaces):
    _, encodings, _ = matmul_spaces
    encoding = encodings[0]
    rng = np.random.default_rng(0)
    for _ in range(30):
        decisions = encoding.repair(rng.normal(2.0, 3.0, len(encoding.columns)))
        for site, decision in zip(encoding.sites, decisions, strict=True):
            if site.kind == "SamplePerfectTile":
                assert math.prod(decision) == site.extent
                assert decision[-1] <= site.max_innermost
            else:
                assert 0 <= decision < len(site.candidates)
        assert encoding.replay(decisions) is not None


def test_repair_snaps_to_nearest_divisor_and_category(matmul_spaces):
    _, encodings, _ = matmul_spaces
    encoding = encodings[0]
    # M = 64: ask for inner factors 2^1.1, 2^2.9, 2^0.2 -> 2, 8, 1 and the rest outermost (4)
    vector = np.array([1.1, 2.9, 0.2, 0, 0, 0, 0, 9.0])
    decisions = encoding.repair(vector)
    assert decisions[0] == [4, 2, 8, 1]
    assert decisions[3] == len(encoding.sites[3].candidates) - 1  # out-of-range category clipped
    # N = 96: innermost 2^2.58 -> 6, then 32 does not divide the remaining 16 -> 16, then nothing is left
    assert encoding.repair(np.array([0, 0, 0, 5.0, 5.0, 2.58, 0, 1]))[1] == [1, 1, 16, 6]


def test_replay_rejects_decisions_tvm_would_silently_repair(matmul_spaces):
    _, encodings, spaces = matmul_spaces
    encoding = encodings[0]
    decisions = encoding.decisions_of(spaces[0].trace)
    bad = [list(d) if isinstance(d, list) else d for d in decisions]
    bad[0] = [3, 5, 7, 1]  # product 105 != 64: replay would quietly turn it into something else
    assert encoding.replay(bad) is None
    with pytest.raises(ValueError, match="expected"):
        encoding.repair(np.zeros(3))


def test_conv2d_space_has_compute_location_and_round_trips(target):
    _, encodings, spaces = _spaces("conv2d", (1, 14, 14, 32, 32, 3, 1, 1), target)
    encoding = encodings[0]
    assert encoding.sites[-1].kind == "SampleComputeLocation"
    decisions = encoding.decisions_of(spaces[0].trace)
    assert encoding.repair(decision_vector(decisions)) == decisions
    assert encoding.replay(decisions) is not None


def test_a_database_line_reads_as_the_trace_it_stores(tmp_path, target):
    """Read from a database line without replaying, a trace has the decisions and design-space signature
    of the trace committed (so a pack's records seed the task's own design spaces): a program sampled by
    MetaSchedule (stored without dead instructions) and one a copula seed makes of a design space (with
    them); conv2d traces carry boolean and floating-point attributes, written to the file as numbers."""
    workload = make_workload("conv2d", (1, 14, 14, 64, 64, 3, 1, 1))
    context = tune_context(workload, target)
    encodings = [SpaceEncoding(context.mod, s, context.space_generator.postprocs)
                 for s in context.generate_design_space()]  # fmt: skip
    seeds = [e.replay(e.decisions_of(e.trace)) for e in encodings]
    schedules = [c.sch for c in sample_candidates(context, 6)] + [s for s in seeds if s is not None]
    database = ms.database.JSONDatabase(work_dir=str(tmp_path))
    entry = database.commit_workload(workload.ir_module())
    for schedule in schedules:
        database.commit_tuning_record(
            ms.database.TuningRecord(
                schedule.trace, entry, [1e-4], target, measure_candidate(schedule).args_info
            )
        )
    lines = (tmp_path / RECORD_FILE).read_text().splitlines()
    assert len(lines) == len(schedules) > 6
    for line, schedule in zip(lines, schedules, strict=True):
        trace_json = json.loads(line)[1][0]
        assert json_decisions(trace_json) == trace_decisions(schedule.trace)
        assert json_signature(trace_json) == trace_signature(schedule.trace)
        assert json_signature(trace_json) in {e.signature for e in encodings}


def _fused_conv(activation: str, depthwise: bool = False) -> tvm.IRModule:
    """A 3x3 convolution (NCHW, 32 input channels; 64 output channels, or 32 when depthwise) with a
    per-channel shift and an activation, as a network's fused operator."""
    data = te.placeholder((1, 32, 14, 14), name="data")
    if depthwise:
        weight = te.placeholder((32, 1, 3, 3), name="weight")
        conv = topi.nn.group_conv2d_nchw(data, weight, 1, 1, 1, 32)
    else:
        weight = te.placeholder((64, 32, 3, 3), name="weight")
        conv = topi.nn.conv2d_nchw(data, weight, 1, 1, 1)
    shift = te.placeholder((1, conv.shape[1], 1, 1), name="shift")
    y = topi.add(conv, shift)
    out = {"relu": lambda: topi.nn.relu(y), "silu": lambda: topi.multiply(y, topi.sigmoid(y))}[activation]()
    return tvm.IRModule({"main": te.create_prim_func([data, weight, shift, out])})


def test_a_convolution_seeds_one_with_another_activation(target):
    """The epilogue a convolution is fused with (ReLU or SiLU) does not change its design spaces'
    signatures, so one's records seed the other: a ReLU schedule's decisions encode to the SiLU space's
    columns and replay on the SiLU task. A depthwise convolution's spaces stay apart (its main block's
    name, which signatures keep, differs)."""
    _, relu, _ = _module_spaces(_fused_conv("relu"), target)
    _, silu, _ = _module_spaces(_fused_conv("silu"), target)
    _, depthwise, _ = _module_spaces(_fused_conv("silu", depthwise=True), target)
    assert [e.signature for e in silu] == [e.signature for e in relu]
    assert not {e.signature for e in depthwise} & {e.signature for e in relu}
    for source, seeded in zip(relu, silu, strict=True):
        assert seeded.columns == source.columns
        decisions = source.decisions_of(source.trace)
        assert seeded.repair(source.encode(decisions)) == decisions
        assert seeded.replay(decisions) is not None


def test_every_design_space_has_its_own_signature(target):
    """A convolution's write-cache spaces fuse the consumer at tile level 1 or 2 with the same instructions,
    differing only in the loop ``ReverseComputeAt`` takes: the signature's dataflow tells them apart, so
    each space is seeded by the records sampled from it."""
    for depthwise in (False, True):
        _, encodings, _ = _module_spaces(_fused_conv("relu", depthwise), target)
        assert len(encodings) == 3
        assert len({e.signature for e in encodings}) == 3


def _mean(variable: str) -> tvm.IRModule:
    """A row mean whose blocks are named after its variable, as Relax names a fused reduction."""
    data = te.placeholder((8, 64), name="data")
    k = te.reduce_axis((0, 64), name="k")
    total = te.compute((8,), lambda i: te.sum(data[i, k], axis=k), name=f"{variable}_red")
    mean = te.compute((8,), lambda i: total[i] / 64.0, name=variable)
    return tvm.IRModule({"main": te.create_prim_func([data, mean])})


def test_blocks_numbered_otherwise_share_their_signatures(target):
    """The same computation in two networks, its blocks numbered after other variables (``lv239_red``,
    ``lv12_red``), has the same signatures, so one's records seed the other."""
    _, ours, _ = _module_spaces(_mean("lv239"), target)
    _, theirs, _ = _module_spaces(_mean("lv12"), target)
    assert str(ours[0].trace) != str(theirs[0].trace)  # the traces look their blocks up by name
    assert [e.signature for e in ours] == [e.signature for e in theirs]
