"""MetaSchedule measure callbacks of tuning runs."""

from __future__ import annotations

import numpy as np
from tqdm.auto import tqdm
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from tvm_transfer.runner import batch_seconds, runner_seconds


@derived_object
class ProgressCallback(ms.measure_callback.PyMeasureCallback):
    """Measure callback that advances a progress bar per measured batch and records the latencies.

    A runner that reports each result as it comes in (see :meth:`measured`) moves the bar at once; the
    batch's join then adds only what it did not count: its build failures."""

    def __init__(self, total: int, enabled: bool = True, bar: tqdm | None = None) -> None:
        super().__init__()
        self.latencies: list[float] = []
        self._counted_early = 0  # candidates counted by `measured` whose batch is not joined yet
        # A caller's bar (e.g. one over a whole collection) is advanced but left open.
        self._own_bar = bar is None
        self._bar = (
            bar if bar is not None else tqdm(total=total, unit="trial", disable=not enabled, desc="tuning")
        )

    def apply(
        self,
        task_scheduler: ms.task_scheduler.TaskScheduler,
        task_id: int,
        measure_candidates: list[ms.MeasureCandidate],
        builder_results: list[ms.builder.BuilderResult],
        runner_results: list[ms.runner.RunnerResult],
    ) -> None:
        """Record the batch's latencies in seconds (``inf`` for failures) and advance the bar."""
        self.latencies.extend(batch_seconds(builder_results, runner_results))
        finite = [x for x in self.latencies if np.isfinite(x)]
        if finite:
            self._bar.set_postfix(best=f"{min(finite) * 1e3:.4g} ms")
        early = min(self._counted_early, sum(built.error_msg is None for built in builder_results))
        self._counted_early -= early
        self._bar.update(len(runner_results) - early)

    def measured(self) -> None:
        """Advance the bar by one candidate whose measurement just ended, before its batch is joined."""
        self._counted_early += 1
        self._bar.update(1)

    def close(self) -> None:
        """Close the bar if this callback created it."""
        if self._own_bar:
            self._bar.close()


@derived_object
class FailureLog(ms.measure_callback.PyMeasureCallback):
    """Records every measured candidate: its outcome (ok / build / timeout / run) and latency (seconds)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict] = []

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        for built, ran in zip(builder_results, runner_results, strict=True):
            if built.error_msg:
                kind, message = "build", built.error_msg
            elif ran.error_msg:
                kind = "timeout" if "timeout" in ran.error_msg.lower() else "run"
                message = ran.error_msg
            else:
                kind, message = "ok", ""
            self.rows.append(
                {
                    "kind": kind,
                    "error": message.strip().splitlines()[-1][:160] if message else "",
                    "seconds": runner_seconds(ran) if kind == "ok" else float("inf"),
                    "artifact": str(built.artifact_path) if built.artifact_path else None,
                }
            )
