"""A builder that keeps MetaSchedule's measurement overhead down on small machines.

``import tvm.s_tir.tensor_intrin`` takes tens of seconds per process here because TVMScript's parser calls
``inspect.stack()`` (which scans ``sys.modules`` for every frame) for each of hundreds of intrinsic
definitions. MetaSchedule's default builder imports it in every fresh worker of every batch, so builds hit
the build time-out and the candidates are silently stored as failures. Building an already scheduled module
does not need the intrinsic registry (tensorization happened when the schedule was made, in the tuning
process), so :func:`fast_build` skips that import. The tuning process itself still needs the registry;
there a cheap frame walker stands in for ``inspect.stack`` during the import
(:mod:`tenset_tools.features.context`).
"""

from __future__ import annotations

from typing import Any

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.support.popen_pool import MapResult, PopenPoolExecutor, StatusKind

from tenset_tools.features.context import import_tensor_intrin_fast
from tvm_transfer.target import host_core_count

__all__ = ["PersistentBuilder", "build_and_export", "fast_build", "import_tensor_intrin_fast"]


def fast_build(mod: Any, target: Any, _params: Any) -> Any:
    """MetaSchedule's default build without the ``tensor_intrin`` import (runs in builder workers), with
    the vectorisable ``exp`` and ``erf`` of :mod:`tvm_transfer.fast_math` that compiled networks use."""
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    from tvm_transfer.fast_math import use_fast_math

    use_fast_math()
    return tvm_build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)


def build_and_export(mod: Any, target: Any) -> str:
    """Build a scheduled module with :func:`fast_build` and export it; returns the artifact's path."""
    return ms.builder.local_builder.default_export(fast_build(mod, target, None))


@derived_object
class PersistentBuilder(ms.builder.PyBuilder):
    """A builder whose worker processes outlive a batch.

    MetaSchedule's ``LocalBuilder`` starts fresh workers for every batch (each paying TVM's import time)
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
        """Build and export each input in the worker pool (started on first use)."""
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
