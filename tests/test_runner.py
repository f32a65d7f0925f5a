"""The runner's deadline, on real measurements: a candidate that runs past it has its worker killed and
fails saying so, and the next candidate is measured by a fresh worker."""

from __future__ import annotations

from ms_helpers import sample_candidates, tune_context
from tvm.s_tir import meta_schedule as ms

from tvm_transfer.builder import PersistentBuilder
from tvm_transfer.runner import TimedRunner, evaluator_config, local_runner, runner_seconds


def test_a_measurement_past_the_deadline_is_killed_and_the_next_one_runs(target, matmul):
    context = tune_context(matmul, target)
    candidates = sample_candidates(context, 2)
    builder = PersistentBuilder()
    try:
        builds = builder.build([ms.builder.BuilderInput(c.sch.mod, target) for c in candidates])
    finally:
        builder.shutdown()
    inputs = [
        ms.runner.RunnerInput(b.artifact_path, "cpu", c.args_info)
        for b, c in zip(builds, candidates, strict=True)
    ]
    # Each measurement lasts at least 30 s, well inside the local runner's own timeout of 60 s.
    runner = TimedRunner(local_runner(number=1, min_repeat_ms=30_000, timeout_sec=60), deadline_sec=2)
    try:
        (killed,) = [f.result() for f in runner.run(inputs[:1])]
        assert killed.error_msg.startswith("TimedRunner: no result after 2 s") and runner.overruns == 1
        # Killed at the deadline, not measured to the end: the candidate's wall time is the deadline plus
        # the start of a fresh worker (seconds on a slow machine).
        assert runner.walls[str(inputs[0].artifact_path)] < 20
        runner.deadline_sec = 60
        runner.inner.evaluator_config = evaluator_config(number=1, repeat=1, min_repeat_ms=0)
        (measured,) = [f.result() for f in runner.run(inputs[1:])]
        assert measured.error_msg is None and 0 < runner_seconds(measured) < 1
    finally:
        runner.pool.shutdown()
