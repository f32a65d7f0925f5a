"""Schedule transfer: replay the best schedules of tuned tasks on similar untuned tasks of a network.

Two fused functions are *similar* when their blocks match one to one in name and iteration structure
(``matmul: SSR, T_add: SS``), whatever their extents: a MetaSchedule trace addresses blocks by name and
loops by position, so a trace of one replays on the other. Replay is not a validity check by itself —
``Trace.apply_to_schedule`` silently repairs tile sizes that do not divide the new extents — so every
replayed candidate is checked step by step:

1. tile decisions are repaired to the new loop extents explicitly (the rule of
   :mod:`tvm_transfer.search_strategy.replay`) and, after replay, every ``SamplePerfectTile`` decision of
   the new trace must be the repaired one;
2. MetaSchedule's post-processors for the target must all succeed (what MetaSchedule calls valid);
3. the candidate must build, and its outputs on random inputs must match TVM's default (unscheduled)
   lowering of the same task;
4. it is measured once with the tuning runner, next to the default lowering; the fastest valid candidate
   is committed to the work dir's database as a tuning record only when it beats the default, so that
   ``compile_network`` picks it up; otherwise the task keeps TVM's default schedule.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import tvm
import tvm_ffi
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms

from tenset_tools.flops import estimate_flops
from tvm_transfer.builder import PersistentBuilder
from tvm_transfer.runner import measuring_workers, runner_seconds
from tvm_transfer.search_strategy.base import program_key
from tvm_transfer.search_strategy.replay import block_signature, replay_trace
from tvm_transfer.tuning.session import top_records

log = logging.getLogger(__name__)

__all__ = ["TransferOutcome", "transfer_schedules"]

# Outputs of a transferred schedule must match the default lowering within this relative tolerance
# (float32 reductions in a different order differ by a few ulps times the reduction length).
_RTOL = 1e-3


@dataclass
class TransferOutcome:
    """What happened to one untuned task. ``status`` is ``"transferred"`` (a record from ``source`` was
    committed), or ``"default"`` (TVM's default lowering is used; ``reason`` says why). Times in seconds;
    ``candidates`` counts replayed traces, ``valid`` those that passed every check, ``adapted`` the tile
    decisions that had to be changed for the new extents (summed over valid candidates)."""

    task: str
    status: str
    source: str | None = None
    seconds: float = float("inf")
    default_seconds: float = float("inf")
    candidates: int = 0
    valid: int = 0
    adapted: int = 0
    reason: str = ""
    sources_tried: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        """The task's status in a network result: ``transferred-from-<source>`` or ``default``."""
        return f"transferred-from-{self.source}" if self.status == "transferred" else "default"


def _random_args(args_info: Sequence[ms.arg_info.ArgInfo], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = []
    for info in args_info:
        shape, dtype = [int(x) for x in info.shape], str(info.dtype)
        if dtype.startswith("float"):
            arrays.append(rng.uniform(-1.0, 1.0, shape).astype(dtype))
        else:  # integer inputs are usually indices: zeros stay in bounds
            arrays.append(np.zeros(shape, dtype=dtype))
    return arrays


def _run(function: tvm_ffi.Function, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    args = [tvm.runtime.tensor(a.copy()) for a in arrays]
    function(*args)
    return [a.numpy() for a in args]


def _matches(got: Sequence[np.ndarray], expected: Sequence[np.ndarray]) -> bool:
    for a, b in zip(got, expected, strict=True):
        scale = 1.0 + float(np.max(np.abs(b))) if b.size else 1.0
        if a.shape != b.shape or not np.all(np.isfinite(a) == np.isfinite(b)):
            return False
        if b.size and float(np.nanmax(np.abs(a - b))) > _RTOL * scale:
            return False
    return True


def _measure(
    builder: ms.builder.Builder,
    runner: ms.runner.Runner,
    target: tvm.target.Target,
    mods: Sequence[tvm.IRModule],
) -> tuple[list[float], list[tvm.runtime.Module | None]]:
    """Build ``mods`` with ``builder`` and time them once with ``runner``: (seconds, runnable modules) per
    module; ``inf``/``None`` for a failed build or run.

    The builder drops a schedule's weight-layout rewrite (measured programs read pre-packed weights, as
    they will after compile-time pre-packing), so each is timed with its own argument shapes; the module
    returned for the numeric check is built with the rewrite kept, so it reads weights as the task does."""
    built = builder.build([ms.builder.BuilderInput(m, target) for m in mods])
    ok = [i for i, b in enumerate(built) if b.error_msg is None]
    inputs = [
        ms.runner.RunnerInput(built[i].artifact_path, "cpu", ms.arg_info.ArgInfo.from_entry_func(mods[i]))
        for i in ok
    ]
    futures = runner.run(inputs) if inputs else []
    seconds = [float("inf")] * len(mods)
    loaded: list[tvm.runtime.Module | None] = [None] * len(mods)
    for i, future in zip(ok, futures, strict=True):
        seconds[i] = runner_seconds(future.result())
        if np.isfinite(seconds[i]):
            loaded[i] = tvm.compile(mods[i], target=target)
    return seconds, loaded


def _context(mod: tvm.IRModule, target: tvm.target.Target, name: str) -> ms.TuneContext:
    return ms.TuneContext(
        mod=mod, target=target, space_generator="post-order-apply", task_name=name, num_threads=1
    )


class _Source(NamedTuple):
    """A tuned task whose best records may be replayed elsewhere."""

    task: ms.ExtractedTask
    signature: tuple[tuple[str, str], ...]
    flops: float
    records: list[ms.database.TuningRecord]


def transfer_schedules(
    untuned: Sequence[ms.ExtractedTask],
    tuned: Sequence[ms.ExtractedTask],
    database: ms.database.Database,
    target: tvm.target.Target,
    *,
    candidates: int = 3,
    max_sources: int = 2,
    builder: PersistentBuilder | None = None,
    runner: ms.runner.Runner | None = None,
    seed: int = 0,
) -> list[TransferOutcome]:
    """Give each task of ``untuned`` the best valid schedule replayed from a similar task of ``tuned``.

    ``untuned`` and ``tuned`` are ``ExtractedTask`` objects of the same network (``tuned`` ones have
    records in ``database``). For each untuned task, at most ``max_sources`` similar tuned tasks (same
    :func:`~tvm_transfer.search_strategy.replay.block_signature`, closest FLOPs first) contribute their
    ``candidates`` best records each; the replayed candidates are checked (see the module docstring),
    measured once next to the default lowering, and the fastest is committed to ``database`` when it
    beats the default.
    ``builder``/``runner`` default to the process's shared workers
    (:func:`tvm_transfer.runner.measuring_workers`).
    """
    sources = []
    for task in tuned:
        mod = task.dispatched[0]
        top = top_records(database, mod, candidates)
        if top:
            sources.append(_Source(task, block_signature(mod), estimate_flops(mod), top))
    builder, runner = measuring_workers(target, builder=builder, runner=runner)
    return [
        _transfer_one(task, sources, database, target, max_sources, builder, runner, seed + index)
        for index, task in enumerate(untuned)
    ]


def _flops_distance(a: float, b: float) -> float:
    """How far apart two FLOPs counts are, on a log scale (``inf`` when either is unknown)."""
    if not (np.isfinite(a) and np.isfinite(b)):
        return math.inf
    return abs(math.log(max(a, 1.0) / max(b, 1.0)))


def _transfer_one(
    task: ms.ExtractedTask,
    sources: Sequence[_Source],
    database: ms.database.Database,
    target: tvm.target.Target,
    max_sources: int,
    builder: ms.builder.Builder,
    runner: ms.runner.Runner,
    seed: int,
) -> TransferOutcome:
    """Replay the best records of up to ``max_sources`` similar ``sources`` on ``task`` and commit the
    fastest valid one when it beats the default lowering (see :func:`transfer_schedules`)."""
    mod = task.dispatched[0]
    signature = block_signature(mod)
    flops = estimate_flops(mod)
    similar = [s for s in sources if s.signature == signature]
    similar.sort(key=lambda s: _flops_distance(s.flops, flops))
    outcome = TransferOutcome(task.task_name, "default")
    if not similar:
        outcome.reason = "no tuned task with the same block structure"
        return outcome
    context = _context(mod, target, task.task_name)
    replayed: list[tuple[str, Schedule, int]] = []
    seen: set[int] = set()
    failures = []
    for source_task, _, _, records in similar[:max_sources]:
        outcome.sources_tried.append(source_task.task_name)
        for record in records:
            outcome.candidates += 1
            try:
                sch, adapted = replay_trace(record.trace, mod, context)
            except ValueError as error:
                failures.append(str(error))
                continue
            key = program_key(sch)
            if key not in seen:
                seen.add(key)
                replayed.append((source_task.task_name, sch, adapted))
    if not replayed:
        outcome.reason = f"no trace replayed validly ({failures[0] if failures else 'no records'})"
        return outcome
    args_info = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    seconds, loaded = _measure(builder, runner, target, [mod] + [s.mod for _, s, _ in replayed])
    outcome.default_seconds = seconds[0]
    arrays = _random_args(args_info, seed)
    expected = _run(loaded[0]["main"], arrays) if loaded[0] is not None else None
    best = None
    for (source, sch, adapted), secs, module in zip(replayed, seconds[1:], loaded[1:], strict=True):
        if module is None or not np.isfinite(secs):
            continue
        if expected is not None and not _matches(_run(module["main"], arrays), expected):
            log.warning("%s: a trace from %s replayed but computes wrong results", task.task_name, source)
            continue
        outcome.valid += 1
        outcome.adapted += adapted
        if best is None or secs < best[1]:
            best = (source, secs, sch)
    if best is None:
        outcome.reason = "replayed candidates failed to build, run or match the default lowering"
        return outcome
    outcome.seconds = best[1]
    if best[1] >= outcome.default_seconds:
        outcome.reason = "the default lowering was faster"
        return outcome
    record = ms.database.TuningRecord(
        trace=best[2].trace,
        workload=database.commit_workload(mod),
        run_secs=[best[1]],
        target=target,
        args_info=args_info,
    )
    database.commit_tuning_record(record)
    outcome.status, outcome.source = "transferred", best[0]
    return outcome
