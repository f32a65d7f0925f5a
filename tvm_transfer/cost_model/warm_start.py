"""Training a cost model on records an earlier run measured, as MetaSchedule's own models learn a batch."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tvm.s_tir import meta_schedule as ms

from tenset_tools.metaschedule import mean_run_seconds

__all__ = ["warm_start"]


def warm_start(
    cost_model: ms.CostModel, context: ms.TuneContext, records: Sequence[ms.database.TuningRecord]
) -> None:
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
