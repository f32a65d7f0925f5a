import json
import math

import numpy as np
import pytest
from ms_helpers import sample_candidates, tune_context

from tenset_tools.features.trace import _SLOT_OFFSET, INSTRUCTION_KINDS, NUM_SLOTS
from tvm_transfer.features import (
    POOLED_WIDTH,
    TRACE_ROW_WIDTH,
    KernelFeatureExtractor,
    candidate_trace_json,
    encode_trace,
    encode_traces,
    pool_per_store,
)
from tvm_transfer.workloads import make_workload


@pytest.fixture(scope="module")
def conv_candidates(target):
    context = tune_context(make_workload("conv2d", (1, 14, 14, 32, 32, 3, 1, 1)), target)
    return context, sample_candidates(context, 6)


def test_pooling_is_sum_and_max_of_stores():
    rows = np.array([[1.0, 5.0], [3.0, 2.0]], dtype=np.float32)
    pooled = pool_per_store([rows, np.zeros((0, 2), np.float32)], width=2)
    np.testing.assert_array_equal(pooled, [[4.0, 7.0, 3.0, 5.0], [0.0, 0.0, 0.0, 0.0]])


def test_kernel_features_of_real_candidates(conv_candidates):
    context, candidates = conv_candidates
    extractor = KernelFeatureExtractor()
    per_store = extractor.per_store(context, candidates)
    assert all(m.ndim == 2 and m.shape[1] == 164 and m.shape[0] >= 1 for m in per_store)
    pooled = extractor.pooled(context, candidates)
    assert pooled.shape == (len(candidates), POOLED_WIDTH)
    # different schedules of one conv differ in their features
    assert len({row.tobytes() for row in pooled}) > 1


def test_trace_encoding_rows(conv_candidates):
    _, candidates = conv_candidates
    trace_json = candidate_trace_json(candidates[0])
    rows = encode_trace(trace_json)
    assert rows.shape == (len(trace_json[0]), TRACE_ROW_WIDTH)
    kinds = rows[:, : len(INSTRUCTION_KINDS) + 1]
    np.testing.assert_array_equal(kinds.sum(axis=1), 1.0)  # exactly one kind per instruction
    # the first SamplePerfectTile row carries its decided tile factors, log-squashed
    index = next(i for i, inst in enumerate(trace_json[0]) if inst[0] == "SamplePerfectTile")
    decision = dict((int(i), d) for i, d in trace_json[1])[index]
    expected = [math.log2(1 + int(f)) for f in decision]
    np.testing.assert_allclose(rows[index, _SLOT_OFFSET : _SLOT_OFFSET + len(expected)], expected, rtol=1e-6)
    assert rows[:, _SLOT_OFFSET:].shape[1] == NUM_SLOTS


def test_trace_encoding_is_the_same_from_the_database_json(conv_candidates):
    _, candidates = conv_candidates
    trace_json = candidate_trace_json(candidates[1])
    # what JSONDatabase writes: plain JSON, TVM integers as numbers
    on_disk = json.loads(json.dumps(trace_json, default=lambda o: o.value))
    np.testing.assert_array_equal(encode_trace(on_disk), encode_trace(trace_json))


def test_batch_encoding_pads_and_truncates(conv_candidates):
    _, candidates = conv_candidates
    traces = [candidate_trace_json(c) for c in candidates]
    sequences, lengths = encode_traces(traces)
    assert sequences.shape == (len(traces), max(lengths), TRACE_ROW_WIDTH)
    assert (sequences[0, lengths[0] :] == 0).all()
    short, short_lengths = encode_traces(traces, max_len=5)
    assert short.shape[1] == 5 and (short_lengths == 5).all()
    np.testing.assert_array_equal(short[0], sequences[0, :5])
