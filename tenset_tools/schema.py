"""The one dataset schema: every learner trains on this table, whatever produced the records.

A record is one measured candidate program of one task on one target. Records are stored as Parquet with
the schema version and the names of the hardware features in the file's key-value metadata, so that a
reader can refuse files written under another version instead of misreading them. Files of version 1 are
still read: version 2 only added ``store_features`` (MetaSchedule's per-store feature rows of each
candidate, ``(n_stores, 164)``), which they lack and which reads as null.

Units: ``flops`` is the floating-point operation count of one run of the task (a multiply-add counts 2);
``latencies`` and ``latency`` are seconds; ``norm_throughput`` is dimensionless (task best / this).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .atomic import atomic_output
from .frame import group_keys, normalised_throughput, record_costs

__all__ = [
    "CANDIDATE_KEY",
    "CANDIDATE_KINDS",
    "COLUMNS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "DatasetFormatError",
    "DatasetWriter",
    "SchemaVersionError",
    "add_normalised_throughput",
    "columns_to_table",
    "merge_datasets",
    "read_dataset",
    "read_metadata",
    "records_to_table",
    "table_to_frame",
    "write_dataset",
]

SCHEMA_VERSION: int = 2
#: Older versions read by adding the columns introduced since, all null (version -> those columns).
_UPGRADABLE: dict[int, tuple[str, ...]] = {1: ("store_features",)}

CANDIDATE_KINDS = ("ansor_steps", "ms_trace", "vta_knobs")

_FLOAT_LIST = pa.list_(pa.float32())

SCHEMA = pa.schema(
    [
        pa.field("task_id", pa.string(), nullable=False),
        pa.field("workload_key", pa.string(), nullable=False),
        pa.field("op_kind", pa.string(), nullable=False),
        pa.field("flops", pa.float64(), nullable=False),
        pa.field("target_id", pa.string(), nullable=False),
        pa.field("hw_features", pa.list_(pa.float64()), nullable=False),
        pa.field("candidate_kind", pa.string(), nullable=False),
        pa.field("candidate", pa.string(), nullable=False),
        pa.field("kernel_features", _FLOAT_LIST),
        pa.field("store_features", pa.list_(_FLOAT_LIST)),
        pa.field("sequence_features", pa.list_(_FLOAT_LIST)),
        pa.field("hidden_features", _FLOAT_LIST),
        pa.field("valid", pa.bool_(), nullable=False),
        pa.field("error_kind", pa.string()),
        pa.field("latencies", pa.list_(pa.float64()), nullable=False),
        pa.field("latency", pa.float64(), nullable=False),
        pa.field("norm_throughput", pa.float64(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("network", pa.string()),
        pa.field("weight", pa.float64(), nullable=False),
    ]
)

COLUMNS: tuple[str, ...] = tuple(SCHEMA.names)

_REQUIRED = (
    "task_id",
    "workload_key",
    "op_kind",
    "flops",
    "target_id",
    "hw_features",
    "candidate_kind",
    "candidate",
    "valid",
    "latencies",
    "latency",
    "source",
)
_DEFAULTS: dict[str, Any] = {
    "kernel_features": None,
    "store_features": None,
    "sequence_features": None,
    "hidden_features": None,
    "error_kind": None,
    "norm_throughput": math.nan,
    "network": None,
    "weight": 1.0,
}

_DICTIONARY_COLUMNS = (
    "task_id",
    "workload_key",
    "op_kind",
    "target_id",
    "candidate_kind",
    "error_kind",
    "source",
    "network",
)
_STATISTICS_COLUMNS = ("task_id", "op_kind", "flops", "target_id", "valid", "latency", "source", "network")

_MATRIX_COLUMNS = ("store_features", "sequence_features")

_VERSION_KEY = b"tenset_tools.schema_version"
_HW_NAMES_KEY = b"tenset_tools.hw_feature_names"
_RECONVERT_HINT = (
    "re-create it with the current tools (`tenset-tools convert` for Ansor/TenSet records, or the writer "
    "that produced it)"
)


class SchemaVersionError(ValueError):
    """A dataset file was written under a different (or no) schema version."""


class DatasetFormatError(ValueError):
    """A file is not a readable Parquet dataset (wrong format, truncated or corrupt)."""


def _check_record(index: int, record: dict) -> None:
    missing = [key for key in _REQUIRED if key not in record]
    if missing:
        raise KeyError(f"record {index} lacks required key(s) {missing}; required: {list(_REQUIRED)}")
    unknown = set(record) - set(COLUMNS)
    if unknown:
        raise KeyError(f"record {index} has unknown key(s) {sorted(unknown)}; known: {list(COLUMNS)}")
    if record["candidate_kind"] not in CANDIDATE_KINDS:
        raise ValueError(
            f"record {index}: candidate_kind {record['candidate_kind']!r} is not one of {CANDIDATE_KINDS}"
        )
    latency = record["latency"]
    if not record["valid"] and not math.isnan(latency):
        raise ValueError(f"record {index}: an invalid record must have latency NaN, got {latency}")
    if record["valid"] and not (math.isfinite(latency) and latency > 0):
        raise ValueError(f"record {index}: a valid record needs a positive latency in seconds, got {latency}")


def _matrix_array(values: list) -> pa.Array:
    """Build a column of per-record matrices (``sequence_features``, ``store_features``): each a list of
    rows, an object array of rows (as read back) or a 2-D numpy block; all-block columns take a fast path
    (no per-float Python objects)."""
    matrix_type = pa.list_(_FLOAT_LIST)
    blocks = (v is None or (isinstance(v, np.ndarray) and v.ndim == 2 and v.dtype != object) for v in values)
    if not all(blocks):
        rows = [None if v is None else [np.asarray(r, dtype=np.float32) for r in v] for v in values]
        return pa.array(rows, type=matrix_type)
    present = [v for v in values if v is not None]
    if not present:
        return pa.nulls(len(values), type=matrix_type)
    rows_per_record = np.array([0 if v is None else v.shape[0] for v in values], dtype=np.int64)
    outer_offsets = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum(rows_per_record, out=outer_offsets[1:])
    row_lengths = np.concatenate([np.full(v.shape[0], v.shape[1], dtype=np.int64) for v in present])
    inner_offsets = np.zeros(len(row_lengths) + 1, dtype=np.int32)
    np.cumsum(row_lengths, out=inner_offsets[1:])
    flat = np.concatenate([v.astype(np.float32, copy=False).ravel() for v in present])
    inner = pa.ListArray.from_arrays(pa.array(inner_offsets), pa.array(flat))
    mask = pa.array([v is None for v in values])
    return pa.ListArray.from_arrays(pa.array(outer_offsets), inner, mask=mask)


def records_to_table(records: list[dict], hw_feature_names: list[str] | None = None) -> pa.Table:
    """Validate record dicts and build a table with :data:`SCHEMA`.

    Optional keys take their defaults (``norm_throughput`` NaN, ``weight`` 1.0, features/network/error
    None). ``sequence_features`` and ``store_features`` may be a list of rows or a 2-D numpy array per
    record. When ``hw_feature_names`` is given, it is stored in the table metadata and every
    ``hw_features`` must have that length.
    """
    for index, record in enumerate(records):
        _check_record(index, record)
        if hw_feature_names is not None and len(record["hw_features"]) != len(hw_feature_names):
            raise ValueError(
                f"record {index}: {len(record['hw_features'])} hw_features but "
                f"{len(hw_feature_names)} hw_feature_names"
            )
    columns = {name: [record.get(name, _DEFAULTS.get(name)) for record in records] for name in SCHEMA.names}
    return columns_to_table(columns, hw_feature_names)


def columns_to_table(columns: dict[str, Any], hw_feature_names: Sequence[str] | None = None) -> pa.Table:
    """Build a schema table from one value sequence (list, numpy array or Arrow array) per column.

    This is the fast path of loaders that build columns directly; it checks types, not record semantics
    (use :func:`records_to_table` for that).
    """
    missing = [name for name in SCHEMA.names if name not in columns]
    if missing:
        raise KeyError(f"missing column(s) {missing}")
    arrays = []
    for field in SCHEMA:
        values = columns[field.name]
        if isinstance(values, pa.Array):
            arrays.append(values.cast(field.type))
        elif field.name in _MATRIX_COLUMNS:
            arrays.append(_matrix_array(values))
        else:
            arrays.append(pa.array(values, type=field.type))
    table = pa.Table.from_arrays(arrays, schema=SCHEMA)
    return table.replace_schema_metadata(_metadata(hw_feature_names))


def _metadata(hw_feature_names: Sequence[str] | None) -> dict[bytes, bytes]:
    names = list(hw_feature_names) if hw_feature_names is not None else []
    return {_VERSION_KEY: str(SCHEMA_VERSION).encode(), _HW_NAMES_KEY: json.dumps(names).encode()}


def _hw_names_of(table_or_frame: pa.Table | pd.DataFrame) -> list[str] | None:
    if isinstance(table_or_frame, pd.DataFrame):
        return table_or_frame.attrs.get("hw_feature_names")
    raw = (table_or_frame.schema.metadata or {}).get(_HW_NAMES_KEY)
    return json.loads(raw) if raw is not None else None


def _as_table(table_or_frame: pa.Table | pd.DataFrame) -> pa.Table:
    if isinstance(table_or_frame, pd.DataFrame):
        missing = [c for c in COLUMNS if c not in table_or_frame.columns]
        if missing:
            raise KeyError(f"frame lacks schema column(s) {missing}")
        frame = table_or_frame[list(COLUMNS)]
        # from_pandas reads NaN as null, which the non-nullable float columns reject; NaN is a value there
        # (latency of an invalid record, unknown FLOPs), so those columns are converted as plain numbers.
        plain = [field.name for field in SCHEMA if pa.types.is_floating(field.type)]
        own = plain + list(_MATRIX_COLUMNS)
        rest_schema = pa.schema([field for field in SCHEMA if field.name not in own])
        rest = pa.Table.from_pandas(frame.drop(columns=own), schema=rest_schema, preserve_index=False)
        arrays = [
            pa.array(frame[field.name].to_numpy(dtype=np.float64), type=field.type, from_pandas=False)
            if field.name in plain
            else _matrix_array(list(frame[field.name]))
            if field.name in _MATRIX_COLUMNS
            else rest.column(field.name)
            for field in SCHEMA
        ]
        return pa.Table.from_arrays(arrays, schema=SCHEMA)
    if table_or_frame.schema.names != list(COLUMNS):
        raise ValueError(
            f"table columns {table_or_frame.schema.names} differ from the schema {list(COLUMNS)}"
        )
    return table_or_frame.cast(SCHEMA)


class DatasetWriter:
    """Stream tables into one Parquet dataset file.

    Tables are buffered into row groups of about ``row_group_rows`` rows (small writes would make small,
    slow-to-read row groups); memory is bounded by that buffer, not by the file size. Use as a context
    manager, or call :meth:`close`. The file appears at ``path`` only when :meth:`close` succeeds: leaving
    the ``with`` block by an exception keeps the previous content of ``path``.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        hw_feature_names: Sequence[str] | None = None,
        row_group_rows: int = 10000,
    ):
        self.path = os.fspath(path)
        self.rows = 0
        self.row_group_rows = row_group_rows
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        # The stream goes to a temporary beside ``path``; only a successful close puts it in place.
        self._output = contextlib.ExitStack()
        temporary = self._output.enter_context(atomic_output(self.path))
        schema = SCHEMA.with_metadata(_metadata(hw_feature_names))
        # Dictionary encoding and statistics only where they pay off: on the nested float columns they
        # tripled the write time (dictionaries of millions of floats, then abandoned).
        try:
            self._writer = pq.ParquetWriter(
                temporary,
                schema,
                compression="zstd",
                use_dictionary=list(_DICTIONARY_COLUMNS),
                write_statistics=list(_STATISTICS_COLUMNS),
            )
        except BaseException as error:
            self._drop_temporary(error)
            raise

    def write(self, table_or_frame: pa.Table | pd.DataFrame) -> None:
        table = _as_table(table_or_frame).replace_schema_metadata(self._writer.schema.metadata)
        self._pending.append(table)
        self._pending_rows += table.num_rows
        self.rows += table.num_rows
        if self._pending_rows >= self.row_group_rows:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            self._writer.write_table(pa.concat_tables(self._pending), row_group_size=self.row_group_rows)
        self._pending, self._pending_rows = [], 0

    def close(self) -> None:
        """Write the buffered rows and put the finished file at ``path``."""
        try:
            self._flush()
        except BaseException as error:
            self._discard(error)
            raise
        self._writer.close()
        self._output.close()

    def _discard(self, error: BaseException) -> None:
        """Drop the rows written so far: ``path`` keeps its previous content (or stays absent)."""
        try:
            self._writer.close()
        finally:
            self._drop_temporary(error)

    def _drop_temporary(self, error: BaseException) -> None:
        self._output.__exit__(type(error), error, error.__traceback__)

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, error: BaseException | None, _tb: object
    ) -> None:
        if error is None:
            self.close()
        else:
            self._discard(error)


def write_dataset(
    table_or_frame: pa.Table | pd.DataFrame,
    path: str | os.PathLike,
    hw_feature_names: Sequence[str] | None = None,
) -> None:
    """Write a table or frame (all :data:`COLUMNS`) to a Parquet file with the schema metadata.

    ``hw_feature_names`` defaults to the names carried by the table metadata or ``frame.attrs``.
    """
    names = hw_feature_names if hw_feature_names is not None else _hw_names_of(table_or_frame)
    with DatasetWriter(path, names) as writer:
        writer.write(table_or_frame)


#: The columns that identify one measured candidate: the same program of the same workload on the same target.
CANDIDATE_KEY = ("workload_key", "target_id", "candidate_kind", "candidate")


def merge_datasets(paths: Sequence[str | os.PathLike], out_path: str | os.PathLike) -> int:
    """Write the rows of the dataset files ``paths``, in order, to one dataset file at ``out_path``, keeping
    only the first row of each measured candidate (:data:`CANDIDATE_KEY`), so that a run merged twice counts
    once. Returns the number of rows written. Raises :class:`DatasetFormatError` when the files' hardware
    feature names differ (their ``hw_features`` vectors would not line up)."""
    frames = [read_dataset(path) for path in paths]
    if not frames:
        raise ValueError("merge_datasets needs at least one dataset file")
    names = frames[0].attrs.get("hw_feature_names")
    for path, frame in zip(paths, frames, strict=True):
        if frame.attrs.get("hw_feature_names") != names:
            raise DatasetFormatError(
                f"{os.fspath(path)} has other hardware feature names than {os.fspath(paths[0])}; "
                f"{_RECONVERT_HINT}"
            )
    merged = pd.concat(frames, ignore_index=True).drop_duplicates(list(CANDIDATE_KEY), ignore_index=True)
    write_dataset(merged, out_path, names)
    return len(merged)


def read_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """Return ``{"schema_version": int, "hw_feature_names": list[str], "num_rows": int}`` of a dataset file
    (its own schema version: :data:`SCHEMA_VERSION` or an older one this reader upgrades).

    Raises :class:`DatasetFormatError` for a non-Parquet or corrupt file and :class:`SchemaVersionError`
    when the version is missing or neither :data:`SCHEMA_VERSION` nor upgradable.
    """
    path = os.fspath(path)
    try:
        parquet_meta = pq.read_metadata(path)
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as error:
        if isinstance(error, FileNotFoundError):
            raise
        raise DatasetFormatError(f"{path} is not a readable Parquet dataset file ({error})") from error
    metadata = parquet_meta.metadata or {}
    found = metadata.get(_VERSION_KEY)
    found_text = found.decode() if found is not None else "none"
    readable = [str(SCHEMA_VERSION), *(str(v) for v in _UPGRADABLE)]
    if found_text not in readable:
        raise SchemaVersionError(
            f"{path}: dataset schema version {found_text}, expected {SCHEMA_VERSION} (readable: "
            f"{', '.join(readable)}); {_RECONVERT_HINT}"
        )
    names = json.loads(metadata.get(_HW_NAMES_KEY, b"[]"))
    return {"schema_version": int(found_text), "hw_feature_names": names, "num_rows": parquet_meta.num_rows}


def read_dataset(path: str | os.PathLike, columns: Iterable[str] | None = None) -> pd.DataFrame:
    """Read a dataset file written by :func:`write_dataset` into a frame.

    The frame's ``attrs`` carry ``schema_version`` and ``hw_feature_names``. List columns hold numpy
    arrays (``sequence_features`` and ``store_features``: object arrays of rows). ``columns`` selects a
    subset. A file of an older, upgradable version reads as the current schema (added columns null).
    """
    version = read_metadata(path)["schema_version"]
    added = _UPGRADABLE.get(version, ())
    wanted = list(columns) if columns is not None else None
    # A file without a column of its schema version (e.g. rewritten by another tool) would fail much later
    # with a bare KeyError, after commands had written empty outputs: refuse it here, naming the columns.
    present = set(pq.read_schema(path).names)
    needed = [c for c in (wanted if wanted is not None else SCHEMA.names) if c not in added]
    missing = [c for c in needed if c not in present]
    if missing:
        raise DatasetFormatError(
            f"{os.fspath(path)} lacks the dataset column(s) {', '.join(missing)} of schema version "
            f"{version}; {_RECONVERT_HINT}"
        )
    try:
        table = pq.read_table(path, columns=[c for c in wanted if c not in added] if wanted else wanted)
    except (pa.ArrowInvalid, OSError) as error:
        raise DatasetFormatError(f"{os.fspath(path)} could not be read as a dataset ({error})") from error
    for name in added:
        if wanted is None or name in wanted:
            column = pa.nulls(table.num_rows, SCHEMA.field(name).type)
            table = table.append_column(SCHEMA.field(name), column)
    if wanted is not None:
        table = table.select(wanted)
    elif added:
        table = table.select(SCHEMA.names)
    return table_to_frame(table)


def table_to_frame(table: pa.Table) -> pd.DataFrame:
    """Convert a schema table to a frame whose ``attrs`` keep the schema version and hw feature names
    (``Table.to_pandas`` alone drops them, and :func:`write_dataset` of the frame would lose the names)."""
    frame = table.to_pandas()
    frame.attrs["schema_version"] = SCHEMA_VERSION
    frame.attrs["hw_feature_names"] = _hw_names_of(table) or []
    return frame


def add_normalised_throughput(frame: pd.DataFrame) -> pd.DataFrame:
    """Return a copy with ``norm_throughput`` = best valid latency of its (task_id, target_id) / latency.

    Invalid records (and valid ones with a non-finite or non-positive latency) get 0. The best record of
    each group gets 1.
    """
    result = frame.copy()
    result["norm_throughput"] = normalised_throughput(record_costs(result), group_keys(result))
    return result
