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

Neither timing is the network's: a layer runs after other layers that left their data in the caches, on
weights pre-packed for its schedule. :func:`repick_in_network` therefore times the candidates where they
run: it builds the network once per candidate rank and times every function call of those builds in
interleaved rounds, each task keeping the candidate whose functions took least time in the network.
:func:`repick` chooses between the ways by name (:data:`REPICK_MODES`). By default (``auto``,
:func:`resolve_repick_mode`) a network whose weights outgrow the last-level cache is re-picked with cold
caches, any other warm (``docs/models.md`` has the studies).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import tvm
import tvm_ffi
from tvm.s_tir import meta_schedule as ms

from tenset_tools.metaschedule import mean_run_seconds
from tvm_transfer.networks import fused_for_extraction, weights_outgrow_cache
from tvm_transfer.runner import measuring_threads, network_threads
from tvm_transfer.runtimes import tvm_threads
from tvm_transfer.tuning.build import LoadedNetwork, build_network
from tvm_transfer.tuning.network_profile import function_times, task_functions
from tvm_transfer.tuning.retime import retime
from tvm_transfer.tuning.session import top_records

__all__ = [
    "DEFAULT_REPICK",
    "REPICK_MODES",
    "Repick",
    "repick",
    "repick_in_network",
    "repick_records",
    "resolve_repick_mode",
]

#: How :func:`repick` re-picks: ``none`` builds every task from its best record as measured; ``warm`` and
#: ``cold`` re-time the top records on their own, back to back or with the caches flushed before every run
#: (:func:`repick_records`); ``network`` times them inside the network (:func:`repick_in_network`);
#: ``auto`` is ``cold`` or ``warm`` as the network's weights and the machine's cache say
#: (:func:`resolve_repick_mode`).
REPICK_MODES = ("auto", "none", "warm", "cold", "network")
#: The mode ``compile`` re-picks with unless told otherwise.
DEFAULT_REPICK = "auto"


@dataclass(frozen=True)
class Repick:
    """One task's re-pick. ``candidates``: its top records re-timed; ``recorded_seconds``: its best record's
    own timing; ``rank``: the winner's place among the candidates by their own timings (0: the best record
    won again); ``seconds``: the winner's re-timed latency; ``best_record_seconds``: the best record's
    re-timed latency (all in seconds per call; re-timed in the network by :func:`repick_in_network`)."""

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
    _check_settings(top_k, rounds, share)
    candidates = {name: (mod, top) for name, mod, top in _heaviest(database, tasks, top_k, share)}
    mods = {
        f"{name}#{rank}": record.as_measure_candidate().sch.mod
        for name, (_, top) in candidates.items()
        for rank, record in enumerate(top)
    }
    threads = measuring_threads(target)
    seconds = retime(mods, target, rounds, num_threads=threads, cold_caches=cold_caches) if mods else {}
    timed = {
        name: [seconds[f"{name}#{rank}"] for rank in range(len(top))] for name, (_, top) in candidates.items()
    }
    return _keep_fastest(database, candidates, timed)


def repick_in_network(
    database: ms.database.Database,
    tasks: Sequence[ms.ExtractedTask],
    target: tvm.target.Target,
    mod: tvm.IRModule,
    inputs: Sequence[np.ndarray],
    *,
    layout_free: bool = True,
    top_k: int = 4,
    rounds: int = 5,
    share: float = 0.9,
) -> tuple[ms.database.Database, list[Repick]]:
    """Re-pick the heaviest ``tasks`` (chosen as :func:`repick_records` chooses them) by their time inside
    the network ``mod`` (the Relax module the tasks were extracted from, with ``layout_free`` as there).

    The network is built ``top_k`` times (:func:`~tvm_transfer.tuning.build.build_network`), build ``r``
    with every heavy task's ``r``-th best record (its best where it has fewer), and the builds run on
    ``inputs`` in ``rounds`` interleaved rounds, every function call timed
    (:func:`~tvm_transfer.tuning.network_profile.function_times`). Each task keeps the record whose build
    spent least time in the task's functions (the fastest round of each), with that time per call as its
    latency. All builds are alive at once: ``top_k`` copies of the network's weights in memory. Returns what
    :func:`repick_records` returns."""
    _check_settings(top_k, rounds, share)
    candidates = {name: (task, top) for name, task, top in _heaviest(database, tasks, top_k, share)}
    if not candidates:
        return database, []
    owner = _task_of_function(fused_for_extraction(mod, target, layout_free), candidates)
    builds = []
    for rank in range(max(len(top) for _, top in candidates.values())):
        variant = ms.database.MemoryDatabase()
        for task, top in candidates.values():
            if rank < len(top):
                _commit(variant, task, top[rank], mean_run_seconds(top[rank].run_secs))
        builds.append(ms.database.OrderedUnionDatabase(variant, database))
    fastest = _function_seconds(mod, builds, target, inputs, layout_free, rounds, set(owner))
    timed = {
        name: [_task_seconds(fastest[rank], owner, name) for rank in range(len(top))]
        for name, (_, top) in candidates.items()
    }
    return _keep_fastest(database, candidates, timed)


def _function_seconds(
    mod: tvm.IRModule,
    databases: Sequence[ms.database.Database],
    target: tvm.target.Target,
    inputs: Sequence[np.ndarray],
    layout_free: bool,
    rounds: int,
    functions: set[str],
) -> list[dict[str, float]]:
    """Per database, ``mod`` built with it and run on ``inputs`` in ``rounds`` rounds interleaved with the
    other builds: each of ``functions``' fastest time per call in the network (seconds)."""
    with tvm_threads(network_threads(target)):
        networks = [
            LoadedNetwork(build_network(mod, database, target, layout_free), inputs) for database in databases
        ]
        for network in networks:
            network()  # the pooled allocator's first allocations, the weights' page faults
        fastest: list[dict[str, float]] = [{} for _ in networks]
        for _ in range(rounds):
            for build, network in enumerate(networks):
                for name, timing in function_times(network, network.vm.set_instrument).items():
                    if name in functions:
                        per_call = timing.network_seconds / timing.calls
                        fastest[build][name] = min(fastest[build].get(name, math.inf), per_call)
    return fastest


def repick(
    mode: str,
    database: ms.database.Database,
    tasks: Sequence[ms.ExtractedTask],
    target: tvm.target.Target,
    mod: tvm.IRModule,
    inputs: Sequence[np.ndarray],
    layout_free: bool = True,
) -> tuple[ms.database.Database, list[Repick] | None]:
    """The database to build ``mod`` from, re-picked as ``mode`` (one of :data:`REPICK_MODES`; ``auto``
    resolved by :func:`resolve_repick_mode`) says with each way's default settings, and what changed
    (``None`` for ``none``). Raises ``ValueError`` for an unknown mode."""
    mode = resolve_repick_mode(mode, mod)
    if mode == "none":
        return database, None
    if mode == "network":
        return repick_in_network(database, tasks, target, mod, inputs, layout_free=layout_free)
    return repick_records(database, tasks, target, cold_caches=mode == "cold")


def resolve_repick_mode(mode: str, mod: tvm.IRModule, *, cache_bytes: int | None = None) -> str:
    """The mode of :data:`REPICK_MODES` that ``mode`` stands for with the network ``mod`` on this machine:
    ``mode`` itself unless it is ``auto``. ``auto`` is ``cold`` when ``mod``'s weights outgrow the
    last-level cache (:func:`~tvm_transfer.networks.weights_outgrow_cache`, ``cache_bytes`` bytes as
    there), ``warm`` otherwise: where they fit,
    every layer finds its weights as warm as the tuner timed them, and cold timings were measured to pick
    worse; where they do not, each layer's weights arrive from memory, and cold timings picked better.
    Raises ``ValueError`` for an unknown mode."""
    if mode not in REPICK_MODES:
        raise ValueError(f"unknown re-pick mode {mode!r}: use one of {', '.join(REPICK_MODES)}")
    if mode != "auto":
        return mode
    return "cold" if weights_outgrow_cache(mod, cache_bytes=cache_bytes) else "warm"


def _check_settings(top_k: int, rounds: int, share: float) -> None:
    if not (isinstance(top_k, int) and top_k >= 2 and isinstance(rounds, int) and rounds >= 1):
        raise ValueError(f"top_k must be an integer >= 2 and rounds >= 1, got {top_k!r} and {rounds!r}")
    if not 0 < share <= 1:
        raise ValueError(f"share must be in (0, 1], got {share!r}")


def _keep_fastest(
    database: ms.database.Database,
    candidates: dict[str, tuple[tvm.IRModule, list[ms.database.TuningRecord]]],
    timed: dict[str, list[float]],
) -> tuple[ms.database.Database, list[Repick]]:
    """Each task's fastest candidate by ``timed`` (seconds per call, by rank) as its record in a new
    in-memory database consulted before ``database``, and what changed."""
    repicked = ms.database.MemoryDatabase()
    changes = []
    for name, (mod, top) in candidates.items():
        seconds = timed[name]
        rank = min(range(len(top)), key=seconds.__getitem__)
        if not math.isfinite(seconds[rank]):
            continue  # none ran again: the work dir's best record stands
        _commit(repicked, mod, top[rank], seconds[rank])
        recorded = mean_run_seconds(top[0].run_secs)
        changes.append(Repick(name, len(top), recorded, rank, seconds[rank], seconds[0]))
    return ms.database.OrderedUnionDatabase(repicked, database), changes


def _commit(
    database: ms.database.Database, mod: tvm.IRModule, record: ms.database.TuningRecord, seconds: float
) -> None:
    """``record``'s schedule committed to ``database`` as ``mod``'s, timed ``seconds``."""
    database.commit_tuning_record(
        ms.database.TuningRecord(
            record.trace, database.commit_workload(mod), [seconds], record.target, record.args_info
        )
    )


def _task_of_function(
    fused: tvm.IRModule, candidates: dict[str, tuple[tvm.IRModule, list[ms.database.TuningRecord]]]
) -> dict[str, str]:
    """The functions of ``fused`` (the module tasks are extracted from) that are one of ``candidates``'
    tasks, each named both as it is and as it is called once its weight layout is pre-packed, mapped to
    the task's name."""
    owner = {}
    for names, as_task in task_functions(fused):
        for name, (task, _) in candidates.items():
            if tvm_ffi.structural_equal(as_task, task):
                owner |= dict.fromkeys(names, name)
                break
    return owner


def _task_seconds(fastest: dict[str, float], owner: dict[str, str], task: str) -> float:
    """A task's time per call in one build: the mean over its functions that ran (``inf``: none ran)."""
    seconds = [s for name, s in fastest.items() if owner[name] == task]
    return float(np.mean(seconds)) if seconds else math.inf


def _heaviest(
    database: ms.database.Database, tasks: Sequence[ms.ExtractedTask], top_k: int, share: float
) -> list[tuple[str, tvm.IRModule, list[ms.database.TuningRecord]]]:
    """``(name, module, top_k best valid records)`` of the heaviest ``tasks`` by weight x best recorded
    latency, down to where they reach ``share`` of the sum over all tasks with a valid record, those with at
    least two valid records."""
    work = []
    for task in tasks:
        mod = task.dispatched[0]
        top = top_records(database, mod, top_k)
        if top:
            work.append((task.weight * mean_run_seconds(top[0].run_secs), (task.task_name, mod, top)))
    work.sort(key=lambda item: -item[0])
    total, covered, chosen = sum(w for w, _ in work), 0.0, []
    for weight, entry in work:
        if covered >= share * total:
            break
        covered += weight
        if len(entry[2]) >= 2:
            chosen.append(entry)
    return chosen
