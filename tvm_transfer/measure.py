"""Builders and runners that keep MetaSchedule's measurement overhead down on small machines.

``import tvm.s_tir.tensor_intrin`` takes 25-35 s per process here because TVMScript's parser calls
``inspect.stack()`` (which scans ``sys.modules`` for every frame) for each of ~500 intrinsic definitions.
MetaSchedule's default builder imports it in every fresh worker of every batch, so builds hit the 30 s
time-out and the candidates are silently stored as failures. Building an already scheduled module does not
need the intrinsic registry (tensorization happened when the schedule was made, in the tuning process), so
:func:`fast_build` skips that import: 64 conv2d candidates built in 18.4 s instead of 24.9 s with the cheap
import below (2 workers). The tuning process itself still needs the registry; there a cheap frame walker
stands in for ``inspect.stack`` during the import (:mod:`tenset_tools.features.context`).
"""

from __future__ import annotations

import functools
import os
from typing import Any

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.support.popen_pool import MapResult, PopenPoolExecutor, StatusKind

from tenset_tools.features.context import import_tensor_intrin_fast
from tvm_transfer.target import host_core_count

__all__ = [
    "PersistentBuilder",
    "build_and_export",
    "evaluator_config",
    "fast_build",
    "import_tensor_intrin_fast",
    "local_runner",
]


def fast_build(mod: Any, target: Any, _params: Any) -> Any:
    """MetaSchedule's default build without the ``tensor_intrin`` import (runs in builder workers)."""
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return tvm_build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)


def build_and_export(mod: Any, target: Any) -> str:
    """Build a scheduled module with :func:`fast_build` and export it; returns the artifact's path."""
    return ms.builder.local_builder.default_export(fast_build(mod, target, None))


@derived_object
class PersistentBuilder(ms.builder.PyBuilder):
    """A builder whose worker processes outlive a batch.

    MetaSchedule's ``LocalBuilder`` starts fresh workers for every batch (each paying ~1-3 s to import TVM)
    to sidestep a slow memory leak in long-lived workers; here each worker is instead recycled after
    ``max_uses`` builds, which bounds the leak and keeps start-up off the critical path of every batch.

    Parameters
    ----------
    max_workers:
        Build processes (default: one per available core).
    timeout_sec:
        Per-candidate build time limit, in seconds; a worker over it is killed and the candidate fails.
    max_uses:
        Builds after which a worker process is replaced.
    """

    def __init__(self, max_workers: int | None = None, timeout_sec: float = 60.0, max_uses: int = 64) -> None:
        super().__init__()
        self.max_workers = max_workers or host_core_count()
        self.timeout_sec = timeout_sec
        self.max_uses = max_uses
        self._pool: PopenPoolExecutor | None = None

    def build(self, build_inputs: list[ms.builder.BuilderInput]) -> list[ms.builder.BuilderResult]:
        if self._pool is None:
            self._pool = PopenPoolExecutor(
                max_workers=self.max_workers, timeout=self.timeout_sec, maximum_process_uses=self.max_uses
            )
        jobs = [(build_input.mod, build_input.target) for build_input in build_inputs]
        return [
            _builder_result(r, self.timeout_sec) for r in self._pool.map_with_error_catching(_build_job, jobs)
        ]

    def shutdown(self) -> None:
        """Stop the worker processes (they are started again by the next ``build``)."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


def _build_job(job: tuple[Any, Any]) -> str:
    return build_and_export(*job)


def _builder_result(result: MapResult, timeout_sec: float) -> ms.builder.BuilderResult:
    if result.status == StatusKind.COMPLETE:
        return ms.builder.BuilderResult(result.value, None)
    if result.status == StatusKind.TIMEOUT:
        return ms.builder.BuilderResult(None, f"PersistentBuilder: timeout, killed after {timeout_sec} s")
    return ms.builder.BuilderResult(None, f"PersistentBuilder: an exception occurred\n{result.value}")


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


def _limit_threads(num_threads: int) -> None:
    os.environ["TVM_NUM_THREADS"] = str(num_threads)
