"""Conversion of Ansor/TenSet records to the dataset schema, streamed to Parquet in bounded batches.

Per record: ``candidate_kind="ansor_steps"``, ``candidate`` = the original record line (JSON; the steps
are ``json.loads(candidate)["i"][1][1]``; kept verbatim so that it stays replayable and costs nothing),
``sequence_features`` = :func:`~tenset_tools.ansor.steps.encode_steps` rows, ``kernel_features`` and
``store_features`` None (Ansor's per-store features need the old TVM), ``hw_features`` = the 8 hardware
params (NaN for logs without them), ``target_id`` = the ``-model=`` of the target string, else the TenSet
hardware folder, else the target kind plus its ``-mcpu``/``-arch``. ``network`` None and ``weight`` 1.0:
task weights live in TenSet's pickled network info, which only the old TVM can read.
"""

from __future__ import annotations

import gc
import hashlib
import json
import math
import multiprocessing
import os
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from functools import lru_cache

import numpy as np
import pyarrow as pa

from ..schema import SCHEMA, DatasetWriter, columns_to_table
from .records import HARDWARE_PARAM_NAMES, AnsorRecord, LoadStats, iter_file, iter_records, list_record_files
from .steps import encode_steps_batch
from .workload import parse_workload_key

__all__ = ["ERROR_KINDS", "convert_records", "records_to_arrow", "target_id_of", "task_id_of"]

# auto_scheduler's MeasureErrorNo, by value.
ERROR_KINDS = (
    None,
    "instantiation_error",
    "compile_host",
    "compile_device",
    "runtime_device",
    "wrong_answer",
    "build_timeout",
    "run_timeout",
    "unknown_error",
)
# Ansor stores failed measurements with a cost of 1e10 s; anything this slow is not a real measurement.
_MAX_REAL_COST = 1e9
_NAN_HARDWARE = (math.nan,) * len(HARDWARE_PARAM_NAMES)
_TARGET_OPTION = re.compile(r"-(model|mcpu|arch)=(\S+)")


@lru_cache(maxsize=4096)
def target_id_of(target: str, folder: str = "") -> str:
    """Target id: ``-model=`` if present, else the hardware folder, else ``kind[-mcpu|-arch]``."""
    options = dict(_TARGET_OPTION.findall(target))
    if "model" in options:
        return options["model"]
    if folder:
        return folder
    kind = target.split(maxsplit=1)[0] if target.strip() else "unknown"
    detail = options.get("mcpu") or options.get("arch")
    return f"{kind}-{detail}" if detail else kind


@lru_cache(maxsize=65536)
def task_id_of(workload_key: str) -> str:
    """Stable task id: 16 hex digits of the MD5 of the key re-serialised compactly (spacing-insensitive)."""
    try:
        canonical = json.dumps(json.loads(workload_key), separators=(",", ":"))
    except ValueError:
        canonical = workload_key
    return hashlib.md5(canonical.encode()).hexdigest()[:16]


def _measurement(record: AnsorRecord) -> tuple[bool, str | None, list[float], float]:
    costs = record.costs
    if record.error_no != 0:
        kind = ERROR_KINDS[record.error_no] if 0 < record.error_no < len(ERROR_KINDS) else "unknown_error"
        return False, kind, [], math.nan
    if not costs or not all(0.0 < c < _MAX_REAL_COST for c in costs):
        return False, "bad_cost", [], math.nan
    return True, None, costs, sum(costs) / len(costs)


def _sequence_column(records: list[AnsorRecord]) -> pa.Array:
    rows, steps_per_schedule = encode_steps_batch([r.steps for r in records])
    width = rows.shape[1]
    inner_offsets = np.arange(0, rows.size + 1, width, dtype=np.int32)
    outer_offsets = np.zeros(len(records) + 1, dtype=np.int32)
    np.cumsum(steps_per_schedule, out=outer_offsets[1:])
    inner = pa.ListArray.from_arrays(pa.array(inner_offsets), pa.array(rows.ravel()))
    return pa.ListArray.from_arrays(pa.array(outer_offsets), inner)


def records_to_arrow(records: list[AnsorRecord], sequence_features: bool = True) -> pa.Table:
    """Convert parsed records to a schema table (``norm_throughput`` NaN, filled by the reader's user).

    ``sequence_features=False`` leaves that column null: the step encoding takes most of the
    conversion time, and the steps stay available in ``candidate``.
    """
    n = len(records)
    columns: dict[str, list] = {name: [] for name in SCHEMA.names}
    for record in records:
        info = parse_workload_key(record.workload_key)
        valid, error_kind, latencies, latency = _measurement(record)
        columns["task_id"].append(task_id_of(record.workload_key))
        columns["workload_key"].append(record.workload_key)
        columns["op_kind"].append(info.op_kind)
        columns["flops"].append(info.flops)
        columns["target_id"].append(target_id_of(record.target, record.folder))
        columns["hw_features"].append(record.hardware_params or _NAN_HARDWARE)
        columns["candidate"].append(record.line)
        columns["valid"].append(valid)
        columns["error_kind"].append(error_kind)
        columns["latencies"].append(latencies)
        columns["latency"].append(latency)
        columns["source"].append(record.path)
    columns["candidate_kind"] = pa.repeat("ansor_steps", n)
    if sequence_features:
        columns["sequence_features"] = _sequence_column(records)
    else:
        columns["sequence_features"] = pa.nulls(n, SCHEMA.field("sequence_features").type)
    for name in ("kernel_features", "store_features", "hidden_features", "network"):
        columns[name] = pa.nulls(n, SCHEMA.field(name).type)
    columns["norm_throughput"] = np.full(n, math.nan)
    columns["weight"] = np.ones(n)
    return columns_to_table(columns, list(HARDWARE_PARAM_NAMES))


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while batches of parsed records are alive.

    Parsed records hold no reference cycles, but their many containers make every collection rescan them:
    with the collector on, a batch converts several times slower.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _batches(records: Iterable[AnsorRecord], batch_size: int) -> Iterator[list[AnsorRecord]]:
    batch: list[AnsorRecord] = []
    for record in records:
        batch.append(record)
        if len(batch) == batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


def _convert_file(job: tuple[str, str, int, bool]) -> tuple[list[pa.Table], LoadStats]:
    """Worker: one whole file to tables of at most ``batch_size`` rows (TenSet files are per task, small)."""
    path, folder, batch_size, sequence_features = job
    stats = LoadStats()
    with _gc_paused():
        batches = _batches(iter_file(path, stats, folder), batch_size)
        tables = [records_to_arrow(batch, sequence_features) for batch in batches]
    return tables, stats


def _write_result(
    result: tuple[list[pa.Table], LoadStats],
    writer: DatasetWriter,
    stats: LoadStats,
    progress: Callable[[int], None] | None,
) -> None:
    tables, file_stats = result
    stats.merge(file_stats)
    for table in tables:
        writer.write(table)
        if progress is not None:
            progress(table.num_rows)


def convert_records(
    sources: str | os.PathLike | Iterable[str | os.PathLike],
    out_path: str | os.PathLike,
    batch_size: int = 1000,
    workers: int = 1,
    progress: Callable[[int], None] | None = None,
    sequence_features: bool = True,
) -> LoadStats:
    """Convert record files/trees to one Parquet dataset file; returns the load statistics.

    Memory is bounded by ``batch_size`` records and the writer's row-group buffer (10 000 rows), not by
    the input size: a parsed record with its encodings takes ~50 KB in flight (its steps as Python
    objects), so the default 1000 keeps a batch near 50 MB. With workers, each worker also holds the
    converted tables of the file it is on (~4 KB per record; TenSet files hold a few thousand records)
    and the writer holds at most two finished files per worker. With ``workers > 1``,
    files are converted in parallel processes (parallelism is over files, as TenSet stores one file per
    task and hardware). ``progress`` is called with the number of records written after each batch.
    ``sequence_features=False`` skips the step encoding (see :func:`records_to_arrow`).
    """
    stats = LoadStats()
    with DatasetWriter(out_path, list(HARDWARE_PARAM_NAMES)) as writer, _gc_paused():
        if workers <= 1:
            for batch in _batches(iter_records(sources, stats), batch_size):
                writer.write(records_to_arrow(batch, sequence_features))
                if progress is not None:
                    progress(len(batch))
            return stats
        if isinstance(sources, (str, os.PathLike)):
            sources = [sources]
        jobs = [
            (str(p), folder, batch_size, sequence_features)
            for s in sources
            for p, folder in list_record_files(s)
        ]
        # spawn, not fork: forking a process whose Arrow thread pools are running can deadlock.
        with ProcessPoolExecutor(
            max_workers=workers, mp_context=multiprocessing.get_context("spawn")
        ) as pool:
            # At most two files per worker in flight: results of fast workers must not pile up in memory
            # while the writer catches up.
            pending: deque = deque()
            for job in jobs:
                pending.append(pool.submit(_convert_file, job))
                if len(pending) >= 2 * workers:
                    _write_result(pending.popleft().result(), writer, stats, progress)
            while pending:
                _write_result(pending.popleft().result(), writer, stats, progress)
    return stats
