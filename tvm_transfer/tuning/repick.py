"""Re-picking each task's schedule before a network is built.

A task's best record is the fastest of hundreds of single timings. On a shared machine one timing can be
far off in either direction (another guest's load comes and goes), so the fastest of many near-equal
candidates is mostly the one timed in the luckiest moment, and built into the network it runs slower
than its record said, sometimes slower than candidates ranked below it (the winner's curse). Re-picking
re-times the top records of the tasks that carry most of the network's time together, in interleaved
rounds (:func:`~tvm_transfer.tuning.retime.retime`: every candidate under the same conditions), and
builds each task from the fastest of them.

The re-picked records live in a database of their own, consulted before the work dir's: the work dir keeps
every measurement as the tuner made it.

A tuner times a candidate warm: several runs back to back, so its weights stay in the caches. In a network
whose weights outgrow the last-level cache, every other layer's weights pass through the cache between two
calls of a layer, so its weights arrive from memory, and a schedule fastest warm can be slower cold than
one ranked below it. The re-pick can therefore time its candidates with cold caches instead
(``cold_caches``); it times them warm by default, which ranks microsecond kernels more steadily
(``docs/models.md`` has the study).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import tvm
from tvm.s_tir import meta_schedule as ms

from tenset_tools.metaschedule import mean_run_seconds
from tvm_transfer.runner import measuring_threads
from tvm_transfer.tuning.retime import retime

__all__ = ["Repick", "repick_records"]


@dataclass(frozen=True)
class Repick:
    """One task's re-pick. ``candidates``: its top records re-timed; ``recorded_seconds``: its best record's
    own timing; ``rank``: the winner's place among the candidates by their own timings (0: the best record
    won again); ``seconds``: the winner's re-timed latency; ``best_record_seconds``: the best record's
    re-timed latency (all in seconds per call)."""

    task: str
    candidates: int
    recorded_seconds: float
    rank: int
    seconds: float
    best_record_seconds: float


def repick_records(
    database: ms.database.Database,
    tasks: Sequence[ms.ExtractedTask],
    target: tvm.target.Target,
    *,
    top_k: int = 8,
    rounds: int = 4,
    share: float = 0.9,
    cold_caches: bool = False,
) -> tuple[ms.database.Database, list[Repick]]:
    """Re-time the ``top_k`` best records of the heaviest ``tasks`` together in ``rounds`` interleaved
    rounds, and keep each task's fastest as its record in a new in-memory database (its run time the
    re-timed latency). The heaviest tasks are those whose weight x best recorded latency, summed from the
    heaviest down, first reach ``share`` (0-1] of the network's; lighter tasks and tasks with fewer than two
    valid records keep their best record. With ``cold_caches`` the candidates are timed with the caches
    flushed before every run (:func:`~tvm_transfer.runner.cold_evaluator_config`), else warm as in
    tuning. Returns the database to build from (the re-picked records first, then ``database``) and, per
    re-picked task, what changed."""
    if not (isinstance(top_k, int) and top_k >= 2 and isinstance(rounds, int) and rounds >= 1):
        raise ValueError(f"top_k must be an integer >= 2 and rounds >= 1, got {top_k!r} and {rounds!r}")
    if not 0 < share <= 1:
        raise ValueError(f"share must be in (0, 1], got {share!r}")
    candidates = {
        name: (mod, top) for name, mod, top in _heaviest(database, tasks, top_k, share) if len(top) >= 2
    }
    mods = {
        f"{name}#{rank}": record.as_measure_candidate().sch.mod
        for name, (_, top) in candidates.items()
        for rank, record in enumerate(top)
    }
    threads = measuring_threads(target)
    seconds = retime(mods, target, rounds, num_threads=threads, cold_caches=cold_caches) if mods else {}
    repicked = ms.database.MemoryDatabase()
    changes = []
    for name, (mod, top) in candidates.items():
        timed = [seconds[f"{name}#{rank}"] for rank in range(len(top))]
        rank = min(range(len(top)), key=timed.__getitem__)
        if not math.isfinite(timed[rank]):
            continue  # none ran again: the work dir's best record stands
        winner = top[rank]
        repicked.commit_tuning_record(
            ms.database.TuningRecord(
                winner.trace, repicked.commit_workload(mod), [timed[rank]], winner.target, winner.args_info
            )
        )
        recorded = mean_run_seconds(top[0].run_secs)
        changes.append(Repick(name, len(top), recorded, rank, timed[rank], timed[0]))
    return ms.database.OrderedUnionDatabase(repicked, database), changes


def _heaviest(
    database: ms.database.Database, tasks: Sequence[ms.ExtractedTask], top_k: int, share: float
) -> list[tuple[str, tvm.IRModule, list[ms.database.TuningRecord]]]:
    """``(name, module, top_k best records)`` of the heaviest ``tasks`` by weight x best recorded latency,
    down to where they reach ``share`` of the sum over all tasks with a valid record."""
    work = []
    for task in tasks:
        mod = task.dispatched[0]
        top = database.get_top_k(database.commit_workload(mod), top_k)
        best = mean_run_seconds(top[0].run_secs) if top else math.inf
        if math.isfinite(best):
            work.append((task.weight * best, (task.task_name, mod, top)))
    work.sort(key=lambda item: -item[0])
    total, covered, chosen = sum(w for w, _ in work), 0.0, []
    for weight, entry in work:
        if covered >= share * total:
            break
        chosen.append(entry)
        covered += weight
    return chosen
