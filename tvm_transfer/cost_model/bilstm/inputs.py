"""Inputs of the BiLSTM cost model, packed into one fixed-width float row per candidate.

A row is ``[pooled kernel features (328) | hardware features (8) | task vector (TASK_WIDTH) | store count
(1) | per-store rows (MAX_STORES x 164, zero-padded) | sequence length (1) | trace-sequence rows
(MAX_SEQUENCE x TRACE_ROW_WIDTH, zero-padded)]``. Packing everything into one row lets the model reuse
:class:`~tvm_transfer.cost_model.base.LearnedCostModel`'s bookkeeping (measurements, per-group
normalisation, the saved training data) unchanged; the model unpacks the row.

The same rows come from a dataset frame (:func:`frame_rows`: the columns ``kernel_features``,
``store_features``, ``hw_features``, ``op_kind``, ``flops``, ``workload_key``, ``sequence_features``) and
from candidates of a MetaSchedule run (``BiLSTMCostModel.features``), both through the shared feature code of
:mod:`tenset_tools.features`, so a model pretrained on a dataset scores tuning candidates consistently.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import numpy as np

from tvm_transfer.features import PER_STORE_WIDTH, POOLED_WIDTH, TRACE_ROW_WIDTH, encode_trace

__all__ = [
    "HW_WIDTH",
    "MAX_SEQUENCE",
    "MAX_STORES",
    "OP_KINDS",
    "TASK_WIDTH",
    "frame_rows",
    "row_width",
    "sequence_matrices",
    "store_matrices",
    "task_vector",
    "unpack",
    "unpack_stores",
]

#: Op kinds of :func:`tenset_tools.metaschedule.op_kind_of` (and Ansor's workload parser); others -> "other".
OP_KINDS: tuple[str, ...] = (
    "conv2d", "depthwise_conv2d", "conv", "batch_matmul", "matmul", "dense", "softmax", "layer_norm",
    "pool", "reduce", "elementwise", "unknown",
)  # fmt: skip
#: Shape slots of the task vector: log2 element counts of the first three arguments and of the last one.
_SHAPE_SLOTS = 4
#: Width of the task vector: op-kind one-hot (+ other), log2 FLOPs, argument count, max rank, shape slots.
TASK_WIDTH = len(OP_KINDS) + 1 + 3 + _SHAPE_SLOTS
HW_WIDTH = 8
#: Trace instructions kept per candidate; longer traces are truncated (the dataset's longest has 78).
MAX_SEQUENCE = 128
#: Per-store feature rows kept per candidate (the collected datasets have at most 6).
MAX_STORES = 8
#: Width of the per-store block: the store count, then MAX_STORES zero-padded rows.
_STORE_BLOCK = 1 + MAX_STORES * PER_STORE_WIDTH
_FIXED = POOLED_WIDTH + HW_WIDTH + TASK_WIDTH


def row_width(max_sequence: int = MAX_SEQUENCE) -> int:
    """Width of one packed row."""
    return _FIXED + _STORE_BLOCK + 1 + max_sequence * TRACE_ROW_WIDTH


def task_vector(op_kind: str, flops: float, shapes: Sequence[Sequence[int]]) -> np.ndarray:
    """The task embedding's input: op kind one-hot, ``log2(1 + FLOPs)``, the number of arguments, their
    largest rank and the log2 element counts of the first three and the last argument (0 if absent).
    ``flops`` NaN (unknown) counts as 0."""
    vector = np.zeros(TASK_WIDTH, dtype=np.float32)
    vector[OP_KINDS.index(op_kind) if op_kind in OP_KINDS else len(OP_KINDS)] = 1.0
    base = len(OP_KINDS) + 1
    vector[base] = math.log2(1.0 + flops) if math.isfinite(flops) and flops > 0 else 0.0
    vector[base + 1] = len(shapes)
    vector[base + 2] = max((len(s) for s in shapes), default=0)
    chosen = list(shapes[:3]) + ([shapes[-1]] if len(shapes) > 3 else [])
    for i, shape in enumerate(chosen):
        vector[base + 3 + i] = math.log2(max(1, math.prod(int(d) for d in shape)))
    return vector


def _shapes_of_key(workload_key: str) -> list[list[int]]:
    # MetaSchedule datasets: [hash, [dtype, shape], ...] (tenset_tools.metaschedule._workload_key).
    try:
        parts = json.loads(workload_key)
    except (json.JSONDecodeError, TypeError):
        return []
    shapes = []
    for part in parts[1:] if isinstance(parts, list) else []:
        if isinstance(part, list) and len(part) == 2 and isinstance(part[1], list):
            shapes.append([int(d) for d in part[1] if isinstance(d, int | float)])
    return shapes


def pack(
    kernel: np.ndarray,
    hardware: np.ndarray,
    tasks: np.ndarray,
    sequences: Sequence[np.ndarray],
    max_sequence: int = MAX_SEQUENCE,
    stores: Sequence[np.ndarray] | None = None,
) -> np.ndarray:
    """Pack per-candidate parts into rows (see the module docstring)."""
    n = len(kernel)
    rows = np.zeros((n, row_width(max_sequence)), dtype=np.float32)
    rows[:, :POOLED_WIDTH] = kernel
    rows[:, POOLED_WIDTH : POOLED_WIDTH + HW_WIDTH] = hardware
    rows[:, POOLED_WIDTH + HW_WIDTH : _FIXED] = tasks
    if stores is not None:
        store_rows = rows[:, _FIXED + 1 : _FIXED + _STORE_BLOCK].reshape(n, MAX_STORES, PER_STORE_WIDTH)
        for i, matrix in enumerate(stores):
            count = min(len(matrix), MAX_STORES)
            rows[i, _FIXED] = count
            store_rows[i, :count] = matrix[:count]
    offset = _FIXED + _STORE_BLOCK
    flat = rows[:, offset + 1 :].reshape(n, max_sequence, TRACE_ROW_WIDTH)
    for i, sequence in enumerate(sequences):
        length = min(len(sequence), max_sequence)
        rows[i, offset] = length
        if length:
            flat[i, :length] = sequence[:length, :TRACE_ROW_WIDTH]
    return rows


def unpack(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(kernel, hardware, task, lengths, sequences)`` views of packed rows; sequences are
    ``(n, max_sequence, TRACE_ROW_WIDTH)``."""
    offset = _FIXED + _STORE_BLOCK
    width = rows.shape[1] - offset - 1
    if width <= 0 or width % TRACE_ROW_WIDTH:
        raise ValueError(f"rows of width {rows.shape[1]} are not packed BiLSTM inputs (see row_width)")
    return (
        rows[:, :POOLED_WIDTH],
        rows[:, POOLED_WIDTH : POOLED_WIDTH + HW_WIDTH],
        rows[:, POOLED_WIDTH + HW_WIDTH : _FIXED],
        rows[:, offset].astype(np.int64),
        rows[:, offset + 1 :].reshape(len(rows), width // TRACE_ROW_WIDTH, TRACE_ROW_WIDTH),
    )


def unpack_stores(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(store counts, stores)`` of packed rows; stores are ``(n, MAX_STORES, PER_STORE_WIDTH)``."""
    return (
        rows[:, _FIXED].astype(np.int64),
        rows[:, _FIXED + 1 : _FIXED + _STORE_BLOCK].reshape(len(rows), MAX_STORES, PER_STORE_WIDTH),
    )


def sequence_matrices(frame) -> list[np.ndarray]:
    """The trace-sequence rows of every record of a schema frame (``sequence_features``), or, where a
    record has none, its ``candidate`` trace encoded with :func:`tenset_tools.features.encode_trace`."""
    matrices = []
    for sequence, candidate, kind in zip(
        frame["sequence_features"], frame["candidate"], frame["candidate_kind"], strict=True
    ):
        if sequence is not None and len(sequence):
            matrices.append(np.stack(list(sequence)).astype(np.float32))
        elif kind == "ms_trace":
            matrices.append(encode_trace(json.loads(candidate)))
        else:
            raise ValueError(
                f"a {kind} record has no sequence features; the BiLSTM needs MetaSchedule traces"
            )
    return matrices


def frame_rows(frame, max_sequence: int = MAX_SEQUENCE, stores: bool = True) -> np.ndarray:
    """Packed rows of every record of a schema frame (MetaSchedule records with kernel features, and with
    per-store rows unless ``stores`` is False: their block is then left empty)."""
    if frame["kernel_features"].isna().any():
        raise ValueError(
            f"{int(frame['kernel_features'].isna().sum())} of {len(frame)} records have no kernel_features; "
            "the BiLSTM trains on MetaSchedule datasets (tenset-tools collect)"
        )
    kernel = np.stack(frame["kernel_features"].to_numpy()).astype(np.float32)
    hardware = np.stack(frame["hw_features"].to_numpy()).astype(np.float32)
    tasks = np.stack(
        [
            task_vector(op, float(flops), _shapes_of_key(key))
            for op, flops, key in zip(frame["op_kind"], frame["flops"], frame["workload_key"], strict=True)
        ]
    )
    store_rows = store_matrices(frame) if stores else None
    return pack(kernel, hardware, tasks, sequence_matrices(frame), max_sequence, store_rows)


def store_matrices(frame) -> list[np.ndarray]:
    """The per-store rows (``store_features``, ``(n_stores, PER_STORE_WIDTH)``) of every record of a schema
    frame; raises ValueError naming the remedy when records lack them (files of schema version 1)."""
    missing = frame["store_features"].isna() if "store_features" in frame else np.ones(len(frame), bool)
    if missing.any():
        raise ValueError(
            f"{int(missing.sum())} of {len(frame)} records have no store_features; fill them "
            "(tvm_transfer.tuning.collect.add_store_features, or convert the MetaSchedule work dirs "
            "again) or use a BiLSTM without the store sequence (store_sequence=False)"
        )
    return [
        np.stack(list(m)).astype(np.float32) if len(m) else np.zeros((0, PER_STORE_WIDTH), np.float32)
        for m in frame["store_features"]
    ]
