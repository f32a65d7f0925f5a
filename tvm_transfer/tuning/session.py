"""A tuning session: MetaSchedule tuning of some tune contexts against one work dir's database.

Every run keeps its MetaSchedule database in ``work_dir``; MetaSchedule appends each measured batch to
it, so an interrupted run keeps every measured record, and re-running with the same ``work_dir`` tunes only
the trials still missing (after re-training the cost model on the records already there). Operator and
network tuning (:mod:`~tvm_transfer.tuning.operator`, :mod:`~tvm_transfer.tuning.network`) are built on
:func:`tune_contexts` and the database helpers here.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tvm
from tqdm.auto import tqdm
from tvm.s_tir import meta_schedule as ms

from tenset_tools.command import Interrupted
from tenset_tools.metaschedule import mean_run_seconds
from tvm_transfer.builder import PersistentBuilder
from tvm_transfer.callbacks import ProgressCallback
from tvm_transfer.cost_model import make_cost_model
from tvm_transfer.cost_model.warm_start import warm_start
from tvm_transfer.runner import TimedRunner, measuring_workers
from tvm_transfer.search_strategy.unmeasured import SkipMeasured
from tvm_transfer.tuning.recording import RecordOnMeasure, recording_callbacks
from tvm_transfer.tuning.workdir import count_records, open_database, work_dir_lock

log = logging.getLogger(__name__)


@dataclass
class TuneOptions:
    """Knobs of the search, shared by workload and network tuning.

    ``trials`` and ``trials_per_iter`` count measured candidates; ``num_threads`` is the search's thread
    count (``None``: the physical cores). ``population_size`` defaults to 128 rather than MetaSchedule's
    512: on a 2-core machine the evolutionary search then costs several times less per trial, with results
    in the same noise band.
    """

    trials: int = 64
    trials_per_iter: int = 16
    population_size: int = 128
    seed: int = 0
    num_threads: int | None = None
    progress: bool = True


@dataclass
class Measurement:
    """How candidates are measured, when the caller owns it: a builder (kept running across calls; the
    caller shuts it down), a runner (e.g. an ``RPCRunner``), a progress bar shared over several runs, and
    measure callbacks run after the default ones. ``None`` fields take the defaults: fresh
    workers of :func:`~tvm_transfer.runner.measuring_workers`, a bar per run."""

    builder: PersistentBuilder | None = None
    runner: ms.runner.Runner | None = None
    progress_bar: tqdm | None = None
    callbacks: Sequence[ms.measure_callback.MeasureCallback] = ()


@dataclass
class ContextsTuning:
    """What :func:`tune_contexts` did: ``latencies`` of this run's trials in measurement order (seconds,
    ``inf`` for failures), MetaSchedule's ``profile`` (seconds per phase) and the run's wall ``seconds``."""

    latencies: list[float]
    profile: dict[str, float]
    seconds: float


def records_of(database: ms.database.Database, mod: tvm.IRModule) -> list[ms.database.TuningRecord]:
    """Every tuning record of ``mod``'s workload in ``database``, failed ones included."""
    workload = database.commit_workload(mod)
    return [r for r in database.get_all_tuning_records() if r.workload.same_as(workload)]


def top_records(database: ms.database.Database, mod: tvm.IRModule, k: int) -> list[ms.database.TuningRecord]:
    """The ``k`` fastest records of ``mod``'s workload in ``database``, fastest first, without those whose
    runs failed; ``[]`` when the database has no such workload (which is then not added to it)."""
    if not database.has_workload(mod):
        return []
    top = database.get_top_k(database.commit_workload(mod), k)
    return [record for record in top if np.isfinite(mean_run_seconds(record.run_secs))]


def best_seconds(records: Sequence[ms.database.TuningRecord]) -> float:
    """The lowest mean latency among ``records``, in seconds (``inf`` when none succeeded)."""
    return min((mean_run_seconds(r.run_secs) for r in records), default=float("inf"))


@contextlib.contextmanager
def meta_schedule_log_level() -> Iterator[None]:
    """Keep MetaSchedule's package logger at the caller's level across a block (or a decorated call).

    Each time MetaSchedule creates a work dir's loggers it gives their console handler the package logger's
    current level and then sets the package logger to DEBUG; left so, every later set-up in the process
    prints MetaSchedule's per-batch tables. Leaving the block restores the caller's level."""
    logger = logging.getLogger("tvm.s_tir.meta_schedule")
    level = logger.level
    try:
        yield
    finally:
        logger.setLevel(level)


def evolution_settings(population_size: int) -> dict[str, int]:
    """``EvolutionarySearch`` arguments for a population of ``population_size``: at least half of the
    initial population (at most MetaSchedule's default 50) must be unmeasured fresh samples, which a small
    population could not reach with the default."""
    return {"population_size": population_size, "init_min_unmeasured": min(50, population_size // 2)}


def evolution(options: TuneOptions) -> ms.search_strategy.EvolutionarySearch:
    """MetaSchedule's evolutionary search with the population of ``options``."""
    return ms.search_strategy.EvolutionarySearch(**evolution_settings(options.population_size))


def skip_measured(strategy: ms.search_strategy.SearchStrategy) -> ms.search_strategy.SearchStrategy:
    """``strategy`` filtered so that it never proposes a program already in the database (on a resumed
    run MetaSchedule's evolutionary search would measure some again); unchanged if already filtered."""
    return strategy if isinstance(strategy, SkipMeasured) else SkipMeasured(strategy)


def search_threads(options: TuneOptions) -> int | str:
    """The ``num_threads`` of a ``TuneContext`` for ``options`` (MetaSchedule's ``"physical"`` by default)."""
    return options.num_threads or "physical"


def resolve_cost_model(cost_model: str | ms.CostModel, seed: int) -> ms.CostModel:
    """``cost_model`` itself, or a new model of that ``COST_MODELS`` name seeded with ``seed``."""
    return make_cost_model(cost_model, seed=seed) if isinstance(cost_model, str) else cost_model


def tune_contexts(
    contexts: list[ms.TuneContext],
    weights: list[float],
    work_dir: Path,
    cost_model: str | ms.CostModel,
    options: TuneOptions,
    measure: Measurement | None = None,
    unmeasured: int = 0,
) -> ContextsTuning:
    """Run MetaSchedule's gradient task scheduler on ``contexts`` (``weights``: calls of each per
    inference) until ``work_dir``'s database holds ``options.trials`` records of them measured there,
    warm-starting the cost model on the records already there. ``unmeasured`` of those were not measured
    there (a transfer pack's) and count as no trial.

    Holds ``work_dir``'s lock for the run (a second run on it is refused, see
    :func:`~tvm_transfer.tuning.workdir.work_dir_lock`); Ctrl-C raises
    :class:`~tenset_tools.command.Interrupted` saying how many records the work dir keeps."""
    with work_dir_lock(work_dir), _noting_interrupts() as interrupted:
        try:
            return _tune_contexts(contexts, weights, Path(work_dir), cost_model, options, measure, unmeasured)
        except BaseException as error:
            # Ctrl-C inside a Python callback of TVM's C++ loop (the cost model, a measure callback) reaches
            # here as TVM's RuntimeError wrapping it: the flag, not the exception type, says it was Ctrl-C.
            if interrupted[0] or isinstance(error, KeyboardInterrupt):
                kept = count_records(work_dir)
                raise Interrupted(f"{kept} measured records kept in {work_dir}") from None
            raise


@contextlib.contextmanager
def _default_callbacks(
    runner: ms.runner.Runner,
    scheduler: ms.task_scheduler.TaskScheduler,
    database: ms.database.Database,
    progress: ProgressCallback,
) -> Iterator[list[ms.MeasureCallback]]:
    """MetaSchedule's default measure callbacks for a run on ``runner``, within the block. Our runner
    commits each record as it is measured (so that a stopped run keeps all it measured) and moves the bar
    with every measurement rather than when the scheduler collects a batch; it is set up for that on entry
    and cleared on exit."""
    if not isinstance(runner, TimedRunner):
        yield list(ms.measure_callback.MeasureCallback.create("default"))
        return
    record = RecordOnMeasure(scheduler, database)

    def on_result(runner_input: ms.runner.RunnerInput, result: ms.runner.RunnerResult) -> None:
        record(runner_input, result)
        progress.measured()

    runner.on_result = on_result
    try:
        yield recording_callbacks(database)
    finally:
        runner.on_result = None


@contextlib.contextmanager
def _noting_interrupts() -> Iterator[list[bool]]:
    """Within the block, Ctrl-C (SIGINT) sets the yielded flag before raising ``KeyboardInterrupt`` as
    usual (only in the main thread, the one Python delivers signals to)."""
    interrupted = [False]
    if threading.current_thread() is not threading.main_thread():
        yield interrupted
        return

    def note(signum, frame):
        interrupted[0] = True
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, note)
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)


def _tune_contexts(
    contexts: list[ms.TuneContext],
    weights: list[float],
    work_dir: Path,
    cost_model: str | ms.CostModel,
    options: TuneOptions,
    measure: Measurement | None,
    unmeasured: int,
) -> ContextsTuning:
    measure = measure or Measurement()
    database = open_database(work_dir)
    previous = [records_of(database, ctx.mod) for ctx in contexts]
    done = sum(len(r) for r in previous) - unmeasured
    remaining = max(options.trials - done, 0)
    model = resolve_cost_model(cost_model, options.seed)
    progress = ProgressCallback(remaining, options.progress, measure.progress_bar)
    start = time.perf_counter()
    profile: dict[str, float] = {}
    if remaining:
        if any(previous):
            log.info(
                "warm-starting from %d records in %s (%d trials measured there), %d to go",
                sum(map(len, previous)), work_dir, done, remaining,
            )  # fmt: skip
            for ctx, records in zip(contexts, previous, strict=True):
                warm_start(model, ctx, records)
        # TVM's runtime uses half the logical CPUs unless told otherwise (one thread on a 2-vCPU machine):
        # the workers measure on as many threads as the target has cores.
        builder, runner = measuring_workers(
            contexts[0].target, builder=measure.builder, runner=measure.runner
        )
        scheduler = ms.task_scheduler.TaskScheduler.create("gradient")
        with (
            ms.Profiler() as profiler,
            _default_callbacks(runner, scheduler, database, progress) as default_callbacks,
        ):
            ms.tune_tasks(
                tasks=contexts,
                task_weights=weights,
                work_dir=str(work_dir),
                max_trials_global=remaining,
                num_trials_per_iter=options.trials_per_iter,
                builder=builder,
                runner=runner,
                database=database,
                cost_model=model,
                measure_callbacks=[*default_callbacks, progress, *measure.callbacks],
                task_scheduler=scheduler,
            )
        profile = {name: float(seconds) for name, seconds in profiler.get().items()}
    progress.close()
    return ContextsTuning(
        latencies=progress.latencies,
        profile=profile,
        seconds=time.perf_counter() - start,
    )
