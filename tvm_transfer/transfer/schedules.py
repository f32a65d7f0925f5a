"""The best-schedule database of a transfer pack: the top records of every task on every target, keyed by
(workload structural hash, target id).

MetaSchedule's own database ignores the target: a record measured on one CPU is handed out for any other.
Here the target is part of the key, and the lookups say what a record may be used for:

* :meth:`ScheduleDatabase.exact` returns only records measured on the *same* target id as the task's
  target (``llvm/MCPU/CORES``, :func:`tenset_tools.features.target_id`): those may be applied as final;
* :meth:`ScheduleDatabase.other_targets` returns the same workload's records measured elsewhere: candidates
  to measure, never final;
* :meth:`ScheduleDatabase.similar` returns the best records of similar tasks (same op kind and block
  structure, nearest shapes first) for seeding a search.

On disk (a folder, ``schedules/`` of a pack), in MetaSchedule's own JSON formats (nothing is unpickled):

``index.jsonl``
    one line per kept record: ``workload`` (structural hash, 16 hex digits), ``target_id``, ``rank`` (0 is
    the task's fastest on that target), ``seconds`` (mean measured latency), ``run_secs``, ``op_kind``,
    ``flops`` (per call), ``args`` (``[dtype, shape]`` of every argument), ``signature`` (the top-level
    blocks as ``[name, iteration kinds]``), ``networks`` and ``tasks`` (the names it was tuned under),
    ``dir`` (the target's folder) and ``line`` (0-based line of the record in that folder's record file).
``database_workload.json.gz`` and ``<target folder>/database_tuning_record.json.gz``
    the lines of a MetaSchedule ``JSONDatabase``, gzip-compressed: every kept workload once (a workload's
    JSON is pretty-printed TVM IR, and compresses about fifteen-fold), and per target its kept records,
    whose workload indices point into that one file. A version-2 pack keeps a workload file in each target
    folder instead; both layouts are read. :meth:`ScheduleDatabase.source_records` reads the records as
    copula sources for seeding a search.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import tvm
import tvm_ffi
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.utils import shash2hex
from tvm.s_tir.schedule import Schedule, Trace

from tenset_tools.ansor.records import LoadStats
from tenset_tools.atomic import atomic_write_text
from tenset_tools.features import target_id
from tenset_tools.flops import estimate_flops
from tenset_tools.metaschedule import (
    RECORD_FILE,
    WORKLOAD_FILE,
    databases_under,
    iter_database_records,
    mean_run_seconds,
    op_kind_of,
    read_sidecar,
)
from tvm_transfer.common.errors import failure_line
from tvm_transfer.search_strategy.copula.sources import SourceRecord, task_descriptor
from tvm_transfer.search_strategy.replay import block_signature

log = logging.getLogger(__name__)

__all__ = ["INDEX_FILE", "PackRecord", "ScheduleDatabase", "ScheduleEntry", "target_folder"]

INDEX_FILE = "index.jsonl"
#: Records kept per (workload, target id) unless told otherwise.
DEFAULT_TOP_K = 5
#: The per-target files: a ``JSONDatabase``'s two files, gzip-compressed.
PACKED_WORKLOADS, PACKED_RECORDS = WORKLOAD_FILE + ".gz", RECORD_FILE + ".gz"


def target_folder(tid: str) -> str:
    """The folder name of a target id's records (``llvm/znver4/2`` -> ``llvm-znver4-2``)."""
    return "".join(c if c.isalnum() or c in "._" else "-" for c in tid)


@dataclass(frozen=True)
class ScheduleEntry:
    """One kept record, as indexed (see the module docstring for the fields; ``seconds`` in seconds)."""

    workload: str
    target_id: str
    rank: int
    seconds: float
    run_secs: tuple[float, ...]
    op_kind: str
    flops: float
    args: tuple
    signature: tuple
    networks: tuple[str, ...]
    tasks: tuple[str, ...]
    dir: str
    line: int

    def as_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict, where: str) -> ScheduleEntry:
        """Parse an index line; a missing or mistyped field raises ``ValueError`` naming it and ``where``."""
        try:
            entry = cls(
                workload=str(data["workload"]),
                target_id=str(data["target_id"]),
                rank=int(data["rank"]),
                seconds=float(data["seconds"]),
                run_secs=tuple(float(s) for s in data["run_secs"]),
                op_kind=str(data["op_kind"]),
                flops=float(data["flops"]),
                args=_frozen(data["args"]),
                signature=_frozen(data["signature"]),
                networks=tuple(str(n) for n in data["networks"]),
                tasks=tuple(str(t) for t in data["tasks"]),
                dir=str(data["dir"]),
                line=int(data["line"]),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(
                f"{where}: not a schedule index entry ({type(error).__name__}: {error})"
            ) from None
        if not (math.isfinite(entry.seconds) and entry.seconds > 0):
            raise ValueError(f"{where}: seconds must be a positive latency, got {entry.seconds}")
        if os.sep in entry.dir or entry.dir.startswith("."):
            raise ValueError(f"{where}: dir {entry.dir!r} is not a folder name of the database")
        return entry


def _frozen(value):
    """Lists (from JSON) as tuples, recursively, so entries hash and compare by value."""
    return tuple(_frozen(v) for v in value) if isinstance(value, (list, tuple)) else value


@dataclass(frozen=True)
class PackRecord:
    """A record found by a lookup: its index ``entry`` and how it relates to the task looked up
    (``"exact"``: same workload and target; ``"other-target"``: same workload, measured on another target;
    ``"similar"``: another workload of the same kind and block structure)."""

    entry: ScheduleEntry
    relation: str
    record_json: tuple
    workload_json: tuple

    @property
    def seconds(self) -> float:
        """Mean measured latency on the entry's target, in seconds."""
        return self.entry.seconds

    def tuning_record(
        self, workload: ms.database.Workload, target: tvm.target.Target | None = None
    ) -> ms.database.TuningRecord:
        """The record as a MetaSchedule ``TuningRecord`` of ``workload`` (a workload of the same module, e.g.
        committed to the caller's database), on ``target`` (default: the target it was measured on). Raises
        ``ValueError`` when its trace does not replay on the workload's module."""
        record = self._parsed(workload)
        return ms.database.TuningRecord(
            trace=record.trace,
            workload=workload,
            run_secs=list(self.entry.run_secs),
            target=target if target is not None else record.target,
            args_info=record.args_info,
        )

    def trace(self, workload: ms.database.Workload) -> Trace:
        """The record's schedule trace, read against ``workload``'s module. Raises ``ValueError`` when it
        does not replay there."""
        return self._parsed(workload).trace

    def _parsed(self, workload: ms.database.Workload) -> ms.database.TuningRecord:
        record_json = list(self.record_json)
        try:
            renaming = _block_renaming(self.source_workload().mod, workload.mod)
            record_json = _renamed_blocks(record_json, renaming)
            return ms.database.TuningRecord.from_json(record_json, workload)
        except Exception as error:  # TVM raises its own error types for a trace that does not apply
            raise ValueError(
                f"the pack's trace does not replay ({_replay_error(record_json, workload.mod, error)})"
            ) from None

    def source_workload(self) -> ms.database.Workload:
        """The workload the record was measured on (its own module: for a similar task, not the caller's)."""
        return ms.database.Workload.from_json(list(self.workload_json))


def _block_renaming(source: tvm.IRModule, mod: tvm.IRModule) -> dict[str, str]:
    """How a trace of ``source`` names ``mod``'s blocks: each name ``source`` declares paired with the one
    ``mod`` declares in its place; empty when nothing is to be renamed, or when the two are not structurally
    equal (nothing pairs, and a replay fails as it is). Relax names a fused task's blocks and buffers after
    its variables, so one workload has other names in each network it comes from. A name paired with two
    (a block and its output buffer, renamed apart) is left out."""
    if not tvm_ffi.structural_equal(source, mod):
        return {}
    pairs: dict[str, str] = {}
    ambiguous: set[str] = set()
    for old, new in zip(_declared_names(source), _declared_names(mod), strict=True):
        if pairs.setdefault(old, new) != new:
            ambiguous.add(old)
    pairs = {old: new for old, new in pairs.items() if old not in ambiguous}
    return {} if all(old == new for old, new in pairs.items()) else pairs


def _renamed_blocks(record_json: Sequence, renaming: dict[str, str]) -> list:
    """``record_json`` (a MetaSchedule tuning record's JSON) with its trace's block lookups renamed by
    ``renaming`` (:func:`_block_renaming`): a declared name, and one a step derived from it (``rfactor``
    appends ``_rf``, a cache stage names its block after the buffer), by its longest declared prefix."""
    if not renaming:
        return list(record_json)
    by_length = sorted(renaming, key=len, reverse=True)

    def rename(name: str) -> str:
        old = next((old for old in by_length if name.startswith(old)), None)
        return name if old is None else renaming[old] + name[len(old) :]

    (instructions, *decisions), *rest = record_json
    instructions = [
        (kind, inputs, (rename(attrs[0]), *attrs[1:]) if kind == "GetSBlock" else attrs, outputs)
        for kind, inputs, attrs, outputs in instructions
    ]
    return [(instructions, *decisions), *rest]


def _replay_error(record_json: Sequence, mod: tvm.IRModule, error: Exception) -> str:
    """What went wrong when ``record_json``'s trace was replayed on ``mod``: the replay once more, with the
    schedule error rendered (a tuning record's own replay says only ``(not rendered)``)."""
    try:
        Trace.apply_json_to_schedule(record_json[0], Schedule(mod, error_render_level="detail"))
    except Exception as detailed:  # the same failure, this time with TVM's description
        error = detailed
    return failure_line(str(error))


def _declared_names(mod: tvm.IRModule) -> list[str]:
    """The names ``mod``'s ``main`` declares, in an order two structurally equal modules share: its
    parameters (its buffers), then every block's name and the buffers it allocates."""
    func = mod["main"]
    names = [param.name for param in func.params]

    def declared(block) -> None:
        names.extend([block.name_hint, *(buffer.name for buffer in block.alloc_buffers)])

    tvm_ffi.structural_walk(func.body, [(tvm.s_tir.SBlock, declared)])
    return names


class ScheduleDatabase:
    """The best-schedule database under ``root`` (see the module docstring). Read with :meth:`read`,
    written with :meth:`build`."""

    def __init__(self, root: str | os.PathLike, entries: Sequence[ScheduleEntry]) -> None:
        self.root = Path(root)
        self.entries = list(entries)
        self._by_workload: dict[str, list[ScheduleEntry]] = {}
        for entry in self.entries:
            self._by_workload.setdefault(entry.workload, []).append(entry)
        self._lines: dict[tuple[str, str], list[str]] = {}
        # A version-2 pack has no shared workload file: each target folder holds its own.
        self._shared_workloads = (self.root / PACKED_WORKLOADS).is_file()

    # ---- reading ---------------------------------------------------------------------------------------
    @classmethod
    def read(cls, root: str | os.PathLike) -> ScheduleDatabase:
        """Read the index under ``root``; raises ``ValueError`` naming the first bad line."""
        root = Path(root)
        path = root / INDEX_FILE
        entries = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path} line {number}: not JSON ({error})") from None
            entries.append(ScheduleEntry.from_json(data, f"{path} line {number}"))
        return cls(root, entries)

    @property
    def targets(self) -> list[str]:
        """The target ids with records, sorted."""
        return sorted({e.target_id for e in self.entries})

    @property
    def networks(self) -> list[str]:
        """The networks the records were tuned for (as their work dirs' sidecars name them), sorted."""
        return sorted({n for e in self.entries for n in e.networks})

    @property
    def workload_count(self) -> int:
        """Number of distinct workloads."""
        return len(self._by_workload)

    def _raw_lines(self, folder: str, name: str) -> list[str]:
        """The lines of one of the packed files (read once, then cached)."""
        key = (folder, name)
        if key not in self._lines:
            with gzip.open(self.root / folder / name, "rt", encoding="utf-8") as file:
                self._lines[key] = file.read().splitlines()
        return self._lines[key]

    def _raw_line(self, folder: str, name: str, index: int) -> str:
        lines = self._raw_lines(folder, name)
        if not 0 <= index < len(lines):
            raise ValueError(f"{self.root / folder / name} has no line {index + 1}; rebuild the pack")
        return lines[index]

    def _line(self, folder: str, name: str, index: int) -> tuple:
        return _frozen(json.loads(self._raw_line(folder, name, index)))

    def _workload_folder(self, entry: ScheduleEntry) -> str:
        """The folder of the workload file ``entry``'s record points into."""
        return "" if self._shared_workloads else entry.dir

    def _record(self, entry: ScheduleEntry, relation: str) -> PackRecord:
        workload_index, record_json = self._line(entry.dir, PACKED_RECORDS, entry.line)
        workload_json = self._line(self._workload_folder(entry), PACKED_WORKLOADS, workload_index)
        return PackRecord(entry, relation, record_json, workload_json)

    # ---- lookups ---------------------------------------------------------------------------------------
    def _same_workload(self, mod: tvm.IRModule) -> list[ScheduleEntry]:
        entries = self._by_workload.get(shash2hex(mod), [])
        if not entries:
            return []
        # The structural hash is the key; structural equality (as MetaSchedule checks) confirms it.
        first = self._record(entries[0], "exact").source_workload()
        return entries if tvm_ffi.structural_equal(first.mod, mod) else []

    def exact(self, mod: tvm.IRModule, target: tvm.target.Target) -> list[PackRecord]:
        """The records of ``mod``'s workload measured on ``target``'s target id, fastest first: the only ones
        that may be applied as final."""
        tid = target_id(target)
        found = [e for e in self._same_workload(mod) if e.target_id == tid]
        return [self._record(e, "exact") for e in sorted(found, key=lambda e: e.seconds)]

    def other_targets(self, mod: tvm.IRModule, target: tvm.target.Target) -> list[PackRecord]:
        """The records of ``mod``'s workload measured on other target ids (by target, fastest first):
        candidates to measure on ``target``, never final."""
        tid = target_id(target)
        found = [e for e in self._same_workload(mod) if e.target_id != tid]
        found.sort(key=lambda e: (e.target_id, e.seconds))
        return [self._record(e, "other-target") for e in found]

    def similar(self, mod: tvm.IRModule, target: tvm.target.Target, limit: int = 8) -> list[PackRecord]:
        """At most ``limit`` records of *other* workloads with ``mod``'s op kind and block structure, for
        seeding: nearest shapes first (distance in log FLOPs, then in log argument sizes), records measured
        on ``target``'s id before those of other targets, each task's fastest first."""
        own = shash2hex(mod)
        kind, signature = op_kind_of(mod), _frozen(block_signature(mod))
        tid = target_id(target)
        flops = estimate_flops(mod)
        sizes = _arg_sizes(mod)
        found = [
            e for e in self.entries if e.workload != own and e.op_kind == kind and e.signature == signature
        ]

        def distance(entry: ScheduleEntry) -> tuple:
            shape = sum(abs(math.log(a / b)) for a, b in zip(_entry_sizes(entry), sizes, strict=False))
            return (_log_distance(entry.flops, flops), shape, entry.target_id != tid, entry.rank)

        found.sort(key=distance)
        return [self._record(e, "similar") for e in found[:limit]]

    def source_records(self, ranks: int | None = None) -> list[SourceRecord]:
        """The kept records as copula sources (:class:`~tvm_transfer.search_strategy.copula.SourceRecord`:
        design-space signature and decisions, mean latency in seconds, workload hash, descriptor on the
        target it was measured on), for seeding searches from the pack: the ``ranks`` fastest of every
        workload and target (``None``: all). The traces are read from their JSON, not replayed on their
        workloads: what the sampler proposes from them is replayed on the task it seeds. Records of a
        sampling instruction the encoding does not support are skipped (one warning counts them)."""
        workloads: dict[str, ms.database.Workload] = {}
        descriptors: dict[tuple[str, str], dict[str, float]] = {}
        sources, unsupported = [], []
        for entry in self.entries:
            if ranks is not None and entry.rank >= ranks:
                continue
            packed = self._record(entry, "source")
            trace_json, _run_secs, target_json = packed.record_json[:3]
            key = (entry.workload, entry.target_id)
            if key not in descriptors:
                if entry.workload not in workloads:
                    workloads[entry.workload] = packed.source_workload()
                target = tvm.target.Target(target_json)
                descriptors[key] = task_descriptor(workloads[entry.workload].mod, target)
            try:
                sources.append(
                    SourceRecord.from_trace_json(trace_json, entry.seconds, entry.workload, descriptors[key])
                )
            except ValueError as error:
                unsupported.append(f"{entry.workload}/{entry.rank}: {error}")
        if unsupported:
            log.warning("%d pack records do not seed searches (first: %s)", len(unsupported), unsupported[0])
        return sources

    # ---- writing ---------------------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        work_dirs: Iterable[str | os.PathLike],
        root: str | os.PathLike,
        top_k: int = DEFAULT_TOP_K,
        base: ScheduleDatabase | None = None,
    ) -> ScheduleDatabase:
        """Keep the ``top_k`` fastest valid records of every (workload, target id) found in the MetaSchedule
        work dirs at or under ``work_dirs``, and in the database ``base`` when given (extending it), and
        write them under ``root`` (a new folder). Returns the database. Raises ``FileNotFoundError`` for a
        path without a database and ``ValueError`` for a bad ``top_k``."""
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k}")
        root = Path(root)
        groups: dict[tuple[str, str], _Group] = {}
        if base is not None:
            base._add_to(groups)
        stats = LoadStats()
        # A record joining a group made from another work dir is stored in the names of the group's module.
        renamings: dict[tuple[Path, int], dict[str, str]] = {}
        for work_dir in databases_under(list(work_dirs)):
            sidecar = read_sidecar(work_dir)
            network, names = (sidecar.network, sidecar.names) if sidecar is not None else (None, {})
            # Records are kept as their database lines: TVM's Python ``as_json`` cannot write every trace
            # (an index map of a layout rewrite), while the lines MetaSchedule wrote are exact.
            workload_lines = (work_dir / WORKLOAD_FILE).read_text(encoding="utf-8").splitlines()
            record_lines = (work_dir / RECORD_FILE).read_text(encoding="utf-8").splitlines()
            for task, record, _trace, line_no in iter_database_records(work_dir, stats):
                seconds = mean_run_seconds(record.run_secs)
                if not math.isfinite(seconds):
                    continue
                index, entry = json.loads(record_lines[line_no - 1])
                key = (shash2hex(task.workload.mod), target_id(record.target))
                group = groups.get(key)
                if group is None:
                    group = groups[key] = _Group(
                        workload_lines[index], task.workload, task.op_kind, task.flops
                    )
                elif group.workload is not task.workload:  # kept with another network's module
                    if (work_dir, index) not in renamings:
                        renamings[work_dir, index] = _block_renaming(task.workload.mod, group.workload.mod)
                    entry = _renamed_blocks(entry, renamings[work_dir, index])
                group.add(seconds, record, entry, [network], [names.get(task.task_id)])
        entries: list[ScheduleEntry] = []
        workloads: dict[str, int] = {}  # workload line -> its index in the shared file
        records_of: dict[str, list[str]] = {}  # target folder -> its record lines
        for (workload_hash, tid), group in sorted(groups.items()):
            folder = target_folder(tid)
            records = records_of.setdefault(folder, [])
            workload_index = workloads.setdefault(group.workload_line.strip(), len(workloads))
            signature = _frozen(block_signature(group.workload.mod))
            args = [[str(a.dtype), [int(d) for d in a.shape]] for a in group.kept(1)[0][1].args_info]
            for rank, (seconds, record, entry) in enumerate(group.kept(top_k)):
                entries.append(
                    ScheduleEntry(
                        workload=workload_hash,
                        target_id=tid,
                        rank=rank,
                        seconds=seconds,
                        run_secs=tuple(float(s) for s in record.run_secs),
                        op_kind=group.op_kind,
                        flops=group.flops,
                        args=_frozen(args),
                        signature=signature,
                        networks=tuple(sorted(group.networks)),
                        tasks=tuple(sorted(group.names)),
                        dir=folder,
                        line=len(records),
                    )
                )
                records.append(json.dumps([workload_index, entry], separators=(",", ":")))
        root.mkdir(parents=True)
        _write_gzip(root / PACKED_WORKLOADS, "".join(w + "\n" for w in workloads))
        for folder, records in records_of.items():
            (root / folder).mkdir()
            _write_gzip(root / folder / PACKED_RECORDS, "".join(r + "\n" for r in records))
        index = "".join(json.dumps(e.as_json(), separators=(",", ":")) + "\n" for e in entries)
        atomic_write_text(root / INDEX_FILE, index)
        return cls(root, entries)

    def _add_to(self, groups: dict[tuple[str, str], _Group]) -> None:
        """Add every kept record of this database to the ``groups`` of a database being built, as the lines
        it was packed from. A record whose trace no longer replays is skipped with a warning."""
        for entry in self.entries:
            index, record_json = json.loads(self._raw_line(entry.dir, PACKED_RECORDS, entry.line))
            workload_line = self._raw_line(self._workload_folder(entry), PACKED_WORKLOADS, index)
            group = groups.get((entry.workload, entry.target_id))
            workload = group.workload if group else ms.database.Workload.from_json(json.loads(workload_line))
            try:
                record = ms.database.TuningRecord.from_json(record_json, workload)
            except Exception as error:  # TVM raises its own error types for a trace that does not apply
                log.warning("base record %s/%d skipped: %s", entry.workload, entry.rank, error)
                continue
            if group is None:  # only once a record replays: a group is never empty
                group = _Group(workload_line, workload, entry.op_kind, entry.flops)
                groups[entry.workload, entry.target_id] = group
            group.add(entry.seconds, record, record_json, entry.networks, entry.tasks)


def _write_gzip(path: Path, text: str) -> None:
    """Write ``text`` gzip-compressed, without a timestamp, so the same content gives the same bytes."""
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as file:
        file.write(text.encode("utf-8"))


class _Group:
    """The valid records of one (workload, target id) while building."""

    def __init__(
        self, workload_line: str, workload: ms.database.Workload, op_kind: str, flops: float
    ) -> None:
        self.workload_line, self.workload, self.op_kind, self.flops = workload_line, workload, op_kind, flops
        self.records: list[tuple[float, ms.database.TuningRecord, list]] = []
        self.networks: set[str] = set()
        self.names: set[str] = set()

    def add(
        self,
        seconds: float,
        record,
        entry: list,
        networks: Iterable[str | None],
        names: Iterable[str | None],
    ) -> None:
        self.records.append((seconds, record, entry))
        self.networks.update(n for n in networks if n)
        self.names.update(n for n in names if n)

    def kept(self, top_k: int) -> list[tuple[float, ms.database.TuningRecord, list]]:
        # Identical traces measured twice (a resumed run, two work dirs) count once, at their faster time.
        unique: dict[str, tuple[float, ms.database.TuningRecord, list]] = {}
        for seconds, record, entry in sorted(self.records, key=lambda item: item[0]):
            unique.setdefault(json.dumps(entry[0]), (seconds, record, entry))
        return list(unique.values())[:top_k]


def _log_distance(a: float, b: float) -> float:
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.inf
    return abs(math.log(max(a, 1.0) / max(b, 1.0)))


def _arg_sizes(mod: tvm.IRModule) -> list[float]:
    args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    return [float(max(math.prod(int(d) for d in a.shape), 1)) for a in args]


def _entry_sizes(entry: ScheduleEntry) -> list[float]:
    return [float(max(math.prod(shape), 1)) for _dtype, shape in entry.args]
