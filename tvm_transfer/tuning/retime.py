"""Re-timing scheduled programs together: each built once, then timed in interleaved rounds, the fastest
round kept. What a tuner's single timing of a candidate cannot give on a shared machine: a ranking of
programs measured under the same conditions."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping

import numpy as np
import tvm
from tvm.s_tir import meta_schedule as ms

from tvm_transfer.common.errors import failure_line
from tvm_transfer.runner import runner_seconds, shared_builder, shared_local_runner

__all__ = ["RETIME_BUILD_TIMEOUT", "RETIME_ROUNDS", "retime"]

log = logging.getLogger(__name__)


#: Interleaved timing rounds of :func:`retime`: enough for the fastest of them to be steadier than the median
#: of fewer rounds (``docs/copula_search.md``, "Why re-timed", has the measurement).
RETIME_ROUNDS = 8
#: Build time limit of a re-timed program, in seconds: far above the tuning's, since a pick built in tuning
#: may take longer to build again beside the others (a heavily unrolled kernel builds for about a minute).
RETIME_BUILD_TIMEOUT = 600.0


def retime(
    mods: Mapping[str, tvm.IRModule],
    target: tvm.target.Target,
    rounds: int = RETIME_ROUNDS,
    num_threads: int | None = None,
    cold_caches: bool = False,
) -> dict[str, float]:
    """Fastest latency (seconds; ``inf`` = failed) of each MetaSchedule-scheduled module over ``rounds``
    timings, keyed as given.

    One timing of a microsecond-scale kernel on a small shared machine can be far off (the same schedule
    timed back to back differs), so a benchmark that ranks candidates by the tuner's single timing ranks
    noise. The noise comes in bursts that slow every program timed during them, most with two threads on
    two cores (a stalled thread holds up the other at every barrier). It only ever slows a program down, so
    the minimum over rounds estimates the undisturbed latency (``docs/copula_search.md``, "Why re-timed",
    has the measurements). Every module is built once and
    timed in ``rounds`` interleaved rounds (each round times every module once, with the tuner's evaluator
    settings, or with ``cold_caches`` the caches flushed before every run, as
    :func:`~tvm_transfer.runner.cold_evaluator_config` says). ``num_threads``: as for
    :func:`tvm_transfer.runner.local_runner` (the tuning run's setting).
    """
    keys = list(mods)
    built = shared_builder(RETIME_BUILD_TIMEOUT).build(
        [ms.builder.BuilderInput(mods[k], target) for k in keys]
    )
    for k, b in zip(keys, built, strict=True):
        if b.error_msg is not None:
            log.warning("re-timing %s: the build failed: %s", k, failure_line(b.error_msg))
    inputs = {
        k: ms.runner.RunnerInput(b.artifact_path, "cpu", ms.arg_info.ArgInfo.from_entry_func(mods[k], True))
        for k, b in zip(keys, built, strict=True)
        if b.error_msg is None
    }
    runner = shared_local_runner(num_threads=num_threads, cold_caches=cold_caches)
    timings: dict[str, list[float]] = {k: [] for k in keys}
    failed: set[str] = set()
    for _ in range(rounds):
        for k, future in zip(inputs, runner.run(list(inputs.values())), strict=True):
            result = future.result()
            timings[k].append(runner_seconds(result))
            if result.error_msg and k not in failed:
                failed.add(k)
                log.warning("re-timing %s: a run failed: %s", k, failure_line(result.error_msg))
    return {k: float(np.min(t)) if t else math.inf for k, t in timings.items()}
