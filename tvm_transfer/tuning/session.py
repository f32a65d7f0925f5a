"""High-level tuning API: tune a named operator or a small network with a chosen cost model.

Every run keeps its MetaSchedule database in ``work_dir``; MetaSchedule appends each measured batch to
it, so an interrupted run keeps every measured record, and re-running with the same ``work_dir`` tunes only
the trials still missing (after re-training the cost model on the records already there).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import tvm
from tqdm.auto import tqdm
from tvm.s_tir import meta_schedule as ms

from tenset_tools.metaschedule import mean_run_seconds
from tvm_transfer.builder import PersistentBuilder, import_tensor_intrin_fast
from tvm_transfer.callbacks import ProgressCallback
from tvm_transfer.cost_model import make_cost_model
from tvm_transfer.runner import local_runner
from tvm_transfer.target import as_target
from tvm_transfer.workloads import Workload

if TYPE_CHECKING:
    from tvm_transfer.tuning.task_selection import TaskSelection

log = logging.getLogger(__name__)


@dataclass
class TuneOptions:
    """Knobs of the search, shared by workload and network tuning.

    ``population_size`` defaults to 128 rather than MetaSchedule's 512: on a 2-core machine the
    evolutionary search then costs ~0.4 s per trial instead of ~1.6 s, with results in the same noise band.
    """

    trials: int = 64
    trials_per_iter: int = 16
    population_size: int = 128
    seed: int = 0
    num_threads: int | None = None
    progress: bool = True


@dataclass
class TuneResult:
    """Outcome of a tuning run. Times in seconds; ``curve[i]`` is the best latency after trial ``i + 1``
    of this run (``inf`` until the first success)."""

    name: str
    target: str
    cost_model: str
    flops: float
    trials: int
    new_trials: int
    best_seconds: float
    tuning_seconds: float
    curve: list[float] = field(default_factory=list)
    profile: dict[str, float] = field(default_factory=dict)
    reference_seconds: float | None = None

    @property
    def gflops(self) -> float:
        return self.flops / self.best_seconds / 1e9 if np.isfinite(self.best_seconds) else 0.0

    def table(self) -> str:
        """A plain-text result table."""
        rows = [
            ("workload", self.name),
            ("target", self.target),
            ("cost model", self.cost_model),
            ("trials (this run / total)", f"{self.new_trials} / {self.trials}"),
            ("best latency", f"{self.best_seconds * 1e3:.4f} ms"),
            ("throughput", f"{self.gflops:.1f} GFLOPS"),
            ("tuning time (this run)", f"{self.tuning_seconds:.1f} s"),
        ]
        if self.reference_seconds:
            ref_gflops = self.flops / self.reference_seconds / 1e9
            rows.append(
                ("PyTorch reference", f"{self.reference_seconds * 1e3:.4f} ms ({ref_gflops:.1f} GFLOPS)")
            )
            rows.append(("TVM speed / PyTorch", f"{self.reference_seconds / self.best_seconds:.2f}x"))
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def _database(work_dir: Path) -> ms.database.JSONDatabase:
    work_dir.mkdir(parents=True, exist_ok=True)
    return ms.database.JSONDatabase(work_dir=str(work_dir))


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


def _records_of(database: ms.database.Database, mod: tvm.IRModule) -> list[ms.database.TuningRecord]:
    workload = database.commit_workload(mod)
    return [r for r in database.get_all_tuning_records() if r.workload.same_as(workload)]


def warm_start(cost_model: ms.CostModel, context: ms.TuneContext, records: Sequence) -> None:
    """Train the cost model on records of ``context``'s task measured by an earlier run, failed ones
    included as runner errors.

    The database stores build and run failures alike as 1e10 s; passing them on as errors lets a model
    with a validity head (``multilevel``) keep what it learnt before the interruption, and is what
    MetaSchedule's own models see of a failure (a very high cost)."""
    if records:
        candidates = [r.as_measure_candidate() for r in records]
        cost_model.update(context, candidates, [_runner_result(r) for r in records])


def _runner_result(record: ms.database.TuningRecord) -> ms.runner.RunnerResult:
    if np.isfinite(mean_run_seconds(record.run_secs)):
        return ms.runner.RunnerResult(run_secs=list(record.run_secs), error_msg=None)
    return ms.runner.RunnerResult(run_secs=None, error_msg="failed in an earlier run (stored as 1e10 s)")


def _best_seconds(records: Sequence) -> float:
    return min((mean_run_seconds(r.run_secs) for r in records), default=float("inf"))


@dataclass
class Measurement:
    """How candidates are measured, when the caller owns it: a builder (kept running across calls; the
    caller shuts it down), a runner (e.g. an ``RPCRunner``) and a progress bar shared over several runs.
    ``None`` fields take the defaults: a fresh :class:`PersistentBuilder`, :func:`local_runner`, a bar per
    run."""

    builder: PersistentBuilder | None = None
    runner: ms.runner.Runner | None = None
    progress_bar: tqdm | None = None


def _tune_contexts(
    contexts: list[ms.TuneContext],
    weights: list[float],
    work_dir: Path,
    cost_model: str | ms.CostModel,
    options: TuneOptions,
    measure: Measurement | None = None,
) -> tuple[list[float], dict[str, float], int, float, list[list]]:
    """Run MetaSchedule on ``contexts``; returns (latencies of this run, profile, previous trial count,
    wall seconds, records per context)."""
    measure = measure or Measurement()
    database = _database(work_dir)
    previous = [_records_of(database, ctx.mod) for ctx in contexts]
    done = sum(len(r) for r in previous)
    remaining = max(options.trials - done, 0)
    model = make_cost_model(cost_model, seed=options.seed) if isinstance(cost_model, str) else cost_model
    progress = ProgressCallback(remaining, options.progress, measure.progress_bar)
    start = time.perf_counter()
    profile: dict[str, float] = {}
    if remaining:
        if done:
            log.info("resuming in %s: %d trials measured, %d to go", work_dir, done, remaining)
            for ctx, records in zip(contexts, previous, strict=True):
                warm_start(model, ctx, records)
        callbacks = [*ms.measure_callback.MeasureCallback.create("default"), progress]
        builder = measure.builder or PersistentBuilder()
        # TVM's runtime uses half the logical CPUs unless told otherwise (one thread on a 2-vCPU machine):
        # measure on as many threads as the target has cores.
        cores = int(contexts[0].target.attrs.get("num-cores", 0)) or None
        runner = measure.runner or local_runner(num_threads=cores)
        with ms.Profiler() as profiler:
            try:
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
                    measure_callbacks=callbacks,
                    task_scheduler="gradient",
                )
            finally:
                if measure.builder is None:
                    builder.shutdown()
        profile = {name: float(seconds) for name, seconds in profiler.get().items()}
    progress.close()
    elapsed = time.perf_counter() - start
    return progress.latencies, profile, done, elapsed, [_records_of(database, c.mod) for c in contexts]


def evolution_settings(population_size: int) -> dict[str, int]:
    """``EvolutionarySearch`` arguments for a population of ``population_size``: at least half of the
    initial population (at most MetaSchedule's default 50) must be unmeasured fresh samples, which a small
    population could not reach with the default."""
    return {"population_size": population_size, "init_min_unmeasured": min(50, population_size // 2)}


def _evolutionary(options: TuneOptions) -> ms.search_strategy.EvolutionarySearch:
    return ms.search_strategy.EvolutionarySearch(**evolution_settings(options.population_size))


def _num_threads(options: TuneOptions) -> int | str:
    return options.num_threads or "physical"


@meta_schedule_log_level()
def tune_workload(
    workload: Workload,
    work_dir: str | Path,
    *,
    cost_model: str | ms.CostModel = "xgboost",
    target: tvm.target.Target | dict | None = None,
    options: TuneOptions | None = None,
    reference: bool = True,
    search_strategy: ms.search_strategy.SearchStrategy | None = None,
) -> TuneResult:
    """Tune one operator with MetaSchedule and the given cost model (a name of ``COST_MODELS`` or an object).

    ``reference`` also times the same operator in PyTorch on this machine for comparison.
    ``search_strategy`` replaces the default evolutionary search (e.g. a copula-seeded
    ``tvm_transfer.search_strategy.copula.CopulaSearch``).
    """
    options = options or TuneOptions()
    target = as_target(target)
    import_tensor_intrin_fast()  # TuneContext imports it; the slow path costs ~30 s per process
    mod = workload.ir_module()
    context = ms.TuneContext(
        mod=mod,
        target=target,
        space_generator="post-order-apply",
        search_strategy=search_strategy or _evolutionary(options),
        task_name=workload.name,
        rand_state=ms.utils.fork_seed(options.seed, 1)[0],
        num_threads=_num_threads(options),
        logger=ms.logging.get_loggers_from_work_dir(str(work_dir), [workload.name])[0],
    )
    latencies, profile, _, elapsed, (records,) = _tune_contexts(
        [context], [1.0], Path(work_dir), cost_model, options
    )
    return TuneResult(
        name=workload.name,
        target=str(target),
        cost_model=cost_model if isinstance(cost_model, str) else type(cost_model).__name__,
        flops=workload.flops,
        trials=len(records),
        new_trials=len(latencies),
        best_seconds=_best_seconds(records),
        tuning_seconds=elapsed,
        curve=list(np.minimum.accumulate(latencies)) if latencies else [],
        profile=profile,
        reference_seconds=workload.reference_seconds() if reference else None,
    )


def best_schedule(workload: Workload, work_dir: str | Path, target: tvm.target.Target | dict | None = None):
    """The best tuned schedule of ``workload`` in ``work_dir``'s database (``None`` if never measured)."""
    mod = workload.ir_module()
    return _database(Path(work_dir)).query_schedule(mod, as_target(target), workload.name)


@dataclass
class NetworkTuneResult:
    """Outcome of tuning a network's tasks: per task ``(name, weight, FLOPs, best seconds, trials)``."""

    name: str
    target: str
    cost_model: str
    tasks: list[tuple[str, float, float, float, int]]
    new_trials: int
    tuning_seconds: float
    profile: dict[str, float] = field(default_factory=dict)
    # With a TaskSelection: per task "tuned", "transferred-from-<task>" or "default", and the plan
    # (selected tasks, budgets, transfer outcomes); see tvm_transfer.tuning.task_selection.
    status: list[str] = field(default_factory=list)
    selection: dict = field(default_factory=dict)

    @property
    def weighted_latency(self) -> float:
        """Sum over tasks of weight x best latency, in seconds (the network's tuned operator time)."""
        return sum(weight * best for _, weight, _, best, _ in self.tasks)

    def table(self) -> str:
        lines = [f"{'task':<56} {'weight':>6} {'MFLOP':>9} {'best ms':>9} {'GFLOPS':>8} {'trials':>6}"]
        if self.status:
            lines[0] += "  status"
        for i, (task, weight, flops, best, trials) in enumerate(self.tasks):
            gflops = flops / best / 1e9 if np.isfinite(best) else 0.0
            row = f"{task[:56]:<56} {weight:>6g} {flops / 1e6:>9.2f} {best * 1e3:>9.4f} {gflops:>8.1f}"
            lines.append(f"{row} {trials:>6}" + (f"  {self.status[i]}" if self.status else ""))
        latency = f"{self.weighted_latency * 1e3:.4f} ms"
        if self.status and not np.isfinite(self.weighted_latency):
            # Tasks on TVM's default lowering were not measured: sum the others only.
            known = sum(w * best for _, w, _, best, _ in self.tasks if np.isfinite(best))
            latency = f"{known * 1e3:.4f} ms over the tuned and transferred tasks"
        lines.append(
            f"{self.name} on {self.target} with {self.cost_model}: weighted latency "
            f"{latency}, {self.new_trials} trials in {self.tuning_seconds:.1f} s"
        )
        return "\n".join(lines)


def extract_network_tasks(name: str, target: tvm.target.Target) -> list:
    """The MetaSchedule tasks (``ExtractedTask``: name, module, weight) of a network of
    :data:`tvm_transfer.networks.NETWORKS`, extracted as ``compile_network`` will look them up."""
    from tvm_transfer.networks import fused_for_extraction, import_network, prepare_for_inference

    mod = prepare_for_inference(import_network(name))
    return list(ms.relax_integration.extract_tasks(fused_for_extraction(mod, target), target))


@meta_schedule_log_level()
def tune_network(
    name: str,
    work_dir: str | Path,
    *,
    cost_model: str | ms.CostModel = "xgboost",
    target: tvm.target.Target | dict | None = None,
    options: TuneOptions | None = None,
    tasks: Sequence | None = None,
    measure: Measurement | None = None,
    selection: TaskSelection | None = None,
    search_strategy: ms.search_strategy.SearchStrategy | None = None,
) -> NetworkTuneResult:
    """Tune every task of a network of :data:`tvm_transfer.networks.NETWORKS`; ``options.trials`` is the
    budget for the whole network (measured records already in ``work_dir`` count), shared by
    MetaSchedule's gradient task scheduler. ``tasks`` restricts the run to some of the network's
    :func:`extract_network_tasks` (default: all); ``measure`` supplies a builder, runner or progress bar.

    With ``selection`` (a :class:`tvm_transfer.tuning.task_selection.TaskSelection`) only the tasks
    carrying most
    of the network's FLOPs are tuned, each for a budget proportional to its weight x FLOPs, and the other
    tasks get schedules transferred from similar tuned tasks; ``None`` keeps the gradient scheduler over
    all tasks. ``search_strategy`` replaces the default evolutionary search; every task tunes its own clone
    (e.g. a :class:`tvm_transfer.search_strategy.copula.CopulaSearch`, which then seeds each task from
    its own source
    tasks)."""
    options = options or TuneOptions()
    strategy = search_strategy or _evolutionary(options)
    target = as_target(target)
    import_tensor_intrin_fast()
    extracted = list(tasks) if tasks is not None else extract_network_tasks(name, target)
    if selection is not None:
        from tvm_transfer.tuning.task_selection import tune_selected

        return tune_selected(
            name, extracted, work_dir, cost_model=cost_model, target=target, options=options,
            selection=selection, measure=measure, search_strategy=strategy,
        )  # fmt: skip
    contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
        extracted, str(work_dir), strategy=strategy, num_threads=_num_threads(options),
        seed=options.seed,
    )  # fmt: skip
    latencies, profile, _, elapsed, records = _tune_contexts(
        list(contexts), list(weights), Path(work_dir), cost_model, options, measure
    )
    tasks = [
        (
            task.task_name,
            float(task.weight),
            float(tvm.s_tir.analysis.estimate_tir_flops(task.dispatched[0])),
            _best_seconds(task_records),
            len(task_records),
        )
        for task, task_records in zip(extracted, records, strict=True)
    ]
    return NetworkTuneResult(
        name=name,
        target=str(target),
        cost_model=cost_model if isinstance(cost_model, str) else type(cost_model).__name__,
        tasks=tasks,
        new_trials=len(latencies),
        tuning_seconds=elapsed,
        profile=profile,
    )


@dataclass
class CompileResult:
    """A network built with a tuned database and run once: its error against PyTorch and its speed."""

    name: str
    max_abs_error: float
    tvm_seconds: float
    torch_seconds: float

    def table(self) -> str:
        return (
            f"{self.name}: max |TVM - PyTorch| = {self.max_abs_error:.3g}; "
            f"TVM {self.tvm_seconds * 1e3:.4f} ms, PyTorch {self.torch_seconds * 1e3:.4f} ms "
            f"({self.torch_seconds / self.tvm_seconds:.2f}x)"
        )


def compile_network(
    name: str, work_dir: str | Path, *, target: tvm.target.Target | dict | None = None
) -> CompileResult:
    """Build network ``name`` with the schedules tuned in ``work_dir``, run it, and compare with PyTorch.

    Operators without a tuned schedule are compiled with TVM's default (unscheduled) lowering.
    """
    from tvm import relax

    from tvm_transfer.networks import NETWORKS, import_network, prepare_for_inference

    target = as_target(target)
    import_tensor_intrin_fast()
    network = import_network(name)
    executable = ms.relax_integration.compile_relax(
        _database(Path(work_dir)), prepare_for_inference(network), target, params=None
    )
    vm = relax.VirtualMachine(executable, tvm.cpu())
    data = tvm.runtime.tensor(network.example_input)
    output = vm["main"](data)
    output = output[0] if isinstance(output, tvm.ir.Array | list | tuple) else output
    error = float(np.max(np.abs(output.numpy() - network.torch_output)))
    timer = vm.time_evaluator("main", tvm.cpu(), number=10, repeat=3, min_repeat_ms=100)
    tvm_seconds = float(np.median(timer(data).results))
    return CompileResult(name, error, tvm_seconds, _torch_seconds(NETWORKS[name], network.example_input))


def _torch_seconds(spec, example: np.ndarray) -> float:
    import torch

    from tvm_transfer.workloads import median_seconds

    torch.manual_seed(0)
    model = spec.factory().eval()
    x = torch.from_numpy(example)
    with torch.no_grad():
        return median_seconds(lambda: model(x), min_seconds=0.2, repeats=5)
