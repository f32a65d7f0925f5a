"""Source records for transfer: measured candidates read from earlier MetaSchedule tuning work dirs.

A source record is one measured candidate (its design space's signature and its decisions) with its task's
descriptor. The descriptor is derived from the task itself, so any work dir works without knowing how it
was made: ``log2`` of every dimension of the entry function's tensor arguments (``a<i>_d<j>``; e.g. a
matmul gives M, K, K, N, M, N; duplicates are dropped by the copula) and the target's hardware features
(``hw_<name>``, :func:`tvm_transfer.target.hardware_features`).
Tasks whose argument ranks differ cannot share columns; :func:`load_sources` keeps what matches a target.

:func:`pretrain_on_sources` trains a cost model on the same work dirs, so that the evolution that follows
the copula's first batch is guided by the sources from its first step (TenSet-style pretraining).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import tvm
from tvm.s_tir import meta_schedule as ms

from tenset_tools.ansor.records import LoadStats
from tenset_tools.metaschedule import databases_under, iter_database_records, mean_run_seconds
from tvm_transfer.cost_model.warm_start import warm_start
from tvm_transfer.search_strategy.copula.encoding import json_decisions, json_signature
from tvm_transfer.target import HW_FEATURE_NAMES, UnsupportedTargetError, hardware_features

log = logging.getLogger(__name__)

__all__ = ["SourceRecord", "load_sources", "pretrain_on_sources", "task_descriptor"]


def task_descriptor(mod: tvm.IRModule, target: tvm.target.Target | None = None) -> dict[str, float]:
    """Descriptor of a task: log2 of its tensor argument dimensions and, if given, hardware features."""
    infos = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    out: dict[str, float] = {}
    for i, info in enumerate(infos):
        for j, dim in enumerate(info.shape):
            out[f"a{i}_d{j}"] = math.log2(max(int(dim), 1))
    if target is not None:
        try:
            values = hardware_features(target)
        except (UnsupportedTargetError, KeyError, ValueError) as error:
            log.info("no hardware features for %s (%s): descriptor has shape only", target, error)
        else:
            out.update({f"hw_{n}": float(v) for n, v in zip(HW_FEATURE_NAMES, values, strict=True)})
    return out


@dataclass(frozen=True)
class SourceRecord:
    """One measured candidate of a source task: the signature of the design space its trace was sampled
    from and the trace's decisions (:func:`.encoding.trace_signature`, :func:`.encoding.trace_decisions`),
    mean latency (seconds; inf = failed), task key (the structural hash of its module, as hex) and
    descriptor."""

    signature: str
    decisions: list
    seconds: float
    task: str
    descriptor: dict[str, float]

    @classmethod
    def from_trace_json(
        cls, trace_json: Sequence, seconds: float, task: str, descriptor: dict[str, float]
    ) -> SourceRecord:
        """The record of a trace's JSON as a database line stores it, read without replaying the trace.
        Raises ``ValueError`` for a sampling instruction the encoding does not support."""
        return cls(json_signature(trace_json), json_decisions(trace_json), seconds, task, descriptor)


def load_sources(work_dirs: Sequence[str | Path], exclude: tvm.IRModule | None = None) -> list[SourceRecord]:
    """All measured records of the JSONDatabases at or under ``work_dirs`` (work dirs as written by
    ``tune_workload``, or folders holding them, e.g. ``tenset-tools collect``'s output).

    ``exclude``: a task (typically the target) whose own records are left out, so a leave-one-out
    evaluation never sees the answer. Raises ``FileNotFoundError`` for a path without any database. The
    files are read line by line and never changed: a corrupt line (e.g. the torn last line of a killed
    run) is skipped with a warning in the log; a record of a sampling instruction the encoding does not
    support (not transferable) is skipped.
    """
    records: list[SourceRecord] = []
    skip = ms.utils.shash2hex(exclude) if exclude is not None else None
    stats = LoadStats()
    descriptors: dict[str, dict[str, float]] = {}  # by task: the descriptor of its first record's target
    for work_dir in databases_under(work_dirs):
        names: dict[int, str] = {}
        for task, record, trace_json, _line in iter_database_records(work_dir, stats):
            if id(task) not in names:
                names[id(task)] = ms.utils.shash2hex(task.workload.mod)
            name = names[id(task)]
            if name not in descriptors:
                descriptors[name] = task_descriptor(task.workload.mod, record.target)
            descriptor = descriptors[name]
            if name == skip:
                continue
            seconds = mean_run_seconds(record.run_secs)
            try:
                records.append(SourceRecord.from_trace_json(trace_json, seconds, name, descriptor))
            except ValueError as error:
                log.info("skipping a source record: %s", error)
    return records


def pretrain_on_sources(
    cost_model: ms.CostModel, work_dirs: Sequence[str | Path], exclude: tvm.IRModule | None = None
) -> ms.CostModel:
    """Train ``cost_model`` on every measured record at or under ``work_dirs`` (as :func:`load_sources`),
    each task under its own module and target (failed records as runner errors, as a resumed run does),
    and return it.

    Any MetaSchedule cost model works (ours or TVM's ``XGBModel``): it gets one ``update`` per task.
    ``exclude`` leaves a task out, as in :func:`load_sources`. Corrupt lines are skipped with a warning
    in the log; a path without any database raises ``FileNotFoundError``.
    """
    skip = ms.utils.shash2hex(exclude) if exclude is not None else None
    stats = LoadStats()
    for work_dir in databases_under(work_dirs):
        tasks: dict[tuple[str, str], list[ms.database.TuningRecord]] = {}
        for task, record, _trace, _line in iter_database_records(work_dir, stats):
            key = (ms.utils.shash2hex(task.workload.mod), str(record.target))
            if key[0] != skip:
                tasks.setdefault(key, []).append(record)
        for records in tasks.values():
            context = ms.TuneContext(mod=records[0].workload.mod, target=records[0].target)
            warm_start(cost_model, context, records)
    return cost_model
