"""Streaming reader of Ansor (``tvm.auto_scheduler``) / TenSet measure-record logs, without TVM.

One JSON object per line: ``{"i": [task, state], "r": [costs, error_no, all_cost, timestamp], "v": ver}``
with ``task = [workload_key, target, hardware_params, target_host, layout_rewrite_option,
task_input_names]``; logs v0.2 have the first 2 task fields, v0.3 the first 3, v0.5 the first 5, v0.6 all 6.
``#`` comment lines and blank lines are skipped. A line that does not parse or has the wrong structure is
counted in :class:`LoadStats`, logged with its file and line number, and skipped: it never aborts a file.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from .steps import STEP_KINDS

__all__ = [
    "HARDWARE_PARAM_NAMES",
    "AnsorRecord",
    "CorruptLine",
    "LoadStats",
    "iter_file",
    "iter_records",
    "list_record_files",
]

logger = logging.getLogger(__name__)

HARDWARE_PARAM_NAMES = (
    "num_cores",
    "vector_unit_bytes",
    "cache_line_bytes",
    "max_shared_memory_per_block",
    "max_local_memory_per_block",
    "max_threads_per_block",
    "max_vthread_extent",
    "warp_size",
)

STEP_KINDS_SET = frozenset(STEP_KINDS)

# Details of at most this many corrupt lines are kept; the count is always exact (bounded memory).
MAX_CORRUPT_DETAILS = 1000


class AnsorRecord(NamedTuple):
    """One measured schedule. Costs are seconds (one per repeat); ``error_no`` 0 means success.

    ``hardware_params`` is ``None`` for logs older than v0.3, ``target_host``/``layout_rewrite_option``
    are ``None`` before v0.5 and ``task_input_names`` before v0.6. ``folder`` is the hardware folder of a
    TenSet tree (``measure_records/<folder>/<task>.json``), else ``""``. ``steps`` are the decoded JSON
    steps, each a list whose first element is its kind (see :data:`STEP_KINDS`); ``line`` is the
    original JSON line (stripped), which old TVM's ``load_record_from_string`` can replay.
    """

    workload_key: str
    target: str
    hardware_params: tuple[int, ...] | None
    target_host: str | None
    layout_rewrite_option: int | None
    task_input_names: tuple[str, ...] | None
    steps: list
    costs: list[float]
    error_no: int
    all_cost: float
    timestamp: float
    version: str
    path: str
    line_no: int
    folder: str
    line: str


@dataclass(frozen=True)
class CorruptLine:
    path: str
    line_no: int
    reason: str


@dataclass
class LoadStats:
    """Counts of a load; ``corrupt_lines`` holds the first :data:`MAX_CORRUPT_DETAILS` corrupt lines."""

    files: int = 0
    lines: int = 0
    records: int = 0
    skipped_lines: int = 0
    corrupt: int = 0
    corrupt_lines: list[CorruptLine] = field(default_factory=list)

    def add_corrupt(self, path: str, line_no: int, reason: str) -> None:
        self.corrupt += 1
        if len(self.corrupt_lines) < MAX_CORRUPT_DETAILS:
            self.corrupt_lines.append(CorruptLine(path, line_no, reason))
        logger.warning("%s:%d: skipped corrupt record (%s)", path, line_no, reason)

    def merge(self, other: LoadStats) -> None:
        self.files += other.files
        self.lines += other.lines
        self.records += other.records
        self.skipped_lines += other.skipped_lines
        self.corrupt += other.corrupt
        room = MAX_CORRUPT_DETAILS - len(self.corrupt_lines)
        self.corrupt_lines.extend(other.corrupt_lines[:room])

    def summary(self) -> str:
        text = (
            f"{self.records} records from {self.files} file(s); {self.corrupt} corrupt line(s) skipped, "
            f"{self.skipped_lines} comment/blank line(s)"
        )
        shown = "; ".join(f"{c.path}:{c.line_no} ({c.reason})" for c in self.corrupt_lines[:5])
        return f"{text}; first corrupt: {shown}" if shown else text


def _optional(task: list, index: int):
    return task[index] if len(task) > index else None


def _parse(line: str, path: str, line_no: int, folder: str) -> AnsorRecord:
    """Build a record from a line; raises on bad JSON or a wrong structure (the caller reports it)."""
    obj = json.loads(line)
    task, state = obj["i"]
    result = obj["r"]
    workload_key, target = task[0], task[1]
    if not isinstance(workload_key, str) or not isinstance(target, str):
        raise TypeError("workload key and target must be strings")
    hardware = _optional(task, 2)
    if hardware is not None:
        if len(hardware) != len(HARDWARE_PARAM_NAMES):
            raise ValueError(f"{len(hardware)} hardware params, expected {len(HARDWARE_PARAM_NAMES)}")
        if not all(type(h) is int or type(h) is float for h in hardware):
            raise TypeError(f"hardware params {hardware} are not all numbers")
    names = _optional(task, 5)
    steps = state[1]
    costs = result[0]
    if not isinstance(steps, list) or not isinstance(costs, list):
        raise TypeError("steps and costs must be lists")
    kinds = STEP_KINDS_SET
    for step in steps:
        if step[0] not in kinds:
            raise ValueError(f"unknown step {str(step)[:40]}")
    for cost in costs:
        if type(cost) is not float and type(cost) is not int:
            raise TypeError(f"cost {cost!r} is not a number")
    return AnsorRecord(
        workload_key,
        target,
        tuple(hardware) if hardware is not None else None,
        _optional(task, 3),
        _optional(task, 4),
        tuple(names) if names is not None else None,
        steps,
        costs,
        int(result[1]),
        float(result[2]),
        float(result[3]),
        str(obj.get("v", "")),
        path,
        line_no,
        folder,
        line,
    )


def iter_file(
    path: str | os.PathLike, stats: LoadStats | None = None, folder: str = ""
) -> Iterator[AnsorRecord]:
    """Yield the records of one log file in line order, skipping (and counting) corrupt lines."""
    stats = stats if stats is not None else LoadStats()
    path = os.fspath(path)
    stats.files += 1
    # errors="replace": a corrupt byte sequence must only spoil its own line, not abort the file.
    with open(path, encoding="utf-8", errors="replace") as lines:
        for line_no, line in enumerate(lines, start=1):
            stats.lines += 1
            stripped = line.strip()
            if not stripped or stripped[0] == "#":
                stats.skipped_lines += 1
                continue
            try:
                record = _parse(stripped, path, line_no, folder)
            except (ValueError, TypeError, KeyError, IndexError, RecursionError) as error:
                stats.add_corrupt(path, line_no, f"{type(error).__name__}: {error}"[:200])
                continue
            stats.records += 1
            yield record


def list_record_files(source: str | os.PathLike) -> list[tuple[Path, str]]:
    """``(file, hardware folder)`` pairs of a file or a directory tree, in a stable (sorted) order.

    In a tree, a file's hardware folder is its parent directory's name when the file lies below a
    sub-directory of ``source`` (``measure_records/<hardware>/<task>.json``); files directly in
    ``source`` get ``""`` (their target string decides the target id).
    """
    root = Path(source)
    if root.is_file():
        return [(root, "")]
    if not root.is_dir():
        raise FileNotFoundError(f"no such record file or directory: {root}")
    files = sorted(p for p in root.rglob("*.json") if p.is_file())
    return [(p, p.parent.name if p.parent != root else "") for p in files]


def iter_records(
    sources: str | os.PathLike | Iterable[str | os.PathLike], stats: LoadStats | None = None
) -> Iterator[AnsorRecord]:
    """Yield the records of files and/or directory trees, one file at a time (bounded memory)."""
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    for source in sources:
        for path, folder in list_record_files(source):
            yield from iter_file(path, stats, folder)
