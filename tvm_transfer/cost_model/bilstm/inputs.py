"""Inputs of the BiLSTM cost model: packed into one fixed-width float row per candidate, then scaled.

A row is ``[pooled kernel features (328) | hardware features (8) | task vector (TASK_WIDTH) | store count
(1) | per-store rows (MAX_STORES x 164, zero-padded) | sequence length (1) | trace-sequence rows
(MAX_SEQUENCE x TRACE_ROW_WIDTH, zero-padded)]``. Packing everything into one row lets the model reuse
:class:`~tvm_transfer.cost_model.base.LearnedCostModel`'s bookkeeping (measurements, per-group
normalisation, the saved training data) unchanged; the model unpacks the row.

The same rows come from a dataset frame (:func:`frame_rows`: the columns ``kernel_features``,
``store_features``, ``hw_features``, ``op_kind``, ``flops``, ``workload_key``, ``sequence_features``) and
from candidates of a MetaSchedule run (``BiLSTMCostModel.features``), both through the shared feature code of
:mod:`tenset_tools.features`, so a model pretrained on a dataset scores tuning candidates consistently.

The network reads scaled rows (:class:`ScaledInputs`): signed-log features, standardised or mapped through
their training quantiles, with the statistics of :func:`input_statistics` fixed at (pre)training.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from tenset_tools.frame import hardware_matrix, kernel_matrix
from tvm_transfer.features import PER_STORE_WIDTH, POOLED_WIDTH, TRACE_ROW_WIDTH, encode_trace

__all__ = [
    "HW_WIDTH",
    "MAX_SEQUENCE",
    "MAX_STORES",
    "OP_KINDS",
    "TASK_WIDTH",
    "ScaledInputs",
    "bucket_length",
    "frame_rows",
    "input_statistics",
    "row_width",
    "scaled_kernel",
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
#: Quantiles per kernel feature kept by ``kernel_scaling="quantile"``.
_QUANTILES = 65


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


def sequence_matrices(frame: pd.DataFrame) -> list[np.ndarray]:
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


def frame_rows(frame: pd.DataFrame, max_sequence: int = MAX_SEQUENCE, stores: bool = True) -> np.ndarray:
    """Packed rows of every record of a schema frame (MetaSchedule records with kernel features, and with
    per-store rows unless ``stores`` is False: their block is then left empty)."""
    kernel, hardware = kernel_matrix(frame), hardware_matrix(frame)
    tasks = np.stack(
        [
            task_vector(op, float(flops), _shapes_of_key(key))
            for op, flops, key in zip(frame["op_kind"], frame["flops"], frame["workload_key"], strict=True)
        ]
    )
    store_rows = store_matrices(frame) if stores else None
    return pack(kernel, hardware, tasks, sequence_matrices(frame), max_sequence, store_rows)


def store_matrices(frame: pd.DataFrame) -> list[np.ndarray]:
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


def _signed_log(x: np.ndarray) -> np.ndarray:
    # Kernel features span 0..1e9 (byte and FLOP counts): compress them before standardising.
    return np.sign(x) * np.log1p(np.abs(x))


class ScaledInputs:
    """Standardised tensors of packed rows (the statistics are the model's, fixed at (pre)training)."""

    def __init__(self, rows: np.ndarray, stats: dict[str, np.ndarray]) -> None:
        kernel, hardware, task, lengths, sequences = unpack(rows)
        longest = bucket_length(int(lengths.max(initial=0)))
        self.kernel = torch.from_numpy(scaled_kernel(kernel, stats))
        self.hardware = torch.from_numpy(
            ((np.log2(1 + np.abs(hardware)) - stats["h_mean"]) / stats["h_scale"]).astype(np.float32)
        )
        self.task = torch.from_numpy(((task - stats["t_mean"]) / stats["t_scale"]).astype(np.float32))
        self.lengths = torch.from_numpy(lengths)
        counts, stores = unpack_stores(rows)
        self.store_counts = torch.from_numpy(counts)
        self.stores = torch.from_numpy(_scaled_stores(stores, stats))
        if sequences.shape[1] < longest:  # keep whole buckets
            sequences = np.pad(sequences, ((0, 0), (0, longest - sequences.shape[1]), (0, 0)))
        self.sequences = torch.from_numpy(np.ascontiguousarray(sequences[:, :longest]))

    def __len__(self) -> int:
        return len(self.lengths)

    def batch(self, index) -> tuple[torch.Tensor, ...]:
        """Rows ``index``, their sequences padded to the :func:`bucket_length` of the longest."""
        index = torch.as_tensor(index)
        lengths = self.lengths[index]
        longest = min(self.sequences.shape[1], bucket_length(int(lengths.max())))
        return (
            self.kernel[index],
            self.hardware[index],
            self.task[index],
            lengths,
            self.sequences[index, :longest],
            self.store_counts[index],
            self.stores[index],
        )


#: Sequences are padded to a multiple of this many steps: a candidate's score then depends on its own
#: length only, not on the other candidates of its prediction batch.
_BUCKET = 16


def bucket_length(length: int) -> int:
    """``length`` (trace steps) rounded up to a whole bucket (at least one)."""
    return max(1, math.ceil(length / _BUCKET)) * _BUCKET


def _scaled(values: np.ndarray, stats: dict[str, np.ndarray], prefix: str) -> np.ndarray:
    """Signed-log features, standardised, or mapped to [-1, 1] through the training quantiles when the
    statistics hold them (``kernel_scaling="quantile"``; values outside the training range clip).
    ``prefix`` picks the statistics: ``"k"`` the pooled kernel features, ``"s"`` the per-store rows."""
    values = _signed_log(values)
    quantile_table = stats.get(f"{prefix}_quantiles")
    if quantile_table is None:
        return ((values - stats[f"{prefix}_mean"]) / stats[f"{prefix}_scale"]).astype(np.float32)
    grid = np.linspace(-1.0, 1.0, len(quantile_table))
    scaled = np.empty(values.shape, dtype=np.float32)
    for j, quantiles in enumerate(quantile_table.T):
        scaled[..., j] = np.interp(values[..., j], quantiles, grid)
    return scaled


def scaled_kernel(kernel: np.ndarray, stats: dict[str, np.ndarray]) -> np.ndarray:
    """The pooled kernel features as the network reads them (:func:`_scaled`)."""
    return _scaled(kernel, stats, "k")


def _scaled_stores(stores: np.ndarray, stats: dict[str, np.ndarray]) -> np.ndarray:
    """The per-store rows as the network reads them (:func:`_scaled`); zeros for a model without them."""
    if "s_mean" not in stats:
        return np.zeros(stores.shape, dtype=np.float32)
    return _scaled(stores, stats, "s")


def _feature_statistics(values: np.ndarray, prefix: str, kernel_scaling: str) -> dict[str, np.ndarray]:
    """Mean, scale (floored) and, for ``kernel_scaling="quantile"``, the quantiles of signed-log features."""
    values = _signed_log(values)
    stats = {f"{prefix}_mean": values.mean(0), f"{prefix}_scale": np.maximum(values.std(0), 0.1)}
    if kernel_scaling == "quantile":
        # Heavy-tailed byte and FLOP counts: ranks carry the order the trees split on, not the scale.
        stats[f"{prefix}_quantiles"] = np.quantile(values, np.linspace(0.0, 1.0, _QUANTILES), axis=0)
    return stats


def input_statistics(rows: np.ndarray, kernel_scaling: str = "standard") -> dict[str, np.ndarray]:
    """The scaling statistics of packed training rows (fixed at (pre)training and saved with the model):
    per input, its mean and floored scale, and with ``kernel_scaling="quantile"`` the kernel quantiles."""
    counts, stores = unpack_stores(rows)
    present = stores[np.arange(MAX_STORES)[None, :] < counts[:, None]]
    kernel, hardware, task, _, _ = unpack(rows)
    hardware = np.log2(1 + np.abs(hardware))
    # Floors on the scales: a feature (nearly) constant in the training data, e.g. the hardware vector when
    # pretraining on one target, must not turn a new target's values into inputs in the thousands.
    return {
        **_feature_statistics(kernel, "k", kernel_scaling),
        # Standardised whatever kernel_scaling says: quantile-mapped store rows ranked worse (dev splits).
        **(_feature_statistics(present, "s", "standard") if len(present) else {}),
        "h_mean": hardware.mean(0), "h_scale": np.maximum(hardware.std(0), 1.0),
        "t_mean": task.mean(0), "t_scale": np.maximum(task.std(0), 0.1),
    }  # fmt: skip
