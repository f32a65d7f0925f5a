"""Trace-sequence encoding of MetaSchedule candidates: one row per schedule instruction.

The modern analogue of TLP's schedule-step features. It reads a trace in MetaSchedule's JSON form
(``Trace.as_json()``, also the ``trace`` field of every ``database_tuning_record.json`` line), so candidates
in memory and records on disk are encoded by the same code without replaying anything.

A row is ``[instruction kind one-hot | annotation key one-hot | numeric slots]``. The numeric slots hold,
in order, the instruction's decision (tile factors; for ``SampleCategorical`` the chosen index and the
chosen value), its integer constant inputs and its integer attributes, each as ``sign(x) * log2(1 + |x|)``
so that tile sizes from 1 to 4096 share one scale. Values beyond ``NUM_SLOTS`` are dropped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

INSTRUCTION_KINDS: tuple[str, ...] = (
    "GetSBlock", "GetLoops", "GetChildBlocks", "GetProducers", "GetConsumers", "GetOutputBlocks",
    "Split", "Fuse", "Reorder", "Parallel", "Vectorize", "Unroll", "Bind", "AddUnitLoop",
    "CacheRead", "CacheWrite", "ReIndex", "ComputeAt", "ReverseComputeAt", "ComputeInline",
    "ReverseComputeInline", "DecomposeReduction", "DecomposePadding", "RFactor", "StorageAlign", "SetScope",
    "Blockize", "Tensorize", "PadEinsum", "TransformLayout", "TransformBlockLayout",
    "Annotate", "Unannotate", "SamplePerfectTile", "SamplePartitionedTile", "SampleCategorical",
    "SampleComputeLocation", "EnterPostproc",
)  # fmt: skip
ANNOTATION_KEYS: tuple[str, ...] = (
    "meta_schedule.tiling_structure", "meta_schedule.parallel", "meta_schedule.vectorize",
    "meta_schedule.unroll_explicit", "meta_schedule.unroll_implicit", "meta_schedule.cooperative_fetch",
    "meta_schedule.auto_tensorize", "meta_schedule.random_compute_producer",
    "meta_schedule.thread_extent_low_inclusive", "meta_schedule.thread_extent_high_inclusive",
    "pragma_auto_unroll_max_step", "pragma_unroll_explicit", "software_pipeline_stage",
    "software_pipeline_order",
)  # fmt: skip
NUM_SLOTS = 8

_KIND_INDEX = {name: i for i, name in enumerate(INSTRUCTION_KINDS)}
_KEY_INDEX = {name: i for i, name in enumerate(ANNOTATION_KEYS)}
_KEY_OFFSET = len(INSTRUCTION_KINDS) + 1  # +1: the "other kind" column
_SLOT_OFFSET = _KEY_OFFSET + len(ANNOTATION_KEYS) + 1  # +1: the "other key" column
#: Width of one encoded instruction row.
TRACE_ROW_WIDTH = _SLOT_OFFSET + NUM_SLOTS


def int_values(items: Sequence[Any]) -> list[int]:
    """The integers among trace items (Python ints and bools, TVM ``IntImm``), in order; other items are
    skipped."""
    # Trace JSON mixes Python ints/bools with TVM IntImm/FloatImm and variable names ("l3", "v55").
    values = []
    for item in items:
        if isinstance(item, bool | int):
            values.append(int(item))
        elif type(item).__name__ == "IntImm":
            values.append(int(item.value))
    return values


def _decision_values(kind: str, attrs: Sequence[Any], decision: Any) -> list[int]:
    if decision is None:
        return []
    if kind == "SampleCategorical":
        index = int(decision)
        candidates = int_values(attrs[0]) if attrs else []
        return [index, candidates[index]] if 0 <= index < len(candidates) else [index]
    if isinstance(decision, list | tuple) or type(decision).__name__ == "Array":
        return int_values(decision)
    return int_values([decision])


def _squash(values: list[int]) -> np.ndarray:
    return np.array([math.copysign(math.log2(1 + abs(v)), v) for v in values[:NUM_SLOTS]], dtype=np.float32)


def encode_trace(trace_json: Sequence[Any]) -> np.ndarray:
    """Encode one trace (``[instructions, decisions]`` JSON) as ``(n_instructions, TRACE_ROW_WIDTH)`` rows.

    Instructions of kinds or annotation keys outside the vocabularies set the "other" column.
    """
    instructions, decisions = trace_json[0], trace_json[1]
    decision_of = {int(index): decision for index, decision in decisions}
    rows = np.zeros((len(instructions), TRACE_ROW_WIDTH), dtype=np.float32)
    for i, (kind, inputs, attrs, _outputs) in enumerate(instructions):
        kind = str(kind)
        rows[i, _KIND_INDEX.get(kind, len(INSTRUCTION_KINDS))] = 1.0
        if kind in ("Annotate", "Unannotate") and attrs:
            rows[i, _KEY_OFFSET + _KEY_INDEX.get(str(attrs[0]), len(ANNOTATION_KEYS))] = 1.0
        attr_ints = [] if kind == "SampleCategorical" else int_values(attrs)
        values = _decision_values(kind, attrs, decision_of.get(i)) + int_values(inputs) + attr_ints
        slots = _squash(values)
        rows[i, _SLOT_OFFSET : _SLOT_OFFSET + len(slots)] = slots
    return rows


def encode_traces(
    traces_json: Sequence[Sequence[Any]], max_len: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Encode a batch of traces, zero-padded (or truncated) to ``max_len`` rows.

    Returns ``(sequences, lengths)``: a ``(n, max_len, TRACE_ROW_WIDTH)`` float32 array and the number of
    real (unpadded, after truncation) rows of each trace. ``max_len=None`` pads to the longest trace.
    """
    encoded = [encode_trace(t) for t in traces_json]
    longest = max((len(e) for e in encoded), default=0)
    max_len = longest if max_len is None else max_len
    sequences = np.zeros((len(encoded), max_len, TRACE_ROW_WIDTH), dtype=np.float32)
    lengths = np.zeros(len(encoded), dtype=np.int64)
    for i, rows in enumerate(encoded):
        n = min(len(rows), max_len)
        sequences[i, :n] = rows[:n]
        lengths[i] = n
    return sequences, lengths


def candidate_trace_json(candidate: Any) -> list:
    """The JSON form of a ``MeasureCandidate``'s (post-processed) trace."""
    return candidate.sch.trace.as_json()
