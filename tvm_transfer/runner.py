"""Runner settings shared by every tuning run, collection and benchmark, and the latency of a run."""

from __future__ import annotations

import functools
import os
import time

import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from tenset_tools.metaschedule import mean_run_seconds


def evaluator_config(number: int = 3, repeat: int = 1, min_repeat_ms: int = 50) -> ms.runner.EvaluatorConfig:
    """Time each candidate ``repeat`` times, each the mean of ``number`` runs lasting at least
    ``min_repeat_ms`` milliseconds in total (the settings of every runner here)."""
    return ms.runner.EvaluatorConfig(number=number, repeat=repeat, min_repeat_ms=min_repeat_ms)


def local_runner(
    number: int = 3,
    repeat: int = 1,
    min_repeat_ms: int = 50,
    timeout_sec: float = 30.0,
    num_threads: int | None = None,
) -> ms.runner.LocalRunner:
    """A ``LocalRunner`` with :func:`evaluator_config`. ``num_threads`` sets the threads the measured
    programs run on (TVM's ``TVM_NUM_THREADS``, set in the runner's worker before its thread pool starts),
    so that a target is measured on as many cores as its ``num-cores``. Without it TVM's runtime takes
    half the logical CPUs (it assumes hyper-threading): a single thread on a 2-vCPU machine."""
    initializer = functools.partial(_limit_threads, num_threads) if num_threads else None
    return ms.runner.LocalRunner(
        timeout_sec=timeout_sec,
        evaluator_config=evaluator_config(number, repeat, min_repeat_ms),
        initializer=initializer,
    )


def target_runner(target: tvm.target.Target) -> ms.runner.LocalRunner:
    """A :func:`local_runner` measuring on as many threads as ``target``'s ``num-cores`` (TVM's default
    when the target does not say)."""
    return local_runner(num_threads=int(target.attrs.get("num-cores", 0)) or None)


def runner_seconds(result: ms.runner.RunnerResult) -> float:
    """Mean measured latency of a runner result in seconds; ``inf`` when the run failed, including results
    rebuilt from database records, which carry MetaSchedule's 1e10-second failure marker."""
    return float("inf") if result.error_msg else mean_run_seconds(result.run_secs)


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


@derived_object
class TimedRunner(ms.runner.PyRunner):
    """A ``LocalRunner`` that runs candidates one at a time and records each one's wall seconds.

    The local runner has one worker process and runs its inputs one after the other anyway; running them
    one by one only makes the wall time of each candidate visible. After a timeout the killed worker is
    restarted right away, so that the restart is charged to the candidate that caused it.
    """

    def __init__(self, runner: ms.runner.LocalRunner) -> None:
        super().__init__()
        self.inner = runner
        self.walls: dict[str, float] = {}  # artifact path -> wall seconds

    def run(self, runner_inputs: list[ms.runner.RunnerInput]) -> list[ms.runner.RunnerFuture]:
        futures = []
        for runner_input in runner_inputs:
            start = time.perf_counter()
            (future,) = self.inner.run([runner_input])
            result = future.result()
            if result.error_msg and "timeout" in result.error_msg.lower():
                self.inner.pool.submit(_start_worker).result()
            self.walls[str(runner_input.artifact_path)] = time.perf_counter() - start
            futures.append(_DoneFuture(result))
        return futures
