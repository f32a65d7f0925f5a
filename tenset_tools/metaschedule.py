"""MetaSchedule ``JSONDatabase`` work dirs → the dataset schema.

A work dir holds ``database_workload.json`` (one tuned module per line) and ``database_tuning_record.json``
(one measured candidate per line: ``[workload index, [trace, run_secs, target, args_info]]``). Both are
read line by line with ``Workload.from_json`` / ``TuningRecord.from_json``, so a corrupt line is counted,
reported with its file and line number and skipped (loading the whole database in C++ aborts on it).

Per record: the per-store kernel feature rows of the replayed candidate and their pooled vector (one
``TuneContext`` per workload and target, candidates in batches), the trace-sequence encoding of the stored
trace JSON, the FLOPs of the task's TIR and the hardware vector of the record's target. MetaSchedule
stores failed builds and failed runs alike with ``run_secs = [1e10]``; such records are invalid with
``error_kind = "measure_error"``.

A collector may put a sidecar ``tenset_network.json`` next to the database (:class:`Sidecar`) that
names the network the tasks were extracted from and each task's weight (occurrences in the network).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import tvm
import tvm_ffi
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.utils import shash2hex

from .ansor.records import LoadStats
from .atomic import atomic_write_text
from .features import (
    HW_FEATURE_NAMES,
    KernelFeatureExtractor,
    encode_trace,
    hardware_features,
    pool_per_store,
    target_id,
)
from .features.context import feature_context
from .features.hardware import usable_core_count
from .flops import estimate_flops
from .schema import DatasetWriter, records_to_table

__all__ = [
    "RECORD_FILE",
    "SIDECAR_FILE",
    "WORKLOAD_FILE",
    "DatabaseTask",
    "Sidecar",
    "convert_databases",
    "database_batches",
    "database_target_ids",
    "databases_under",
    "find_databases",
    "has_records",
    "iter_database_records",
    "op_kind_of",
    "read_sidecar",
    "sidecar_network",
    "task_id_of_mod",
    "write_sidecar",
]

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
SIDECAR_FILE = "tenset_network.json"

#: What MetaSchedule records as the run time of a failed build or run (seconds).
FAILURE_MARKER_SECONDS = 1e10
#: Run times from here up are failures: no real measurement is this slow (seconds).
FAILED_RUN_SECONDS = 1e9


def mean_run_seconds(run_secs) -> float:
    """Mean of a record's or runner result's run times in seconds; ``inf`` when it was not measured or
    failed (MetaSchedule's 1e10-second marker, or a non-positive time)."""
    seconds = [float(s) for s in run_secs] if run_secs is not None else []
    if seconds and all(math.isfinite(s) and 0.0 < s < FAILED_RUN_SECONDS for s in seconds):
        return sum(seconds) / len(seconds)
    return math.inf


def database_target_ids(work_dir: str | os.PathLike) -> set[str]:
    """The target ids (:func:`~tenset_tools.features.target_id`) of the records in ``work_dir``, read from
    its record file as it stands, without loading the database or taking its lock; a line that does not
    parse (one being written) is left out."""
    path = Path(work_dir) / RECORD_FILE
    if not path.is_file():
        return set()
    targets = set()
    with open(path, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            try:
                targets.add(json.dumps(json.loads(line)[1][2], sort_keys=True))
            except (ValueError, IndexError, KeyError, TypeError):
                continue
    return {target_id(tvm.target.Target(json.loads(target))) for target in targets}


def find_databases(path: str | os.PathLike) -> list[Path]:
    """The MetaSchedule work dirs at or under ``path`` (a work dir, one of its two files, or a tree of
    work dirs), sorted; ``[]`` when there is none."""
    path = Path(path)
    if path.is_file():
        path = path.parent if path.name in (WORKLOAD_FILE, RECORD_FILE) else None
        return [path] if path is not None and _is_database(path) else []
    if _is_database(path):
        return [path]
    if not path.is_dir():
        return []
    return sorted(p.parent for p in path.rglob(RECORD_FILE) if _is_database(p.parent))


def databases_under(sources: Sequence[str | os.PathLike]) -> list[Path]:
    """The MetaSchedule work dirs at or under every path of ``sources`` (:func:`find_databases`), in
    order; raises ``FileNotFoundError`` naming the first path that holds none."""
    work_dirs = []
    for source in sources:
        found = find_databases(source)
        if not found:
            raise FileNotFoundError(f"{source}: no MetaSchedule database ({WORKLOAD_FILE} + {RECORD_FILE})")
        work_dirs += found
    return work_dirs


def _is_database(work_dir: Path) -> bool:
    return (work_dir / WORKLOAD_FILE).is_file() and (work_dir / RECORD_FILE).is_file()


def has_records(work_dir: str | os.PathLike) -> bool:
    """Whether ``work_dir`` holds at least one tuning record (a record file that is not empty)."""
    path = Path(work_dir) / RECORD_FILE
    return path.is_file() and path.stat().st_size > 0


def task_id_of_mod(mod: tvm.IRModule) -> str:
    """Stable task id of a tuned module: 16 hex digits of the MD5 of its structural hash (the hash
    MetaSchedule keys its database with), so a task has the same id on every target."""
    return hashlib.md5(shash2hex(mod).encode()).hexdigest()[:16]


# Block-name fragments, first match wins. Relax legalises nn.Linear to a "matmul" block (weight
# transposed and folded), so dense layers are "matmul"; a grouped conv2d ("group_conv2d_*") is taken as
# depthwise (the only grouped convolution of the networks here).
_NAMED_KINDS = (
    ("depthwise", "depthwise_conv2d"),
    ("group_conv2d", "depthwise_conv2d"),
    ("conv2d", "conv2d"),
    ("conv", "conv"),
    ("batch_matmul", "batch_matmul"),
    ("matmul", "matmul"),
    ("dense", "dense"),
    ("softmax", "softmax"),
    ("layer_norm", "layer_norm"),
    ("pool", "pool"),
)


def op_kind_of(mod: tvm.IRModule) -> str:
    """Op kind of a task from the names of its TIR blocks.

    The fragments of ``_NAMED_KINDS`` are looked up in the block names (first match wins); a ``matmul``
    whose anchor block has more than two non-unit spatial axes is a ``batch_matmul``. Otherwise a task
    with a reduction block is ``reduce`` (mean, sum, variance), one without is ``elementwise`` (injective:
    element-wise arithmetic, reshape, transpose, broadcast); no block at all is ``unknown``.
    """
    func = mod["main"]
    names: list[str] = []
    tvm_ffi.structural_walk(func.body, [(tvm.s_tir.SBlock, lambda block: names.append(block.name_hint))])
    names = [name.lower() for name in names if name != "root"]
    anchor = tvm.s_tir.analysis.find_anchor_sblock(mod)
    for fragment, kind in _NAMED_KINDS:
        if any(fragment in name for name in names):
            if kind == "matmul" and anchor is not None and _non_unit_spatial_axes(anchor) > 2:
                return "batch_matmul"
            return kind
    if anchor is not None:
        return "reduce"
    return "elementwise" if names else "unknown"


def _non_unit_spatial_axes(block) -> int:
    spatial = [v for v in block.iter_vars if v.iter_type == tvm.tirx.IterVar.DataPar]
    return sum(1 for v in spatial if int(v.dom.extent) > 1)


@dataclass(frozen=True)
class Sidecar:
    """A work dir's sidecar: the network its tasks were extracted from and ``{task_id: (task name,
    weight)}`` of those tasks."""

    network: str
    tasks: dict[str, tuple[str, float]]

    @property
    def weights(self) -> dict[str, float]:
        """``{task_id: weight}``: how often the network calls each task."""
        return {task_id: weight for task_id, (_, weight) in self.tasks.items()}

    @property
    def names(self) -> dict[str, str]:
        """``{task_id: task name}``."""
        return {task_id: name for task_id, (name, _) in self.tasks.items()}


def write_sidecar(work_dir: str | os.PathLike, sidecar: Sidecar) -> None:
    """Write ``sidecar`` as the sidecar of ``work_dir``, replacing one there in one step (an interrupted
    write leaves the old one)."""
    content = {
        "network": sidecar.network,
        "tasks": {tid: {"name": name, "weight": weight} for tid, (name, weight) in sidecar.tasks.items()},
    }
    atomic_write_text(Path(work_dir) / SIDECAR_FILE, json.dumps(content, indent=1, sort_keys=True))


def read_sidecar(work_dir: str | os.PathLike) -> Sidecar | None:
    """The sidecar of ``work_dir``; ``None`` without one."""
    path = Path(work_dir) / SIDECAR_FILE
    if not path.is_file():
        return None
    content = json.loads(path.read_text())
    tasks = {tid: (t["name"], float(t["weight"])) for tid, t in content["tasks"].items()}
    return Sidecar(content["network"], tasks)


def sidecar_network(work_dir: str | os.PathLike) -> str | None:
    """The network ``work_dir``'s sidecar names; ``None`` without a sidecar."""
    sidecar = read_sidecar(work_dir)
    return sidecar.network if sidecar is not None else None


@dataclass
class DatabaseTask:
    """What every record of one workload line shares: the workload, its task id, op kind and FLOPs."""

    workload: ms.database.Workload
    task_id: str
    op_kind: str
    flops: float


@dataclass
class _Pending:
    """A record parsed from its line, waiting for its batch's feature extraction."""

    record: ms.database.TuningRecord
    trace_json: list
    line_no: int


def _json_lines(path: Path, stats: LoadStats) -> Iterator[tuple[int, str]]:
    with open(path, encoding="utf-8", errors="replace") as lines:
        for line_no, line in enumerate(lines, start=1):
            stats.lines += 1
            if line.strip():
                yield line_no, line
            else:
                stats.skipped_lines += 1


def _read_workloads(path: Path, stats: LoadStats) -> list[DatabaseTask | None]:
    """Every workload line in file order (the index records refer to); ``None`` for a corrupt line."""
    tasks: list[DatabaseTask | None] = []
    for line_no, line in _json_lines(path, stats):
        try:
            workload = ms.database.Workload.from_json(json.loads(line))
            mod = workload.mod
            tasks.append(DatabaseTask(workload, task_id_of_mod(mod), op_kind_of(mod), estimate_flops(mod)))
        except Exception as error:  # JSON, FFI and TVM errors alike: the line is unusable
            stats.add_corrupt(str(path), line_no, f"unreadable workload ({_short(error)})")
            tasks.append(None)
    return tasks


def _short(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[-1] if text else ''}"[:200]


def iter_database_records(
    work_dir: str | os.PathLike, stats: LoadStats
) -> Iterator[tuple[DatabaseTask, ms.database.TuningRecord, list, int]]:
    """Stream ``(task, tuning record, trace JSON, line number)`` from a work dir, skipping corrupt lines
    (counted and reported in ``stats``)."""
    work_dir = Path(work_dir)
    tasks = _read_workloads(work_dir / WORKLOAD_FILE, stats)
    record_path = work_dir / RECORD_FILE
    stats.files += 1
    for line_no, line in _json_lines(record_path, stats):
        try:
            index, entry = json.loads(line)
            task = tasks[index]
            if task is None:
                raise ValueError(f"its workload (line {index + 1} of {WORKLOAD_FILE}) is unreadable")
            record = ms.database.TuningRecord.from_json(entry, task.workload)
            trace_json = entry[0]
        except Exception as error:  # JSON, structure, FFI and TVM errors alike: the line is unusable
            stats.add_corrupt(str(record_path), line_no, _short(error))
            continue
        yield task, record, trace_json, line_no


class _Converter:
    """Turns parsed records into schema record dicts, batching the feature extraction per workload and
    target (one ``TuneContext`` each, kept for the whole conversion: a database holds few of them)."""

    def __init__(self, num_threads: int | None) -> None:
        self.num_threads = num_threads or usable_core_count()
        self.extractor = KernelFeatureExtractor()
        self._contexts: dict[tuple[str, str], ms.TuneContext] = {}
        self._hardware: dict[str, tuple[str, list[float]]] = {}

    def _context(self, task: DatabaseTask, target: tvm.target.Target) -> ms.TuneContext:
        key = (task.task_id, str(target))
        if key not in self._contexts:
            self._contexts[key] = feature_context(task.workload.mod, target, self.num_threads, task.task_id)
        return self._contexts[key]

    def _target(self, target: tvm.target.Target) -> tuple[str, list[float]]:
        key = str(target)
        if key not in self._hardware:
            self._hardware[key] = (target_id(target), hardware_features(target).tolist())
        return self._hardware[key]

    def convert(
        self,
        task: DatabaseTask,
        batch: list[_Pending],
        source: str,
        network: str | None,
        weights: dict[str, float],
        stats: LoadStats,
    ) -> list[dict]:
        target = batch[0].record.target
        candidates, kept = [], []
        for pending in batch:
            try:
                candidates.append(pending.record.as_measure_candidate())
                kept.append(pending)
            except Exception as error:  # the trace does not replay on its workload
                stats.add_corrupt(source, pending.line_no, f"trace replay failed ({_short(error)})")
        if not kept:
            return []
        stores = self.extractor.per_store(self._context(task, target), candidates)
        features = pool_per_store(stores, self.extractor.per_store_width)
        tid, hw = self._target(target)
        records = []
        for pending, kernel, store_rows in zip(kept, features, stores, strict=True):
            valid, error_kind, latencies, latency = _measurement(pending.record.run_secs)
            records.append(
                {
                    "task_id": task.task_id,
                    "workload_key": _workload_key(task, pending.record),
                    "op_kind": task.op_kind,
                    "flops": task.flops,
                    "target_id": tid,
                    "hw_features": hw,
                    "candidate_kind": "ms_trace",
                    "candidate": json.dumps(pending.trace_json, separators=(",", ":")),
                    "kernel_features": kernel,
                    "store_features": store_rows,
                    "sequence_features": encode_trace(pending.trace_json),
                    "hidden_features": None,
                    "valid": valid,
                    "error_kind": error_kind,
                    "latencies": latencies,
                    "latency": latency,
                    "source": source,
                    "network": network,
                    "weight": weights.get(task.task_id, 1.0),
                }
            )
        stats.records += len(records)
        return records


def _workload_key(task: DatabaseTask, record: ms.database.TuningRecord) -> str:
    """``[structural hash, [dtype, shape] of every argument]``: like TenSet's keys, the shapes readable."""
    args = [[str(arg.dtype), [int(d) for d in arg.shape]] for arg in record.args_info]
    return json.dumps([shash2hex(task.workload.mod), *args], separators=(",", ":"))


def _measurement(run_secs) -> tuple[bool, str | None, list[float], float]:
    if run_secs is None or not len(run_secs):
        return False, "not_measured", [], math.nan
    mean = mean_run_seconds(run_secs)
    if math.isfinite(mean):
        return True, None, [float(s) for s in run_secs], mean
    return False, "measure_error", [], math.nan


def database_batches(
    work_dir: str | os.PathLike,
    stats: LoadStats,
    batch_size: int = 256,
    num_threads: int | None = None,
) -> Iterator[list[dict]]:
    """Stream schema record dicts of one work dir, in batches of at most ``batch_size`` records of one
    workload and target. Memory: at most ``batch_size`` parsed records per (workload, target) pair."""
    work_dir = Path(work_dir)
    sidecar = read_sidecar(work_dir)
    network, weights = (sidecar.network, sidecar.weights) if sidecar is not None else (None, {})
    source = str(work_dir / RECORD_FILE)
    converter = _Converter(num_threads)
    pending: dict[tuple[str, str], tuple[DatabaseTask, list[_Pending]]] = {}
    for task, record, trace_json, line_no in iter_database_records(work_dir, stats):
        key = (task.task_id, str(record.target))
        _, batch = pending.setdefault(key, (task, []))
        batch.append(_Pending(record, trace_json, line_no))
        if len(batch) >= batch_size:
            del pending[key]
            yield converter.convert(task, batch, source, network, weights, stats)
    for task, batch in pending.values():
        yield converter.convert(task, batch, source, network, weights, stats)


def convert_databases(
    sources: str | os.PathLike | Iterable[str | os.PathLike],
    out_path: str | os.PathLike,
    batch_size: int = 256,
    num_threads: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> LoadStats:
    """Convert every MetaSchedule work dir found at ``sources`` (see :func:`find_databases`) to one
    Parquet dataset file; returns the load statistics. Raises ``FileNotFoundError`` when a source holds no
    database. ``progress`` is called with the number of records written after each batch."""
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    work_dirs = databases_under(sources)
    stats = LoadStats()
    with DatasetWriter(out_path, list(HW_FEATURE_NAMES)) as writer:
        for work_dir in work_dirs:
            for records in database_batches(work_dir, stats, batch_size, num_threads):
                if records:
                    writer.write(records_to_table(records, list(HW_FEATURE_NAMES)))
                    if progress is not None:
                        progress(len(records))
    return stats
