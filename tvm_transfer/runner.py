"""Runner settings shared by every tuning run, collection and benchmark, the builder and runner workers
that the runs of one process share, and the latency of a run."""

from __future__ import annotations

import atexit
import functools
import inspect
import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable, Sequence

import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.support.popen_pool import PopenPoolExecutor, kill_child_processes

from tenset_tools.metaschedule import mean_run_seconds
from tvm_transfer.builder import PersistentBuilder

#: Single runs in one timing with cold caches (:func:`cold_evaluator_config`): their mean steadies it.
COLD_RUNS = 10
#: Measurements after which a runner's worker process is replaced (see :func:`local_runner`).
RUNNER_WORKER_USES = 128


def evaluator_config(number: int = 3, repeat: int = 1, min_repeat_ms: int = 50) -> ms.runner.EvaluatorConfig:
    """Time each candidate ``repeat`` times, each the mean of ``number`` runs lasting at least
    ``min_repeat_ms`` milliseconds in total (the settings of every runner here). Back to back, the runs
    find the program's data in the caches the earlier runs filled: a warm timing."""
    return ms.runner.EvaluatorConfig(number=number, repeat=repeat, min_repeat_ms=min_repeat_ms)


def cold_evaluator_config(runs: int = COLD_RUNS) -> ms.runner.EvaluatorConfig:
    """Time each candidate as the mean of ``runs`` single runs, each after the CPU caches are flushed of
    every argument but the first (TVM's ``cache_flush_cpu_non_first_arg``): the latency of a layer whose
    weights arrive from memory while its input, just written by the layer before, is still cached."""
    return ms.runner.EvaluatorConfig(number=1, repeat=runs, min_repeat_ms=0, enable_cpu_cache_flush=True)


def local_runner(
    number: int = 3,
    repeat: int = 1,
    min_repeat_ms: int = 50,
    timeout_sec: float = 30.0,
    num_threads: int | None = None,
    cold_caches: bool = False,
) -> ms.runner.LocalRunner:
    """A ``LocalRunner`` with :func:`evaluator_config`, or with ``cold_caches`` with
    :func:`cold_evaluator_config` (``number``, ``repeat`` and ``min_repeat_ms`` then unused).
    ``num_threads`` sets the threads the measured programs run on (TVM's ``TVM_NUM_THREADS``, set in the
    runner's worker before its thread pool starts), so that a target is measured on as many cores as its
    ``num-cores``. Without it TVM's runtime takes half the logical CPUs (it assumes hyper-threading): a
    single thread on a 2-vCPU machine."""
    initializer = functools.partial(_limit_threads, num_threads) if num_threads else None
    evaluator = cold_evaluator_config() if cold_caches else evaluator_config(number, repeat, min_repeat_ms)
    runner = ms.runner.LocalRunner(
        timeout_sec=timeout_sec, evaluator_config=evaluator, initializer=initializer
    )
    # MetaSchedule's runner keeps one worker process for its lifetime, and the worker's memory grows with
    # every program it measures (by megabytes for a network's large layers): a runner shared by a long run
    # filled a 24 GB machine. Its worker is therefore replaced after every RUNNER_WORKER_USES measurements.
    runner.pool.shutdown()
    runner.pool = PopenPoolExecutor(
        max_workers=1,
        timeout=timeout_sec,
        initializer=initializer,
        maximum_process_uses=RUNNER_WORKER_USES,
        stderr=subprocess.STDOUT if logging.root.level <= logging.DEBUG else subprocess.DEVNULL,
    )
    return runner


def measuring_threads(target: tvm.target.Target) -> int | None:
    """Threads a program is measured on for ``target``: its ``num-cores``; ``None`` (TVM's default) when the
    target does not say."""
    return int(target.attrs.get("num-cores", 0)) or None


def network_threads(target: tvm.target.Target) -> int:
    """Threads a compiled network runs on for ``target``: its ``num-cores``, else every CPU."""
    return measuring_threads(target) or os.cpu_count() or 1


@functools.cache
def shared_builder(timeout_sec: float = 60.0) -> PersistentBuilder:
    """The process's :class:`~tvm_transfer.builder.PersistentBuilder` with a build limit of ``timeout_sec``
    seconds, made on first use and shut down when the process exits.

    Every worker process pays TVM's import (seconds of CPU) once; sharing the workers between the runs,
    re-timings and collections of one process pays it once per process instead of once per run."""
    builder = PersistentBuilder(timeout_sec=timeout_sec)
    atexit.register(builder.shutdown)
    return builder


def shared_local_runner(**settings) -> ms.runner.LocalRunner:
    """The process's :func:`local_runner` with ``settings`` (its keyword arguments, defaults filled in),
    made on first use and shut down when the process exits (its worker is shared for the reason
    :func:`shared_builder` gives). A worker killed during one run is restarted by the next measurement
    (:class:`TimedRunner` restarts it at once)."""
    bound = inspect.signature(local_runner).bind(**settings)
    bound.apply_defaults()
    return _shared_local_runner(*bound.args)


@functools.cache
def _shared_local_runner(*settings) -> ms.runner.LocalRunner:
    # Cached on the settings in :func:`local_runner`'s order, however the caller spelled them.
    runner = local_runner(*settings)
    atexit.register(runner.pool.shutdown)
    return runner


def measuring_workers(
    target: tvm.target.Target | None = None,
    *,
    builder: ms.builder.Builder | None = None,
    runner: ms.runner.Runner | None = None,
    **runner_options,
) -> tuple[ms.builder.Builder, ms.runner.Runner]:
    """The builder and runner of one run, as ``(builder, runner)``: ``builder`` and ``runner`` when given,
    else the :func:`shared_builder` and a fresh :class:`TimedRunner` on the :func:`shared_local_runner` of
    ``runner_options`` (``num_threads`` defaults to :func:`measuring_threads` of ``target``)."""
    if builder is None:
        builder = shared_builder()
    if runner is None:
        if target is not None:
            runner_options.setdefault("num_threads", measuring_threads(target))
        runner = TimedRunner(shared_local_runner(**runner_options))
    return builder, runner


def runner_seconds(result: ms.runner.RunnerResult) -> float:
    """Mean measured latency of a runner result in seconds; ``inf`` when the run failed, including results
    rebuilt from database records, which carry MetaSchedule's 1e10-second failure marker."""
    return float("inf") if result.error_msg else mean_run_seconds(result.run_secs)


def batch_seconds(
    builder_results: Sequence[ms.builder.BuilderResult], runner_results: Sequence[ms.runner.RunnerResult]
) -> list[float]:
    """The latencies of a measured batch, as a measure callback receives it: per candidate its
    :func:`runner_seconds`, ``inf`` for one that failed to build."""
    return [
        float("inf") if built.error_msg else runner_seconds(ran)
        for built, ran in zip(builder_results, runner_results, strict=True)
    ]


def _limit_threads(num_threads: int) -> None:
    os.environ["TVM_NUM_THREADS"] = str(num_threads)


@derived_object
class _DoneFuture(ms.runner.PyRunnerFuture):
    """A runner future whose result is already known."""

    def __init__(self, result: ms.runner.RunnerResult) -> None:
        super().__init__()
        self._result = result

    def done(self) -> bool:
        return True

    def result(self) -> ms.runner.RunnerResult:
        return self._result


def _start_worker() -> int:
    return os.getpid()


#: Seconds a measurement may run past the runner's own timeout before :class:`TimedRunner` kills its worker.
DEADLINE_GRACE_SEC = 120.0


@derived_object
class TimedRunner(ms.runner.PyRunner):
    """A ``LocalRunner`` that runs candidates one at a time, records each one's wall seconds, and never
    waits on a measurement longer than ``deadline_sec``.

    The local runner has one worker process and runs its inputs one after the other anyway; running them
    one by one makes the wall time of each candidate visible. After a timeout the killed worker is
    restarted right away, so that the restart is charged to the candidate that caused it.

    The local runner's own timeout is a timer inside the worker, armed once the worker has started and read
    the job; a worker stuck before that (starting, importing) or never letting the timer run leaves the
    tuning run waiting for ever. The deadline is kept here instead: past it the worker is killed, the
    candidate fails with an error that says so, and the next one starts a fresh worker.

    Parameters
    ----------
    runner:
        The ``LocalRunner`` measuring (e.g. :func:`local_runner`).
    deadline_sec:
        Wall seconds one measurement of one candidate may take, worker start included; ``None``: the
        runner's timeout plus :data:`DEADLINE_GRACE_SEC`.

    Attributes
    ----------
    on_result:
        Called with each runner input and its result as soon as it is known (``None``: nothing is), e.g.
        to commit the record at once (:class:`~tvm_transfer.tuning.recording.RecordOnMeasure`).
    """

    def __init__(self, runner: ms.runner.LocalRunner, deadline_sec: float | None = None) -> None:
        super().__init__()
        self.inner = runner
        self.deadline_sec = runner.timeout_sec + DEADLINE_GRACE_SEC if deadline_sec is None else deadline_sec
        self.walls: dict[str, float] = {}  # artifact path -> wall seconds
        self.overruns = 0
        self.on_result: Callable[[ms.runner.RunnerInput, ms.runner.RunnerResult], None] | None = None

    @property
    def pool(self):
        """The local runner's worker pool (``shutdown()`` it when done, unless it is a shared runner's)."""
        return self.inner.pool

    def run(self, runner_inputs: list[ms.runner.RunnerInput]) -> list[ms.runner.RunnerFuture]:
        """Measure ``runner_inputs`` one at a time and return their results as finished futures; each
        result is handed to :attr:`on_result` as soon as it is measured, so a run stopped half way keeps
        what it measured."""
        results = []
        for runner_input in runner_inputs:
            results.append(self._measure(runner_input))
            self._hand_on(runner_input, results[-1])
        return [_DoneFuture(result) for result in results]

    def _measure(self, runner_input: ms.runner.RunnerInput) -> ms.runner.RunnerResult:
        """One measurement of one candidate under the deadline; its wall seconds add to :attr:`walls`."""
        start = time.perf_counter()
        overran = threading.Event()
        deadline = threading.Timer(self.deadline_sec, self._kill_workers, [overran])
        deadline.daemon = True
        deadline.start()
        try:
            (future,) = self.inner.run([runner_input])
            result = future.result()
        finally:
            deadline.cancel()
        if overran.is_set():
            self.overruns += 1
            result = ms.runner.RunnerResult(
                run_secs=None,
                error_msg=f"TimedRunner: no result after {self.deadline_sec:g} s; its worker was killed",
            )
            self._restart_worker()
        elif result.error_msg and "timeout" in result.error_msg.lower():
            self._restart_worker()
        key = str(runner_input.artifact_path)
        self.walls[key] = self.walls.get(key, 0.0) + time.perf_counter() - start
        return result

    def _hand_on(self, runner_input: ms.runner.RunnerInput, result: ms.runner.RunnerResult) -> None:
        """Pass one candidate's final result to :attr:`on_result`, if set."""
        if self.on_result is not None:
            self.on_result(runner_input, result)

    def _kill_workers(self, overran: threading.Event) -> None:
        # Only the processes are killed, from this timer thread: the thread waiting for the result then
        # reads the end of the pipe and cleans the worker up itself.
        overran.set()
        for worker in list(self.inner.pool._worker_map.values()):
            process = worker._proc
            if process is not None and process.poll() is None:
                kill_child_processes(process.pid)
                process.kill()

    def _restart_worker(self) -> None:
        # A worker killed while idle (the deadline fired as its result came in) fails the first job sent
        # to it and is restarted by the next.
        for _ in range(2):
            try:
                self.inner.pool.submit(_start_worker).result()
                return
            except ChildProcessError:
                continue
